package fleet

import (
	"strings"
	"testing"
)

func TestParseDataset(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		rows     int
		err      string
	}{
		{"rows and blank lines", "{\"prompt\": \"a\", \"label\": \"1\"}\n\n{\"prompt\": \"b\", \"env\": \"game:GuessTheNumber-v0\"}\n", 2, ""},
		{"bad line is named", "{\"prompt\": \"a\"}\n{oops\n", 0, "line 2"},
		{"empty", "\n  \n", 0, "no rows"},
		{"wrong type", `{"prompt": 5}`, 0, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ParseDataset([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil || len(rows) != tc.rows {
				t.Fatalf("got %d rows, %v", len(rows), err)
			}
		})
	}
}

func FuzzParseDataset(f *testing.F) {
	f.Add([]byte("{\"prompt\": \"a\", \"label\": \"1\", \"env\": \"x\"}\n"))
	f.Add([]byte("{oops"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ParseDataset(data)
		if err == nil && len(rows) == 0 {
			t.Fatal("success with no rows")
		}
	})
}
