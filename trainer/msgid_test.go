package trainer_test

import (
	"context"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// Episode ids are unique within a batch only: one that an earlier batch
// used is played again and yields its trajectory, never dropped as a
// duplicate by a stream's de-duplication window or taken by the collector
// for a late step of the episode it already decided; a group id reused
// the same way is a new group too.
func TestReusedEpisodeIDsArePlayed(t *testing.T) {
	f := startFleet(t)
	c, _ := newClient(t, f, trainer.Options{})
	ctx := testContext(t)
	for _, b := range []struct{ batch, episode string }{
		{"b1", "e"},
		{"b2", "e"},
	} {
		s := uint64(1)
		req := &messages.EpisodeRequest{
			EpisodeID: b.episode, GroupID: "g", GroupSize: 1, Env: gtn, EnvSeed: &s,
			Sampling: messages.SamplingParams{Temperature: 1, TopP: 1}, MaxLength: 4096,
		}
		if _, err := c.Submit(ctx, trainer.Batch{ID: b.batch, Requests: []*messages.EpisodeRequest{req}}); err != nil {
			t.Fatal(err)
		}
		// A dropped episode never ends its batch: the read then waits
		// until this deadline.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n := 0
		for res, err := range c.Trajectories(rctx, b.batch) {
			if err != nil {
				t.Fatalf("batch %s, episode %s: %v", b.batch, b.episode, err)
			}
			if res.Value.EpisodeID != b.episode {
				t.Fatalf("batch %s: trajectory of %s, want %s", b.batch, res.Value.EpisodeID, b.episode)
			}
			n++
			if err := res.Ack(rctx); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Fatalf("batch %s: %d trajectories of episode %s, want 1", b.batch, n, b.episode)
		}
		// Its group, of the same id in both batches, is stored for each.
		n = 0
		for res, err := range c.Groups(rctx, b.batch) {
			if err != nil {
				t.Fatalf("batch %s, group: %v", b.batch, err)
			}
			n++
			if err := res.Ack(rctx); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		if n != 1 {
			t.Fatalf("batch %s: %d groups, want 1", b.batch, n)
		}
	}
}
