package trainer

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAckToken(t *testing.T) {
	for _, tc := range []struct {
		in               string
		stream, consumer string
		seq              uint64
		ok               bool
	}{
		{"$JS.ACK.RF_GROUPS.batch-x-group.1.42.7.1700000000000000000.0", "RF_GROUPS", "batch-x-group", 42, true},
		{"$JS.ACK.dom.ACCHASH.RF_FAILURES.batch-y-failure.2.9.3.1700000000000000000.5", "RF_FAILURES", "batch-y-failure", 9, true},
		{"$JS.ACK.dom.ACCHASH.RF_FAILURES.batch-y-failure.2.9.3.1700000000000000000.5.rnd", "RF_FAILURES", "batch-y-failure", 9, true},
		{"", "", "", 0, false},
		{"+ACK", "", "", 0, false},
		{"$JS.ACK.RF_GROUPS.c.1.x.7.1.0", "", "", 0, false},
		{"$JS.ACK.RF_GROUPS.c.1.0.7.1.0", "", "", 0, false},
		{"$JS.ACK.RF_GROUPS.c.1.2.7.1", "", "", 0, false},
		{"$JS.ACK.RF_GROUPS.*.1.2.7.1.0", "", "", 0, false},
		{"$JS.ACK.RF_GROUPS..1.2.7.1.0", "", "", 0, false},
		{"$JS.ACK.RF GROUPS.c.1.2.7.1.0", "", "", 0, false},
		{"$JS.ACK." + strings.Repeat("a", 600), "", "", 0, false},
	} {
		got, err := parseAckToken(tc.in)
		if tc.ok != (err == nil) || tc.ok && (got.stream != tc.stream || got.consumer != tc.consumer || got.seq != tc.seq) {
			t.Errorf("parseAckToken(%q) = %+v, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadAckToken) {
			t.Errorf("parseAckToken(%q): %v is not ErrBadAckToken", tc.in, err)
		}
	}
}

// FuzzParseAckToken: tokens come from HTTP clients. Parsing never panics,
// and what it accepts is an ack subject with no wildcard or whitespace,
// whose stream and consumer are tokens of it.
func FuzzParseAckToken(f *testing.F) {
	f.Add("$JS.ACK.RF_GROUPS.batch-x-group.1.42.7.1700000000000000000.0")
	f.Add("$JS.ACK.dom.ACCHASH.RF_FAILURES.batch-y-failure.2.9.3.1700000000000000000.5.rnd")
	f.Add("$JS.ACK.>")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseAckToken(s)
		if err != nil {
			if !errors.Is(err, ErrBadAckToken) {
				t.Fatalf("error %v is not ErrBadAckToken", err)
			}
			return
		}
		if !strings.HasPrefix(s, "$JS.ACK.") || strings.ContainsAny(s, "*> \t\r\n") || len(s) > maxAckToken {
			t.Fatalf("accepted %q", s)
		}
		if tok.stream == "" || tok.consumer == "" || tok.seq == 0 || !strings.Contains(s, "."+tok.stream+"."+tok.consumer+".") {
			t.Fatalf("accepted %q as %+v", s, tok)
		}
	})
}
