package bus

import "testing"

// TestUserinfo: credentials in a list of NATS URLs are masked for logs and
// dropped for what is written down; URLs without them stay as they are.
func TestUserinfo(t *testing.T) {
	for _, tc := range []struct{ in, redacted, stripped string }{
		{"", "", ""},
		{"nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222"},
		{"nats://u:secret@a:4222,nats://b:4222", "nats://u:xxxxx@a:4222,nats://b:4222", "nats://a:4222,nats://b:4222"},
		{"nats://token@a:4222", "nats://xxxxx@a:4222", "nats://a:4222"},
	} {
		if got := redactURLs(tc.in); got != tc.redacted {
			t.Errorf("redactURLs(%q) = %q, want %q", tc.in, got, tc.redacted)
		}
		if got := StripUserinfo(tc.in); got != tc.stripped {
			t.Errorf("StripUserinfo(%q) = %q, want %q", tc.in, got, tc.stripped)
		}
	}
}
