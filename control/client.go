package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
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

	mu  sync.Mutex
	led *ledger // the stored states read so far
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
	return &Client{nc: nc, js: js, subj: subj, led: newLedger(subj, slog.Default())}, nil
}

// State reads the fleet's current policy state: the one its workers apply,
// the last stored state but for any stored with a lower version than an
// earlier one (which the workers refuse).
func (c *Client) State(ctx context.Context) (messages.PolicyState, error) {
	st, _, _, err := c.read(ctx)
	return st, err
}

// read brings the client's ledger up to date and returns the applied state,
// the last sequence stored and the highest epoch stored.
func (c *Client) read(ctx context.Context) (st messages.PolicyState, seq, epoch uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.led.update(ctx, c.js, nil); err != nil {
		return messages.PolicyState{}, 0, 0, err
	}
	return c.led.state, c.led.read, c.led.epoch, nil
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
	// The LLM workers answering before the pause must each answer after it
	// too (or stay silent for a while: stopped), so that one slow to answer
	// is not taken for drained.
	known, err := c.Workers(ctx)
	if err != nil {
		return messages.PolicyState{}, err
	}
	st, err := c.announce(ctx, func(st *messages.PolicyState) error {
		st.Paused, st.OnPause = true, onPause
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, c.waitDrained(ctx, st.Epoch, known)
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

// announce stores the next state, change applied to the current one, and
// returns it once the stream holds it. The store refuses it when another
// announcement came first; it is then made again on that one, so two
// trainers never lose each other's changes. Its epoch is one more than any
// stored before.
func (c *Client) announce(ctx context.Context, change func(*messages.PolicyState) error) (messages.PolicyState, error) {
	for {
		cur, seq, epoch, err := c.read(ctx)
		if err != nil {
			return messages.PolicyState{}, err
		}
		next := cur
		if err := change(&next); err != nil {
			return cur, err
		}
		next.V, next.Epoch, next.Time = messages.Version, epoch+1, time.Now().UnixNano()
		data, err := messages.Marshal(&next)
		if err != nil {
			return cur, fmt.Errorf("control: encode policy state: %w", err)
		}
		_, err = c.js.PublishMsg(ctx, bus.TracedMsg(c.subj.Control(), data, ""), jetstream.WithExpectLastSequencePerSubject(seq))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			if err := backoff(ctx); err != nil {
				return cur, err
			}
			continue
		}
		if err != nil {
			return cur, fmt.Errorf("control: announce policy state: %w", err)
		}
		// The acknowledgement travels to an inbox that other clients with
		// response rights could answer first: the state stored after seq
		// is read back, and an announcement not found there was refused
		// after all, and is made again.
		c.mu.Lock()
		stored, err := c.led.storedAt(ctx, seq, next)
		c.mu.Unlock()
		if err != nil {
			return cur, err
		}
		if stored {
			return next, nil
		}
		if err := backoff(ctx); err != nil {
			return cur, err
		}
	}
}

// backoff waits a short random time before an announcement is made again,
// so that trainers racing each other do not collide again at once.
func backoff(ctx context.Context) error {
	t := time.NewTimer(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// silentPolls is how many status requests in a row an LLM worker may leave
// unanswered before a pause takes it for stopped.
const silentPolls = 8

// waitDrained returns once every LLM worker applies the given epoch (or a
// later one) and has no generation in flight: every one that answers, and
// every one of known (those that answered before the pause) until it has
// been silent for silentPolls requests in a row.
func (c *Client) waitDrained(ctx context.Context, epoch uint64, known []messages.WorkerStatus) error {
	silent := map[string]int{}
	for _, w := range known {
		if w.Kind == messages.WorkerLLM {
			silent[w.ID] = 0
		}
	}
	for {
		workers, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		busy := false
		answered := map[string]bool{}
		for _, s := range workers {
			if s.Kind != messages.WorkerLLM {
				continue
			}
			answered[s.ID] = true
			silent[s.ID] = 0
			busy = busy || s.Epoch < epoch || s.InFlight > 0
		}
		for id, n := range silent {
			if answered[id] {
				continue
			}
			if n+1 >= silentPolls {
				delete(silent, id) // stopped, or cut off: it generates nothing
				continue
			}
			silent[id] = n + 1
			busy = true
		}
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
