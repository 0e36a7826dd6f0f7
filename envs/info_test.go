package envs

import (
	"maps"
	"testing"
)

// TestInfoMatchesStep: for every env, Info() is what the last Step reported,
// and a fresh env restored from a snapshot reports the same.
func TestInfoMatchesStep(t *testing.T) {
	for _, id := range IDs() {
		env := mustNew(t, id)
		env.Reset(NewRNG(7))
		res := env.Step(`\boxed{1 1 1} \boxed{up}`)
		if !maps.Equal(res.Info, env.Info()) {
			t.Errorf("%s: step info %q, Info() %q", id, res.Info, env.Info())
		}
		other := mustNew(t, id)
		other.Reset(NewRNG(8))
		if err := other.Restore(env.Snapshot()); err != nil {
			t.Fatalf("%s: restore: %v", id, err)
		}
		if !maps.Equal(other.Info(), env.Info()) {
			t.Errorf("%s: restored env reports %q, want %q", id, other.Info(), env.Info())
		}
	}
}
