package service

import "testing"

func TestSnakeCase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"InFlight", "in_flight"},
		{"FullStreams", "full_streams"},
		{"Generate", "generate"},
		{"StepsDeleted", "steps_deleted"},
		{"GroupsKept", "groups_kept"},
		{"IDCount", "id_count"},
		{"Retries2x", "retries2x"},
		{"Max2Bytes", "max2_bytes"},
	} {
		if got := snakeCase(c.in); got != c.want {
			t.Errorf("snakeCase(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
