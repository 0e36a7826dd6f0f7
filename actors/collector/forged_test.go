package collector

import (
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// TestForgedSteps: steps that no honest env worker sends never become a
// trajectory. Values out of range decide the episode as a failure naming
// them; steps of runs that cannot exist are ignored, and the honest run
// still ends as the episode's trajectory.
func TestForgedSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		// forge changes an honest episode's steps, returning what is published.
		forge    func(steps []*messages.StepEvent) []*messages.StepEvent
		wantKind string // "" for the honest trajectory
		reason   string
		rejected uint64
	}{
		{"reward beyond the env's range", func(s []*messages.StepEvent) []*messages.StepEvent {
			s[2].Reward = 1e6
			return s
		}, messages.FailureInvariant, "outside", 0},
		{"negative token id", func(s []*messages.StepEvent) []*messages.StepEvent {
			s[1].ActionTokens[0] = -4
			return s
		}, messages.FailureMalformed, "must be >= 0", 0},
		{"positive logprob", func(s []*messages.StepEvent) []*messages.StepEvent {
			s[1].ActionLogprobs[0] = 3
			return s
		}, messages.FailureMalformed, "log-probability", 0},
		{"attempt never delivered", func(s []*messages.StepEvent) []*messages.StepEvent {
			forged := *s[0]
			forged.Attempt, forged.Done, forged.ActionTokens, forged.ActionLogprobs = 99, true, messages.Tokens{1}, messages.Logprobs{-1}
			return append([]*messages.StepEvent{&forged}, s...)
		}, "", "", 1},
		{"terminal step of a run with no earlier turns", func(s []*messages.StepEvent) []*messages.StepEvent {
			forged := *s[2]
			forged.Attempt = 2
			return append(s[:2:2], &forged, s[2])
		}, "", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			steps, want := threeTurns()
			f.publish(t, tc.forge(steps)...)
			f.settled(t, "collector")
			out := f.outputs(t)
			if tc.wantKind == "" {
				checkTrajectory(t, out.only(t), want)
			} else if fail := out.onlyFailure(t); fail.Kind != tc.wantKind || fail.EpisodeID != want.EpisodeID || !strings.Contains(fail.Reason, tc.reason) {
				t.Errorf("failure %+v, want kind %s naming %q", fail, tc.wantKind, tc.reason)
			}
			if st := c.Stats(); st.Rejected != tc.rejected || st.InFlight != 0 {
				t.Errorf("stats %+v, want %d rejected and nothing in flight", st, tc.rejected)
			}
		})
	}
}
