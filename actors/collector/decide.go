package collector

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// decide records the outcome of the run that the terminal step s, stored on
// subject, ends.
// When the run was assembled from what this collector was delivered, and it
// is the episode's first run (its first delivery, the only run cached), it
// returns the stream sequences of the episode's steps (s included), which
// can then be deleted one by one; otherwise nil, and the episode's steps
// are purged by subject: an earlier run's steps may have gone to another
// collector or out of the cache.
func (c *Collector) decide(ctx context.Context, subject string, key runKey, s stored) ([]uint64, error) {
	ev := s.ev
	id := ev.EpisodeID
	var p *partial
	if ev.Error != "" {
		// A run that failed decides at once: the turns it names before the
		// error may never have been stored. Its request (for the group)
		// travels with it, or is read back.
		p = &partial{req: ev.Episode}
		if p.req == nil {
			p.req = c.cache.request(id, key)
		}
		if p.req == nil {
			ep, err := c.readEpisode(ctx, subject, id)
			if err != nil {
				return nil, err
			}
			p.req = requestOf(ep.runs, key)
		}
		p.apply(ev)
		return nil, c.record(ctx, id, key.String(), p)
	}
	r, seqs := c.cache.runAndSeqs(id, key)
	if r == nil {
		r = make(run, 1)
	}
	r[ev.Turn] = s
	p, complete := assemble(r, ev.Turn)
	if complete {
		var steps []uint64
		if key.attempt <= 1 && (seqs != nil || ev.Turn == 0) {
			steps = append(seqs, s.seq)
		}
		return steps, c.record(ctx, id, key.String(), p)
	}
	// Some turns came to another collector, or were evicted here: the
	// stream has them, unless another run decided the episode already.
	d, err := c.decision(ctx, ev.RunID, id)
	if err != nil {
		return nil, err
	}
	if d != nil {
		if winner := d.Header.Get(messages.DecisionRunHeader); winner != key.String() {
			c.lostTo(ev.RunID, id, winner)
			return nil, nil
		}
	}
	ep, err := c.readEpisode(ctx, subject, id)
	if err != nil {
		return nil, err
	}
	r = ep.runs[key]
	if r == nil {
		r = make(run, 1)
	}
	r[ev.Turn] = s
	if p, complete = assemble(r, ev.Turn); !complete {
		// The stream holds no earlier turns of this run: no env
		// worker stores a terminal step before them.
		c.log.Warn("step rejected", "episode", id, "attempt", ev.Attempt, "turn", ev.Turn,
			"reason", "ends a run whose earlier turns were never stored")
		c.count(func(s *Stats) { s.Rejected++ })
		return nil, nil
	}
	c.count(func(s *Stats) { s.Reloaded++ })
	return nil, c.record(ctx, id, key.String(), p)
}

// finished forgets an episode whose outcome is stored: any later step of it
// is acknowledged at once. An episode decided for another collector's run
// is only dropped from the cache (forget): its outcome may still have to be
// stored from that run's terminal step, here or there.
func (c *Collector) finish(run, id string) {
	c.finished.add(finishedKey(run, id))
	c.forget(id)
}

// lostTo forgets an episode that another run, winner, decided. A malformed
// message's decision needs none of the episode's steps, which then go as a
// decided episode's do: the message may have come on another slot's subject
// (another shard's), whose purge left the steps on this one.
func (c *Collector) lostTo(run, id, winner string) {
	if winner == malformedRun {
		c.finish(run, id)
		return
	}
	c.forget(id)
}

func (c *Collector) forget(id string) {
	c.cache.drop(id)
	c.count(func(*Stats) {})
}

// record decides the episode for run, unless it is decided already, and
// stores the outcome. On error the caller hands the terminal step back: a
// decision stored without its outcome is completed when the step comes
// again (to this collector or another), since the run named by the decision
// gives the same outcome.
func (c *Collector) record(ctx context.Context, id, run string, p *partial) error {
	out := p.outcome
	if out.traj != nil {
		// Known before deciding, so the decision names the kind stored.
		var err error
		if out.encoded, err = c.encode(out.traj); err != nil {
			out.failure = p.failure(messages.FailureInvariant, fmt.Sprintf("trajectory too large to publish: %v", err))
			out.traj = nil
		}
	}
	won, winner, err := c.claim(ctx, p.runID(), id, run, out.kind())
	if err != nil {
		return err
	}
	if !won {
		c.lostTo(p.runID(), id, winner)
		return nil
	}
	return c.store(ctx, id, run, p)
}

// outcomeMsgID is the de-duplication id of an episode's outcome decided
// for run: the same for every collector storing it, so a repeat is held
// back, and one no other role can know before the decision, for run ends
// in the nonce of the env worker's delivery. An id made of the episode id
// alone, which a trainer and a gateway know, would let a record published
// first under it in the same stream (the gateway's own run's) have the real
// one dropped as a duplicate, and would hold back the outcome of an episode
// id used again by a later run. The episode's own run (runID) scopes it
// too: a malformed message decides for malformedRun, which has no nonce.
func outcomeMsgID(runID, id, run string) string { return messages.EpisodeMsgID(runID, id) + "/" + run }

// claim stores the episode's decision for run, on the condition that no
// decision is stored yet, and reports whether the decision is run's: stored
// now, by an earlier try of this call, or by another collector deciding for
// the same run. When it is not, winner is the run the decision names.
func (c *Collector) claim(ctx context.Context, runID, id, run, kind string) (won bool, winner string, err error) {
	subject := c.opts.Subjects.Decided(runID, id)
	msg := &nats.Msg{Subject: subject, Header: nats.Header{
		messages.DecisionHeader: []string{kind}, messages.DecisionRunHeader: []string{run},
	}}
	err = bus.Retry(ctx, func(ctx context.Context) error {
		_, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(outcomeMsgID(runID, id, run)), jetstream.WithExpectLastSequencePerSubject(0))
		return err
	})
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return true, run, nil
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		raw, err := c.decision(ctx, runID, id)
		if err != nil || raw == nil {
			return false, "", err
		}
		winner = raw.Header.Get(messages.DecisionRunHeader)
		return winner == run, winner, nil
	}
	return false, "", fmt.Errorf("decide episode %s: %w", id, err)
}

// decision returns the episode's stored decision, or nil when there is none.
func (c *Collector) decision(ctx context.Context, runID, id string) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.decisions.GetLastMsgForSubject(ctx, c.opts.Subjects.Decided(runID, id))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read decision of %s: %w", id, err)
	}
	return raw, nil
}

// finishedKey names an episode of a run in the set of finished ones: an
// episode id that a later run uses again is another episode.
func finishedKey(run, id string) string { return messages.EpisodeMsgID(run, id) }

// recent is a bounded set of recently finished episode ids, so redelivered
// steps of a decided episode are recognised without growing forever.
type recent struct {
	set  map[string]struct{}
	ring []string
	pos  int
}

func newRecent(n int) *recent {
	return &recent{set: make(map[string]struct{}), ring: make([]string, n)}
}

func (r *recent) has(id string) bool { _, ok := r.set[id]; return ok }

func (r *recent) add(id string) {
	if old := r.ring[r.pos]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.pos] = id
	r.set[id] = struct{}{}
	r.pos = (r.pos + 1) % len(r.ring)
}
