package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
)

// store publishes the outcome of episode id, decided for run, and feeds
// its group. The caller then acknowledges the step that decided it and
// purges its steps (ackAndPurge).
func (c *Collector) store(ctx context.Context, id, run string, p *partial) error {
	out := p.outcome
	if tr := c.opts.Tracer; tr != nil {
		var span trace.Span
		ctx, span = tr.Start(tracing.WithTraceID(ctx, p.trace()), "outcome", trace.WithAttributes(
			attribute.String("rollfleet.episode", id), attribute.String("rollfleet.outcome", out.kind())))
		defer span.End()
	}
	kind, err := kindTrajectory, error(nil)
	if out.traj != nil {
		err = c.publishRaw(ctx, c.opts.Subjects.Trajectories(out.traj.RunID, out.traj.Env), out.encoded, outcomeMsgID(out.traj.RunID, id, run))
	} else {
		kind = kindFailure
		err = c.publish(ctx, c.opts.Subjects.Failures(out.failure.RunID, out.failure.Kind), out.failure, outcomeMsgID(out.failure.RunID, id, run))
	}
	if err != nil {
		c.full.refused(kind, err, time.Second)
		return err
	}
	c.full.stored(kind)
	c.finish(p.runID(), id)
	c.count(func(s *Stats) {
		if out.traj != nil {
			s.Trajectories++
			return
		}
		s.Failures++
		if out.failure.Kind == messages.FailureInvariant {
			s.Invariant++
		}
	})
	c.observe(out.traj, out.failure)
	if out.failure != nil {
		c.log.Warn("episode failed", "episode", id, "trace_id", out.failure.TraceID, "kind", out.failure.Kind, "reason", out.failure.Reason)
	}
	c.addToGroup(ctx, p, out.traj)
	return nil
}

// ackAndPurge acknowledges the step that decided an episode (its outcome
// stored, its group fed), waiting for the server to confirm, and then
// deletes the episode's steps (steps, the sequences delivered here, or when
// nil a purge of its subject, m's): last, so from here on the episode looks
// handled. The order matters. A purge of a subject narrower than the
// consumer's filter that ends a pending delivery moves the consumer's ack
// floor (nats-server 2.15) past the other steps still pending, such as
// terminal steps handed back with a delay while an output stream is full,
// which are then never delivered again and their episodes never decided.
// An unconfirmed acknowledgement leaves the steps to their max age rather
// than risk that.
func (c *Collector) ackAndPurge(ctx context.Context, m jetstream.Msg, id string, steps []uint64) {
	if err := bus.Retry(ctx, m.DoubleAck); err != nil {
		if ok, n := c.purgeWarn.Allow(time.Now()); ok {
			c.log.Warn("acknowledging a decided episode's step failed; its steps stay until their max age", "episode", id, "err", err, "unlogged_failures", n)
		}
		return
	}
	if steps != nil {
		c.deleteSteps(steps)
		return
	}
	c.purge(ctx, m.Subject(), id)
}

// encode encodes a trajectory, or reports that it cannot be published: too
// large for the codec or for the server.
func (c *Collector) encode(t *messages.Trajectory) ([]byte, error) {
	data, err := messages.Marshal(t)
	if err != nil {
		return nil, err
	}
	if max := c.js.Conn().MaxPayload(); max > 0 && int64(len(data)) > max-maxHeaderRoom {
		return nil, fmt.Errorf("%w: %d bytes > %d", bus.ErrTooLarge, len(data), max-maxHeaderRoom)
	}
	return data, nil
}

// maxHeaderRoom is left of the server's max payload for a message's
// headers (its message id).
const maxHeaderRoom = 1024

func (c *Collector) publish(ctx context.Context, subject string, v any, msgID string) error {
	data, err := messages.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return c.publishRaw(ctx, subject, data, msgID)
}

func (c *Collector) publishRaw(ctx context.Context, subject string, data []byte, msgID string) error {
	return bus.Publish(ctx, c.js, subject, data, msgID)
}
