package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/messages"
)

// forgedHeader marks the harness's forged step events with their variant,
// so that the checks tell them from the fleet's. The fleet does not read it.
const forgedHeader = "Rf-Chaos-Forged"

// forgeries are the variants of forged step events, in the order the
// forgeries cycle through them. Each is published on the steps subject of a
// live episode, for the attempt it is running (or the next one), as an
// authorised process that misbehaves could.
var forgeries = []string{
	"negative token ids",  // the next turn, an action with a negative token id
	"positive logprobs",   // the next turn, action logprobs above 0
	"reward 1e6",          // the next turn, ending the episode with a reward of 1e6
	"higher attempt done", // the next attempt number, the next turn, a one-token action and done
	"turns out of order",  // two turns ahead, then one ahead, both plausible
}

// forgedSteps builds the step events of a forgery of an episode of run
// whose latest honest step is (attempt, turn) of the run of request. They
// carry the episode's run id, as its honest steps do: a forgery is
// well-formed, only its content lies.
func forgedSteps(run, id string, request uint64, attempt, turn int64, variant int) []*messages.StepEvent {
	step := func(a, tn int64, tokens []int32, lp []float32) *messages.StepEvent {
		return &messages.StepEvent{V: messages.Version, RunID: run, EpisodeID: id, Request: request, Attempt: int32(a), Turn: int32(tn),
			ActionTokens: tokens, ActionLogprobs: lp, ActionText: "forged", FeedbackText: "\n",
			FeedbackTokens: messages.Tokens{10}, FinishReason: "stop"}
	}
	switch variant {
	case 0:
		return []*messages.StepEvent{step(attempt, turn+1, []int32{92, -7, 123}, []float32{-0.5, -0.5, -0.5})}
	case 1:
		return []*messages.StepEvent{step(attempt, turn+1, []int32{52, 53}, []float32{0.75, 1.5})}
	case 2:
		s := step(attempt, turn+1, []int32{49}, []float32{-0.25})
		s.Reward, s.Score, s.Done, s.Success = 1e6, 1e6, true, true
		return []*messages.StepEvent{s}
	case 3:
		s := step(attempt+1, turn+1, []int32{53}, []float32{-0.125})
		s.Reward, s.Score, s.Done, s.Success, s.Resumed = 1, 1, true, true, 1
		return []*messages.StepEvent{s}
	default:
		later := step(attempt, turn+2, []int32{55, 56}, []float32{-0.3, -0.7})
		later.Done = true
		return []*messages.StepEvent{later, step(attempt, turn+1, []int32{54}, []float32{-0.2})}
	}
}

// inject carries out the message faults: forged step events and
// resubmissions, each at its planned moment on an episode the tracker
// offers then.
func (h *harness) inject(ctx context.Context, tr *tracker, events []event) {
	targeted := map[string]bool{}
	var retries atomic.Int64
	for i, ev := range events {
		t := time.NewTimer(time.Until(h.t0.Add(ev.at)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		finished := ev.kind == KindResubmit && ev.variant == 1
		var id string
		var st liveEpisode
		ok := false
		for wait := time.Now().Add(15 * time.Second); ; {
			if id, st, ok = tr.pick(finished, ev.pick, targeted); ok || time.Now().After(wait) {
				break
			}
			t := time.NewTimer(500 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		f := Fault{At: time.Since(h.t0), Kind: ev.kind}
		if !ok {
			f.Err = "no episode in flight"
			if finished {
				f.Err = "no finished episode"
			}
			h.addFault(f)
			h.progress("%s skipped: %s", ev.kind, f.Err)
			continue
		}
		targeted[id] = true
		f.Name = id
		var err error
		switch ev.kind {
		case KindForge:
			f.Detail, err = h.forge(ctx, id, st, ev.variant, &retries)
			h.rep.Forged[id] = forgeries[ev.variant]
		case KindResubmit:
			f.Detail, err = h.resubmit(ctx, id, finished, i, &retries)
			h.rep.Resubmitted[id] = map[bool]string{false: "in flight", true: "finished"}[finished]
		}
		if err != nil {
			f.Err = err.Error()
		}
		h.addFault(f)
		h.progress("%s %s: %s", ev.kind, id, f.Detail)
	}
}

// forge publishes a forgery's step events for an episode.
func (h *harness) forge(ctx context.Context, id string, st liveEpisode, variant int, retries *atomic.Int64) (string, error) {
	detail := fmt.Sprintf("%s after attempt %d turn %d:", forgeries[variant], st.attempt, st.turn)
	for _, s := range forgedSteps(h.runID, id, st.request, st.attempt, st.turn, variant) {
		data, err := messages.Marshal(s)
		if err != nil {
			return detail, err
		}
		m := &nats.Msg{Subject: h.subj.Steps(h.runID, h.reqs[id].GroupID, id), Data: data, Header: nats.Header{forgedHeader: []string{forgeries[variant]}}}
		seq, err := h.publish(ctx, m, "", retries)
		if err != nil {
			return detail, err
		}
		h.rep.ForgedMessages++
		detail += fmt.Sprintf(" attempt %d turn %d (steps seq %d)", s.Attempt, s.Turn, seq)
	}
	return detail, nil
}

// resubmit publishes an episode's request again, without a message id, with
// another game seed, so that a trajectory spliced from both runs does not
// replay.
func (h *harness) resubmit(ctx context.Context, id string, finished bool, i int, retries *atomic.Int64) (string, error) {
	r := *h.reqs[id]
	seed := mix(h.cfg.Seed, 1<<30+i)
	r.EnvSeed, r.SubmitTime = &seed, time.Now().UnixNano()
	data, err := messages.Marshal(&r)
	if err != nil {
		return "", err
	}
	seq, err := h.publish(ctx, &nats.Msg{Subject: h.subj.Episodes(r.RunID, r.Env), Data: data}, "", retries)
	state := "in flight"
	if finished {
		state = "finished"
	}
	return fmt.Sprintf("submitted again while %s, env seed %d (episodes seq %d)", state, seed, seq), err
}

// forgedVariants counts the forgeries by variant.
func forgedVariants(forged map[string]string) map[string]int {
	n := map[string]int{}
	for _, v := range forged {
		n[v]++
	}
	return n
}

// sortedIDs returns a map's keys in order.
func sortedIDs[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
