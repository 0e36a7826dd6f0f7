package cmdutil

import "testing"

func TestInFlight(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want InFlight
		ok   bool
	}{
		{"auto", 0, true}, {"64", 64, true}, {"1", 1, true},
		{"0", 0, false}, {"-3", 0, false}, {"Auto", 0, false}, {"", 0, false}, {"12x", 0, false},
	} {
		var f InFlight
		err := f.UnmarshalText([]byte(tc.in))
		if (err == nil) != tc.ok || f != tc.want {
			t.Errorf("%q: %v, %v; want %v (ok %v)", tc.in, f, err, tc.want, tc.ok)
		}
		if err == nil && f.String() != tc.in {
			t.Errorf("%q prints as %q", tc.in, f.String())
		}
	}
}
