package env

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// publishFailure records an episode that cannot complete as a terminal step
// event with the reason; the collector turns it into the episode's one
// failure record.
func (e *episode) publishFailure(ctx context.Context, cause error) error {
	ev := &messages.StepEvent{
		V: messages.Version, EpisodeID: e.req.EpisodeID, Turn: e.turn, Attempt: e.attempt, Episode: e.req,
		Done: true, Error: cause.Error(), Resumed: e.resumed, TraceID: e.req.TraceID,
	}
	switch {
	case errors.Is(cause, errPromptTooLong):
		ev.FailureKind = messages.FailurePromptTooLong
	case errors.Is(cause, errStale):
		ev.FailureKind = messages.FailureStale
	}
	// Its own message id: the turn it names may have been stored already
	// (a republished step) or never (a step that failed to publish), and
	// the collector decides on an error step whatever turns came before.
	ev.Request, ev.Run, ev.RunID = e.request, e.nonce, e.req.RunID
	id := messages.StepMsgID(e.req.EpisodeID, e.nonce, ev.Turn) + "/error"
	return e.store(ctx, "record the episode's failure", func(ctx context.Context) error {
		return e.w.publish(ctx, e.steps, ev, id, e.traceparent)
	})
}

// publishStep stores a step event, waiting for the store while it cannot
// take it; a step too large to publish fails the episode rather than being
// retried forever.
func (e *episode) publishStep(ctx context.Context, ev *messages.StepEvent) error {
	ev.Request, ev.Run, ev.RunID, ev.TraceID = e.request, e.nonce, e.req.RunID, e.req.TraceID
	err := e.store(ctx, "store a step", func(ctx context.Context) error {
		return e.w.publish(ctx, e.steps, ev, messages.StepMsgID(e.req.EpisodeID, e.nonce, ev.Turn), e.traceparent)
	})
	if errors.Is(err, bus.ErrTooLarge) || errors.Is(err, messages.ErrTooLarge) {
		return fmt.Errorf("%w: step %d: %v", errEpisode, ev.Turn, err)
	}
	return err
}

// request sends a NATS request and decodes the validated reply. A missing
// LLM worker, a timeout or an "unavailable" reply is retried with backoff;
// anything else is returned.
func request[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, w *Worker, subject string, msg any, traceparent string, code func(*T) string) (*T, error) {
	var last error
	for attempt := 0; attempt < w.opts.RequestAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt*attempt) * 250 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		// The deadline travels with the request, so an LLM worker drops what
		// this attempt stopped waiting for instead of generating it twice.
		deadline := time.Now().Add(w.opts.RequestTimeout)
		epoch := w.watcher.Load().State().Epoch
		switch r := msg.(type) {
		case *messages.GenerateRequest:
			r.Deadline = deadline.UnixNano()
		case *messages.TokenizeRequest:
			r.Deadline = deadline.UnixNano()
		}
		data, err := messages.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %s request: %v", errEpisode, subject, err)
		}
		rm := bus.TracedMsg(subject, data, traceparent)
		rctx, cancel := context.WithDeadline(ctx, deadline)
		m, err := w.nc.RequestMsgWithContext(rctx, rm)
		cancel()
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				last = err
				held, err := w.heldByPause(ctx, epoch)
				if err != nil {
					return nil, err
				}
				if held {
					attempt--
				}
				continue
			}
			if errors.Is(err, nats.ErrMaxPayload) {
				// The prompt outgrew what the server accepts: no retry helps.
				return nil, fmt.Errorf("%w: %s: %v", errEpisode, subject, err)
			}
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
		rep, err := messages.Decode[T, P](m.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: malformed reply: %v", errEpisode, subject, err)
		}
		if code(rep) == messages.CodeUnavailable {
			last = errors.New("no model endpoint could serve the request")
			held, err := w.heldByPause(ctx, epoch)
			if err != nil {
				return nil, err
			}
			if held {
				attempt--
			}
			continue
		}
		w.infraStreak.Store(0)
		return rep, nil
	}
	w.infraStreak.Add(1)
	return nil, fmt.Errorf("%w: %s: gave up after %d attempts: %v", errInfra, subject, w.opts.RequestAttempts, last)
}

// publish sends one message to a JetStream stream and waits for the store to
// acknowledge it, retrying briefly while a stream leader is unavailable. A
// traceparent, when given, travels as the message's header.
func (w *Worker) publish(ctx context.Context, subject string, v any, msgID, traceparent string) error {
	data, err := messages.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return bus.PublishMsg(ctx, w.js, bus.TracedMsg(subject, data, traceparent), msgID)
}
