package envs

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"game:GuessTheNumber-v0", []string{"game:GuessTheNumber-v0"}, ""},
		{"game:GuessTheNumber-v0-hard, game:GuessTheNumber-v0", []string{"game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0"}, ""},
		{"game:GuessTheNumber-v0-*", []string{"game:GuessTheNumber-v0-easy", "game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0-random"}, ""},
		{"game:GuessTheNumber-v0-easy,game:GuessTheNumber-v0-e*", []string{"game:GuessTheNumber-v0-easy"}, ""},
		{"game:Nope", nil, "known ids"},
		{"", nil, "no env"},
		{"game:[", nil, "pattern"},
	} {
		got, err := Match(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Match(%q): want error with %q, got %v", tc.in, tc.err, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Match(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	all, err := Match("game:*")
	games := slices.DeleteFunc(IDs(), func(id string) bool { return !strings.HasPrefix(id, "game:") })
	if err != nil || !slices.Equal(all, games) {
		t.Errorf("game:* = %v, %v; want every game id", all, err)
	}
	if _, err := Match("nothing:*"); !errors.Is(err, ErrUnknownEnv) {
		t.Errorf("want ErrUnknownEnv, got %v", err)
	}
}
