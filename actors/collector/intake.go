package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

func (c *Collector) handle(ctx context.Context, m jetstream.Msg) {
	ev, err := messages.Decode[messages.StepEvent](m.Data())
	if err == nil {
		run, slot, id, perr := c.opts.Subjects.ParseSteps(m.Subject())
		switch {
		case perr != nil || id != ev.EpisodeID || run != ev.RunID:
			err = fmt.Errorf("step of episode %q published on subject %s", ev.EpisodeID, m.Subject())
		case ev.Episode != nil && messages.StepSlot(ev.Episode.GroupID) != slot:
			// Its group's other members are in another slot, maybe
			// another collector's.
			err = fmt.Errorf("step of episode %q of group %q published on subject %s, not in the group's slot %d",
				ev.EpisodeID, ev.Episode.GroupID, m.Subject(), messages.StepSlot(ev.Episode.GroupID))
		}
	}
	if err != nil {
		c.malformed(ctx, m, err)
		return
	}
	if c.finished.has(finishedKey(ev.RunID, ev.EpisodeID)) {
		// A redelivery, or a late run, of an episode already decided.
		if err := m.Ack(); err == nil {
			if meta, err := m.Metadata(); err == nil {
				c.deleteSteps([]uint64{meta.Sequence.Stream})
			}
		}
		return
	}
	// An error step is exempt: a worker records its give-up at whatever
	// delivery count it has reached, and an error can splice nothing.
	if ev.Attempt > c.opts.MaxAttempts && ev.Error == "" {
		c.reject(m, ev, fmt.Sprintf("attempt %d, above the highest possible %d", ev.Attempt, c.opts.MaxAttempts))
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		c.settle(m, fmt.Errorf("step metadata: %w", err), false)
		return
	}
	key := keyOf(ev)
	s := stored{seq: meta.Sequence.Stream, ev: slim(ev)}
	if !ev.Done && ev.Error == "" {
		c.cache.add(key, s, time.Now())
		c.count(func(*Stats) {})
		_ = m.Ack()
		return
	}
	steps, err := c.decide(ctx, m.Subject(), key, s)
	if err == nil && c.finished.has(finishedKey(ev.RunID, ev.EpisodeID)) {
		// The step decided its episode, and its outcome is stored.
		c.ackAndPurge(ctx, m, ev.EpisodeID, steps)
		return
	}
	c.settle(m, err, false)
}

// reject ignores a step no honest env worker sends. Runs are told apart by
// their delivery's nonce, so the step cannot join an honest run, and
// ignoring it loses nothing.
func (c *Collector) reject(m jetstream.Msg, ev *messages.StepEvent, why string) {
	c.log.Warn("step rejected", "subject", m.Subject(), "episode", ev.EpisodeID, "attempt", ev.Attempt, "turn", ev.Turn, "reason", why)
	c.count(func(s *Stats) { s.Rejected++ })
	_ = m.Term()
}

// malformedRun is the run a malformed step decides for: none.
const malformedRun = "malformed"

// malformed records a step event that cannot be decoded. Its subject still
// names its episode, which can then never be assembled: unless that episode
// was decided already, the record is the episode's one outcome.
func (c *Collector) malformed(ctx context.Context, m jetstream.Msg, cause error) {
	c.log.Warn("malformed step event", "subject", m.Subject(), "err", cause)
	f := &messages.Failure{
		V: messages.Version, Kind: messages.FailureMalformed, Reason: cause.Error(),
		Subject: m.Subject(), Time: time.Now().UnixNano(), Payload: messages.FailurePayload(m.Data()),
	}
	run, _, id, err := c.opts.Subjects.ParseSteps(m.Subject())
	f.RunID = run
	if err == nil && !c.finished.has(finishedKey(run, id)) {
		p := &partial{req: c.cache.request(id, runKey{}), run: run}
		f.EpisodeID = id
		if p.req != nil {
			f.GroupID, f.Env = p.req.GroupID, p.req.Env
		}
		p.outcome = &outcome{failure: f}
		won, _, err := c.claim(ctx, run, id, malformedRun, messages.FailureMalformed)
		if err == nil && won {
			err = c.store(ctx, id, malformedRun, p)
		}
		if err != nil {
			c.settle(m, err, false)
			return
		}
		if won {
			c.count(func(s *Stats) { s.Malformed++ })
			c.ackAndPurge(ctx, m, id, nil)
			return
		}
		c.forget(id)
		f.EpisodeID, f.GroupID, f.Env = "", "", ""
	}
	// Of no episode, or of one decided already: a record of the message only.
	if err := c.publish(ctx, c.opts.Subjects.Failures(f.RunID, messages.FailureMalformed), f, ""); err != nil {
		c.settle(m, err, false)
		return
	}
	c.count(func(s *Stats) { s.Malformed++ })
	c.settle(m, nil, true)
	// Nothing reads it again: it goes like a decided episode's late step.
	if meta, err := m.Metadata(); err == nil {
		c.deleteSteps([]uint64{meta.Sequence.Stream})
	}
}

// settle acks a message whose effect is durable, or hands it back when
// recording that effect failed; term ends a message that can never succeed.
func (c *Collector) settle(m jetstream.Msg, err error, term bool) {
	switch {
	case errors.Is(err, bus.ErrStreamFull):
		// Logged by c.full, once a minute per stream. The step waits longer
		// each time, so a stream nobody reads costs no busy loop.
		var n uint64
		if meta, merr := m.Metadata(); merr == nil {
			n = meta.NumDelivered
		}
		_ = m.NakWithDelay(retryDelay(n))
	case err != nil:
		// Every terminal step fails alike while a stream refuses outcomes:
		// one line a minute, with how many failed since, not one per step.
		if ok, n := c.settleWarn.Allow(time.Now()); ok {
			c.log.Error("recording outcome failed; will retry on redelivery", "subject", m.Subject(), "failures_since_last_line", n+1, "err", err)
		}
		_ = m.NakWithDelay(time.Second)
	case term:
		_ = m.Term()
	default:
		_ = m.Ack()
	}
}
