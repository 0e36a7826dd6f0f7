package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// TestAuthConfShardedCollector runs a collector of a shard (1 of 2, 3 of 4)
// under the collector's user: it makes its consumer (its shard's name and
// filter), is delivered an env worker's step of a group in its shard, and
// publishes the trajectory and the group. Nothing is refused.
func TestAuthConfShardedCollector(t *testing.T) {
	for _, shard := range []collector.Shard{{Index: 1, Count: 2}, {Index: 3, Count: 4}} {
		t.Run(shard.String(), func(t *testing.T) { testAuthConfShard(t, shard) })
	}
}

func testAuthConfShard(t *testing.T, shard collector.Shard) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, adminJS := startAuthStreams(t, ctx, subj)

	colNC, colJS, log := connectAs(t, url, "collector")
	coll := collector.New(colJS, collector.Options{Shard: shard, Logger: slog.New(slog.DiscardHandler)})
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- coll.Run(cctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	group := "auth-g0"
	for i := 0; messages.StepSlot(group)%shard.Count != shard.Index; i++ {
		group = fmt.Sprintf("auth-g%d", i)
	}
	seed := uint64(1)
	req := &messages.EpisodeRequest{
		V: messages.Version, RunID: "run-1", EpisodeID: "auth-e1", GroupID: group, GroupSize: 1,
		Env: "game:GuessTheNumber-v0", EnvSeed: &seed, Sampling: messages.SamplingParams{Temperature: 1}, MaxLength: 64, SubmitTime: 1,
	}
	data, err := messages.Marshal(&messages.StepEvent{
		V: messages.Version, RunID: req.RunID, EpisodeID: req.EpisodeID, Episode: req, PromptTokens: messages.Tokens{1},
		ActionTokens: messages.Tokens{2}, ActionLogprobs: messages.Logprobs{-0.5}, FeedbackTokens: messages.Tokens{3},
		Reward: 1, Score: 1, Done: true, FinishReason: "stop",
	})
	if err != nil {
		t.Fatal(err)
	}
	_, envJS, envLog := connectAs(t, url, "envworker")
	if err := bus.Publish(ctx, envJS, subj.Steps(req.RunID, req.GroupID, req.EpisodeID), data, "auth-e1/0"); err != nil {
		t.Fatalf("envworker: publish step: %v (%q)", err, envLog.Lines())
	}
	bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if st := coll.Stats(); st.Trajectories != 1 || st.GroupsKept != 1 {
			return fmt.Errorf("collector: %+v (refused: %q)", st, log.Lines())
		}
		return nil
	})
	if _, err := adminJS.Consumer(ctx, subj.StreamSteps(), shard.Consumer("collector")); err != nil {
		t.Errorf("shard's consumer: %v", err)
	}
	if err := colNC.LastError(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if lines := log.Lines(); len(lines) > 0 {
		t.Fatalf("refused: %q", lines)
	}
}
