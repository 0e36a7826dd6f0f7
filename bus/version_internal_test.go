package bus

import "testing"

func TestServerVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		version string
		ok      bool
	}{
		{"2.11.0", true},
		{"2.11.9", true},
		{"2.12.1", true},
		{"2.15.2", true},
		{"3.0.0", true},
		{"v2.11.0", true},
		{"2.11.0-RC.1", true},
		{"2.10.29", false},
		{"2.9.10", false},
		{"1.99.99", false},
		{"", false},
		{"2.11", false},
		{"2.x.0", false},
		{"2.11.0.1", false},
	} {
		if got := serverVersionAtLeast(c.version, minServerVersion); got != c.ok {
			t.Errorf("serverVersionAtLeast(%q) = %v, want %v", c.version, got, c.ok)
		}
	}
}
