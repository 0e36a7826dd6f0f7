package nemogym

import (
	"encoding/json"
	"testing"
)

func TestAppendRaw(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": [1, 2] }`, `x:{"a":[1,2]}`},
		{``, `x:null`},
		{`{"a": `, `x:null`},
		{`[1] [2]`, `x:null`},
	} {
		if got := string(appendRaw([]byte("x:"), json.RawMessage(tc.in))); got != tc.want {
			t.Errorf("appendRaw(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
