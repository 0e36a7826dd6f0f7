package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// compactLoop calls compactSteps every CompactInterval until ctx ends.
func (c *Collector) compactLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.CompactInterval)
	defer t.Stop()
	var compacted uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			compacted = c.compactSteps(ctx, compacted)
		}
	}
}

// compactSteps reclaims the steps stream's disk once it holds no step
// (bus.CompactIfEmpty), and returns the last sequence reclaimed.
func (c *Collector) compactSteps(ctx context.Context, compacted uint64) uint64 {
	last, err := bus.CompactIfEmpty(ctx, c.steps, compacted)
	if err != nil {
		if ok, n := c.purgeWarn.Allow(time.Now()); ok {
			c.log.Warn("reclaiming the empty steps stream's disk failed", "err", err, "unlogged_failures", n)
		}
		return compacted
	}
	if last != compacted {
		c.count(func(s *Stats) { s.Compactions++ })
	}
	return last
}

// deleteGrace is how long the step deleters go on after Run's context ends.
const deleteGrace = 5 * time.Second

// deleteSteps hands the sequences of decided steps to the deleter, waiting
// while it is that far behind.
//
// Why not purge each episode by subject: the server then scans every
// stored step in the range the episode's steps span (the interleaved steps
// of every episode in flight) and makes every consumer of the stream
// recount its pending messages, which was about a quarter of a fleet's CPU.
// A delete by sequence costs the server neither.
func (c *Collector) deleteSteps(seqs []uint64) {
	for _, seq := range seqs {
		c.deletes <- seq
	}
}

// deleters is how many goroutines delete decided steps: each delete is a
// round trip (a raft commit on a replicated stream), so several overlap.
const deleters = 4

// deleteLoop deletes the steps handed to deleteSteps until the channel is
// closed; several run at once. A failure costs only disk until the steps'
// max age, so it is logged (once a minute at most), not retried beyond
// bus.Retry. Once ctx ends, what is still queued is dropped the same way.
func (c *Collector) deleteLoop(ctx context.Context) {
	for seq := range c.deletes {
		if ctx.Err() != nil {
			continue // stopping: left to the max age
		}
		err := bus.Retry(ctx, func(ctx context.Context) error { return c.steps.DeleteMsg(ctx, seq) })
		if err == nil {
			c.count(func(s *Stats) { s.StepsDeleted++ })
		}
		if err == nil || deletedAlready(err) {
			continue
		}
		if ok, n := c.deleteWarn.Allow(time.Now()); ok {
			c.log.Warn("deleting a decided episode's step failed; it stays until its max age", "seq", seq, "err", err, "unlogged_failures", n)
		}
	}
}

// deletedAlready reports whether a delete failed because the message is
// gone: a step delivered twice, or removed by a compaction. nats.go reports
// the server's refusal as text (ErrMsgDeleteUnsuccessful), without its code.
func deletedAlready(err error) bool {
	if !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "not found") || strings.Contains(msg, "no message")
}

// purge drops a decided episode's steps, stored on subject. A failure costs only disk until
// the steps' max age, so it is logged (once a minute at most), not retried.
func (c *Collector) purge(ctx context.Context, subject, id string) {
	err := bus.Retry(ctx, func(ctx context.Context) error {
		return c.steps.Purge(ctx, jetstream.WithPurgeSubject(subject))
	})
	if err == nil {
		c.count(func(s *Stats) { s.Purges++ })
		return
	}
	if ok, n := c.purgeWarn.Allow(time.Now()); ok {
		c.log.Warn("purging a decided episode's steps failed; they stay until their max age", "episode", id, "err", err, "unlogged_failures", n)
	}
}

// getStep reads the first stored step on subject at or after seq, riding
// out a leader election on a cluster.
func (c *Collector) getStep(ctx context.Context, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.steps.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		return err
	})
	return raw, err
}

// storedEpisode is an episode's steps as the stream holds them, by run.
type storedEpisode struct {
	runs map[runKey]run
}

// readEpisode reads every stored step of an episode, on its steps subject. A message that cannot
// be decoded is skipped: its own delivery records it.
func (c *Collector) readEpisode(ctx context.Context, subject, id string) (*storedEpisode, error) {
	ep := &storedEpisode{runs: make(map[runKey]run)}
	for seq := uint64(1); ; {
		raw, err := c.getStep(ctx, seq, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ep, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read steps of %s: %w", id, err)
		}
		seq = raw.Sequence + 1
		ev, err := messages.Decode[messages.StepEvent](raw.Data)
		if err != nil || ev.EpisodeID != id {
			continue
		}
		key := keyOf(ev)
		if ep.runs[key] == nil {
			ep.runs[key] = make(run)
		}
		if _, dup := ep.runs[key][ev.Turn]; !dup {
			ep.runs[key][ev.Turn] = stored{seq: raw.Sequence, ev: ev}
		}
	}
}
