// Package control is rollfleet's control plane: the policy state a trainer
// announces (the version of the weights the model servers serve, and pauses
// while it swaps them) and the workers' answers about what they apply and
// have in flight.
//
// The state is what the control stream stored on Subjects.Control: its
// last message, unless that one's policy version is lower than an earlier
// one's (versions never decrease; such a state is refused, and logged).
// Workers follow it with a Watcher; trainers change it with a Client, whose
// Pause returns once no generation runs on a model server. Both read the
// stream only: an announcement the stream refused is never applied, however
// many subscribers of the subject received it.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// DefaultResync is how often a Watcher reads the stored state again, which
// heals an announcement it missed while disconnected.
const DefaultResync = 5 * time.Second

// rereads are the delays between the reads a message on the control
// subject sets off: it may reach the watcher before the stream has stored
// it, or have been refused, and then is never stored.
var rereads = []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond}

// WatchOptions configures Watch. Zero values take the defaults noted.
type WatchOptions struct {
	// Subjects names the subjects (default prefix "rf").
	Subjects messages.Subjects
	// Resync is how often the stored state is read again (default
	// DefaultResync).
	Resync time.Duration
	// Logger receives "fleet paused" and "fleet resumed" lines, refused
	// states, and at debug level every state applied (default
	// slog.Default()).
	Logger *slog.Logger
}

// Watcher follows the fleet's policy state. Its methods are safe for
// concurrent use.
type Watcher struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts WatchOptions
	log  *slog.Logger
	sub  *nats.Subscription
	led  *ledger       // read by Watch, then by the loop alone
	wake chan struct{} // a message on the control subject: read the stream

	mu    sync.Mutex
	state messages.PolicyState
	// lastPause is the epoch of the latest paused state seen.
	lastPause uint64
	changed   chan struct{} // closed and replaced at each change

	stop context.CancelFunc
	done chan struct{}
}

// Watch reads the current policy state and follows it until Close. It
// returns only once the stored state is read (retrying while the stream is
// unavailable, as during a leader election), or ctx's error: a worker that
// started during a pause must not generate under weights being swapped. A
// missing control stream, or one without a state, is the initial state
// (version 0, running).
func Watch(ctx context.Context, nc *nats.Conn, opts WatchOptions) (*Watcher, error) {
	if opts.Subjects.Prefix == "" {
		opts.Subjects = messages.NewSubjects("")
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	w := &Watcher{nc: nc, js: js, opts: opts, log: opts.Logger, led: newLedger(opts.Subjects, opts.Logger),
		wake: make(chan struct{}, 1), changed: make(chan struct{}), done: make(chan struct{})}
	// A message on the subject is only a sign that the stream may hold a
	// new state: what it says is never applied, for the stream may have
	// refused it. Subscribed before the first read, so that no stored
	// state falls between the two.
	w.sub, err = nc.Subscribe(opts.Subjects.Control(), func(*nats.Msg) {
		select {
		case w.wake <- struct{}{}:
		default: // a read is due already
		}
	})
	if err != nil {
		return nil, fmt.Errorf("control: subscribe %s: %w", opts.Subjects.Control(), err)
	}
	if err := w.first(ctx); err != nil {
		_ = w.sub.Unsubscribe()
		return nil, err
	}
	loop, stop := context.WithCancel(context.WithoutCancel(ctx))
	w.stop = stop
	go w.loop(loop)
	return w, nil
}

// Close stops following the state; the last one known stays readable.
func (w *Watcher) Close() {
	w.stop()
	<-w.done
	_ = w.sub.Unsubscribe()
}

// Current is State for a watcher that may not exist yet: false on a nil
// watcher (a worker whose Run has not started following the fleet).
func (w *Watcher) Current() (messages.PolicyState, bool) {
	if w == nil {
		return messages.PolicyState{}, false
	}
	return w.State(), true
}

// State is the policy state the fleet is in, as far as this watcher knows.
func (w *Watcher) State() messages.PolicyState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Changed returns a channel closed at the next change of the state.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// LastPause is the epoch of the latest paused state this watcher saw (0
// for none): a request sent at an earlier epoch may have been held by it.
func (w *Watcher) LastPause() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastPause
}

// WaitRunning returns the state once the fleet is not paused, at once when it
// is not, or ctx's error.
func (w *Watcher) WaitRunning(ctx context.Context) (messages.PolicyState, error) {
	for {
		w.mu.Lock()
		st, ch := w.state, w.changed
		w.mu.Unlock()
		if !st.Paused {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// apply takes st, the state stored at sequence seq, which the ledger
// applies.
func (w *Watcher) apply(seq uint64, st messages.PolicyState) {
	w.mu.Lock()
	was := w.state
	w.state = st
	if st.Paused {
		w.lastPause = st.Epoch
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.log.Debug("policy state applied", "seq", seq, "epoch", st.Epoch, "policy_version", st.Version, "paused", st.Paused, "time_ns", st.Time)
	switch {
	case st.Paused && !was.Paused:
		w.log.Info("fleet paused", "policy_version", st.Version, "on_pause", onPause(st.OnPause))
	case !st.Paused && was.Paused:
		w.log.Info("fleet resumed", "policy_version", st.Version)
	case st.Version != was.Version:
		w.log.Info("policy version changed", "policy_version", st.Version)
	}
}

// loop reads the stream at every resync and after every message on the
// control subject, until ctx ends.
func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.opts.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.resync(ctx)
		case <-w.wake:
			w.reread(ctx)
		}
	}
}

// reread reads the stream until it holds a state not read before, or
// rereads run out: the message that set it off was refused, or is older.
func (w *Watcher) reread(ctx context.Context) {
	for _, d := range rereads {
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		read := w.led.read
		w.resync(ctx)
		if w.led.read != read {
			return
		}
	}
}

// first reads the stored state, retrying with a growing delay until it
// can, or ctx ends.
func (w *Watcher) first(ctx context.Context) error {
	delay := 50 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, w.opts.Resync)
		err := w.led.update(rctx, w.js, w.apply)
		cancel()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil // nobody announced anything: the initial state
		}
		if err == nil {
			return nil
		}
		w.log.Warn("cannot read the fleet's policy state yet; waiting", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("control: read the policy state: %w", err)
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// resync reads the states stored since the last read and applies them.
func (w *Watcher) resync(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.opts.Resync)
	defer cancel()
	if err := w.led.update(ctx, w.js, w.apply); err != nil {
		w.log.Debug("read policy state", "err", err)
	}
}

// onPause is a state's OnPause with its default filled in.
func onPause(s string) string {
	if s == "" {
		return messages.OnPauseFinish
	}
	return s
}
