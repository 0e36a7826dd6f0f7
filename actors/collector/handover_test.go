package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// longEpisode is an n-turn chat episode: turn t's action is one token,
// 100+t, so a trajectory shows which turns it holds.
func longEpisode(id string, turns int) []*messages.StepEvent {
	req := request(id, id, 0, 1)
	steps := make([]*messages.StepEvent, turns)
	for t := range turns {
		ev := &messages.StepEvent{
			V: messages.Version, EpisodeID: id, Turn: int32(t),
			ActionTokens: messages.Tokens{int32(100 + t)}, ActionLogprobs: messages.Logprobs{-0.5},
			FeedbackTokens: messages.Tokens{7}, Reward: 0.125, FinishReason: "stop",
		}
		if t == 0 {
			ev.Episode, ev.PromptTokens = req, messages.Tokens{1, 2}
		}
		ev.Done = t == turns-1
		steps[t] = ev
	}
	return steps
}

// TestStandbyHandOver moves the pin between two collectors after every
// round of turns, so that each episode's turns are split between them in
// every pattern: A, B, A … included. Every episode must end as exactly one
// complete trajectory, and neither collector may keep partial state of
// episodes that are decided.
func TestStandbyHandOver(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	a := f.start(t, Options{IdleTimeout: 500 * time.Millisecond})
	b := f.start(t, Options{IdleTimeout: 500 * time.Millisecond})
	const episodes, turns = 24, 8
	eps := make([][]*messages.StepEvent, episodes)
	for i := range eps {
		eps[i] = longEpisode(fmt.Sprintf("ho-%d", i), turns)
	}
	ctx := context.Background()
	for turn := range turns {
		for i := range eps {
			f.publish(t, eps[i][turn])
		}
		f.settled(t, "collector")
		// Hand the pin over: the next pull of either collector may win it.
		st, err := f.js.Stream(ctx, f.subj.StreamSteps())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.UnpinConsumer(ctx, "collector", pinGroup); err != nil {
			t.Fatal(err)
		}
	}
	out := f.outputs(t)
	if len(out.trajs) != episodes || len(out.failures) != 0 {
		t.Fatalf("%d trajectories and failures %s, want %d trajectories", len(out.trajs), describe(out.failures), episodes)
	}
	for _, tr := range out.trajs {
		if tr.Turns != turns {
			t.Errorf("%s: %d turns, want %d", tr.EpisodeID, tr.Turns, turns)
		}
		for i, r := range tr.ActionRanges {
			if got := tr.ObservationTokens[r.Start]; got != int32(100+i) {
				t.Errorf("%s: turn %d holds action %d", tr.EpisodeID, i, got)
			}
		}
	}
	// Each decided episode's steps are purged; its decision stays.
	for stream, want := range map[string]uint64{f.subj.StreamSteps(): 0, f.subj.StreamDecided(): episodes} {
		st, err := f.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != want {
			t.Errorf("%s holds %d messages, want %d (err %v)", stream, info.State.Msgs, want, err)
		}
	}
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if sa, sb := a.Stats(), b.Stats(); sa.InFlight+sb.InFlight != 0 {
			return fmt.Errorf("collectors still hold %d and %d episodes", sa.InFlight, sb.InFlight)
		}
		return nil
	})
}
