package collector

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// TestForgedOutcomeIDs: records published first into the output streams
// (under the gateway's own run, which its role may write) with the message
// ids a forger can know of an episode never hold its real outcome back as a
// duplicate.
func TestForgedOutcomeIDs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		forge   func(steps []*messages.StepEvent) []*messages.StepEvent
		stream  func(messages.Subjects) string
		forged  func(s messages.Subjects) string
		outcome func(s messages.Subjects, run string) string
	}{
		{"trajectory", func(s []*messages.StepEvent) []*messages.StepEvent { return s },
			messages.Subjects.StreamTrajectories,
			func(s messages.Subjects) string { return s.Trajectories("gateway", "chat") },
			messages.Subjects.TrajectoriesOfRun},
		{"failure record", func(s []*messages.StepEvent) []*messages.StepEvent {
			s[2].Reward = 1e6
			return s
		}, messages.Subjects.StreamFailures,
			func(s messages.Subjects) string { return s.Failures("gateway", messages.FailureEpisode) },
			messages.Subjects.FailuresOfRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			f.start(t, Options{})
			steps, want := threeTurns()
			for _, id := range []string{
				want.EpisodeID, want.RunID + "/" + want.EpisodeID, want.EpisodeID + "/" + malformedRun,
				messages.EpisodeMsgID(want.RunID, want.EpisodeID), outcomeMsgID(want.RunID, want.EpisodeID, malformedRun),
			} {
				msg := &nats.Msg{Subject: tc.forged(f.subj), Data: []byte("forged"), Header: nats.Header{}}
				msg.Header.Set(jetstream.MsgIDHeader, id)
				if _, err := f.js.PublishMsg(context.Background(), msg); err != nil {
					t.Fatal(err)
				}
			}
			f.publish(t, tc.forge(steps)...)
			f.settled(t, "collector")
			stored := bustest.StoredMessages(t, f.js, tc.stream(f.subj), tc.outcome(f.subj, want.RunID))
			if len(stored) != 1 {
				t.Fatalf("%d outcomes of %s stored, want 1: the forged ids held the real one back", len(stored), want.EpisodeID)
			}
		})
	}
}
