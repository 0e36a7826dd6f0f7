package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// ErrVersionBackwards means a resume named an older policy version than the
// fleet's: versions never decrease, or staleness would lose its meaning.
var ErrVersionBackwards = errors.New("control: policy version may not decrease")

// ErrBadOnPause means a pause named neither messages.OnPauseFinish nor
// messages.OnPauseAbort.
var ErrBadOnPause = errors.New("control: on_pause must be finish or abort")

// statusWait is how long a status request collects answers: workers answer
// from their subscription callbacks, in a round trip.
const statusWait = 250 * time.Millisecond

// pollInterval is how often a pause asks the workers whether they drained.
const pollInterval = 100 * time.Millisecond

// Client announces policy states: what a trainer uses to pause the fleet,
// resume it under a new version and see its workers.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj messages.Subjects
}

// NewClient returns a client on nc for the fleet under subj (the zero value
// means prefix "rf").
func NewClient(nc *nats.Conn, subj messages.Subjects) (*Client, error) {
	if subj.Prefix == "" {
		subj = messages.NewSubjects("")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	return &Client{nc: nc, js: js, subj: subj}, nil
}

// State reads the fleet's current policy state.
func (c *Client) State(ctx context.Context) (messages.PolicyState, error) {
	st, _, err := current(ctx, c.js, c.subj)
	if err != nil {
		return messages.PolicyState{}, err
	}
	return *st, nil
}

// Pause holds every new generation and returns once no LLM worker has one
// running on a model server: the weights can be swapped. onPause says what
// happens to the generations running when the pause arrives:
// messages.OnPauseFinish (empty means it) lets them end, OnPauseAbort
// cancels them, to be generated again after the resume. Requests are held,
// never failed. Pausing a paused fleet changes only onPause.
func (c *Client) Pause(ctx context.Context, onPause string) (messages.PolicyState, error) {
	if onPause == "" {
		onPause = messages.OnPauseFinish
	}
	if !slices.Contains(messages.OnPauses, onPause) {
		return messages.PolicyState{}, fmt.Errorf("%w, not %q", ErrBadOnPause, onPause)
	}
	st, err := c.announce(ctx, func(st *messages.PolicyState) error {
		st.Paused, st.OnPause = true, onPause
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, c.waitDrained(ctx, st.Epoch)
}

// Resume lets generation go on under the given policy version, which may
// equal the current one but never be older (ErrVersionBackwards). On a
// running fleet it only moves the version on: an update without a pause.
func (c *Client) Resume(ctx context.Context, version int64) (messages.PolicyState, error) {
	return c.announce(ctx, func(st *messages.PolicyState) error {
		if version < st.Version {
			return fmt.Errorf("%w: %d is older than the fleet's %d", ErrVersionBackwards, version, st.Version)
		}
		st.Version, st.Paused, st.OnPause = version, false, ""
		return nil
	})
}

// announce stores the next state, change applied to the current one. The
// store refuses it when another announcement came first; it is then made
// again on that one, so two trainers never lose each other's changes.
func (c *Client) announce(ctx context.Context, change func(*messages.PolicyState) error) (messages.PolicyState, error) {
	for {
		cur, seq, err := current(ctx, c.js, c.subj)
		if err != nil {
			return messages.PolicyState{}, err
		}
		next := *cur
		if err := change(&next); err != nil {
			return *cur, err
		}
		next.V, next.Epoch, next.Time = messages.Version, cur.Epoch+1, time.Now().UnixNano()
		data, err := messages.Marshal(&next)
		if err != nil {
			return *cur, fmt.Errorf("control: encode policy state: %w", err)
		}
		_, err = c.js.Publish(ctx, c.subj.Control(), data, jetstream.WithExpectLastSequencePerSubject(seq))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			continue
		}
		if err != nil {
			return *cur, fmt.Errorf("control: announce policy state: %w", err)
		}
		// The acknowledgement travels to an inbox that other clients with
		// response rights could answer first: the state stored is read
		// back, and an announcement whose epoch holds another state was
		// refused after all, and is made again.
		stored, _, err := current(ctx, c.js, c.subj)
		if err != nil {
			return *cur, err
		}
		if stored.Epoch == next.Epoch && *stored != next {
			continue
		}
		return next, nil
	}
}

// waitDrained returns once every LLM worker that answers applies the given
// epoch (or a later one) and has no generation in flight.
func (c *Client) waitDrained(ctx context.Context, epoch uint64) error {
	for {
		workers, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		busy := slices.ContainsFunc(workers, func(s messages.WorkerStatus) bool {
			return s.Kind == messages.WorkerLLM && (s.Epoch < epoch || s.InFlight > 0)
		})
		if !busy {
			return nil
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("control: waiting for the LLM workers to drain: %w", ctx.Err())
		}
	}
}

// Workers asks every worker of the fleet for its status and returns the
// answers that came within a short wait, LLM workers first, by id.
func (c *Client) Workers(ctx context.Context) ([]messages.WorkerStatus, error) {
	inbox := c.nc.NewRespInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest(c.subj.ControlWorkers(), inbox, nil); err != nil {
		return nil, fmt.Errorf("control: ask the workers: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, statusWait)
	defer cancel()
	var out []messages.WorkerStatus
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break // the wait is over
		}
		st, err := messages.Decode[messages.WorkerStatus](m.Data)
		if err != nil {
			continue // not a worker's answer
		}
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b messages.WorkerStatus) int {
		if a.Kind != b.Kind {
			return -cmp.Compare(a.Kind, b.Kind) // "llm" before "env"
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ServeStatus answers status requests on Subjects.ControlWorkers with what
// status returns, until the subscription is unsubscribed or drained. Every
// worker answers (no queue group), so a request hears the whole fleet.
func ServeStatus(nc *nats.Conn, subj messages.Subjects, status func() messages.WorkerStatus) (*nats.Subscription, error) {
	if subj.Prefix == "" {
		subj = messages.NewSubjects("")
	}
	sub, err := nc.Subscribe(subj.ControlWorkers(), func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		st := status()
		st.V = messages.Version
		data, err := messages.Marshal(&st)
		if err != nil {
			return
		}
		_ = m.Respond(data)
	})
	if err != nil {
		return nil, fmt.Errorf("control: subscribe %s: %w", subj.ControlWorkers(), err)
	}
	return sub, nil
}
