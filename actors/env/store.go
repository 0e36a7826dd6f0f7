package env

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errStopped marks an episode the worker gave up waiting for the store on
// because it is shutting down: the episode is handed back, not failed.
var errStopped = errors.New("worker stopping")

// JetStream API error codes of a store that cannot take a message now
// (nats-server's errors.json).
const (
	jsClusterNotAvail          = 10008 // JetStream system temporarily unavailable
	jsInsufficientResources    = 10023 // the server's store limit is reached
	jsNotEnabledForAccount     = 10039 // JetStream not enabled for account
	jsStorageResourcesExceeded = 10047 // no room left for a stream's reservation
	jsNotEnabled               = 10076 // JetStream not enabled
	jsStreamStoreFailed        = 10077 // the stream could not store the message (a full stream, an I/O error)
)

// Waiting for the store: the pause between two tries grows from
// storeFirstBackoff to storeMaxBackoff; the worker logs the outage when it
// starts, every storeLogEvery while it lasts and when it ends; it remembers
// why it handed back its last maxHandBacks episodes.
const (
	storeFirstBackoff = time.Second
	storeMaxBackoff   = 30 * time.Second
	storeLogEvery     = time.Minute
	maxHandBacks      = 4096
)

// storeFault reports whether err means the JetStream store cannot take a
// write or answer a read now — the server is out of disk space, read-only,
// restarting or has JetStream disabled, or a stream is full — as opposed to
// a fault of the message or the request. Such a fault is the store's, not
// the episode's: the episode waits for the store instead of using up a
// delivery.
//
// On a full or read-only disk a single nats-server keeps the stream's write
// error and leaves every later publish to it unanswered (a timeout) until
// JetStream restarts (see bus.WatchStore); a server that shut JetStream down
// has no responders for it; JetStream's own store limit answers with
// "insufficient resources"; a full stream with "maximum bytes exceeded"
// (stream store failed).
func storeFault(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, jetstream.ErrServerShutdown):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsClusterNotAvail, jsInsufficientResources, jsStorageResourcesExceeded, jsStreamStoreFailed,
			jsNotEnabled, jsNotEnabledForAccount:
			return true
		}
	}
	return false
}

// store runs op, a write to or a read from the JetStream store, until it
// succeeds or fails for a reason other than a store fault. A store fault is
// waited out within this delivery: the episode stays live, so keepAlive
// keeps its delivery from expiring, and op is tried again after a pause
// growing from 1 s to 30 s. Only the worker's shutdown (halt) ends the
// wait, with an error wrapping errStopped.
func (e *episode) store(ctx context.Context, what string, op func(context.Context) error) error {
	var backoff time.Duration
	waiting := false
	defer func() {
		if waiting {
			e.w.storeWaiting.Add(-1)
		}
	}()
	for {
		err := op(ctx)
		if err == nil || !storeFault(err) || ctx.Err() != nil {
			if waiting {
				e.w.storeState.back(e.w, what)
			}
			return err
		}
		if !waiting {
			waiting = true
			e.w.storeWaiting.Add(1)
			e.w.storeWaits.Add(1)
		}
		e.w.storeState.fault(e.w, what, err)
		backoff = min(max(2*backoff, storeFirstBackoff), storeMaxBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-e.halt:
			t.Stop()
			return fmt.Errorf("%w while waiting for the store to %s: %w", errStopped, what, err)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}

// storeState is what the worker last logged about the store, so that an
// outage costs one line when it starts, one a minute while it lasts and one
// when it ends, however many episodes wait.
type storeState struct {
	mu      sync.Mutex
	down    bool      // an outage was logged and its end was not
	since   time.Time // when the logged outage started
	lastLog time.Time
}

// fault notes that an episode found the store refusing.
func (s *storeState) fault(w *Worker, what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	switch {
	case !s.down:
		s.down, s.since, s.lastLog = true, now, now
		w.log.Warn("JetStream store unavailable; episodes wait for it within their deliveries", "op", what, "err", err)
	case now.Sub(s.lastLog) >= storeLogEvery:
		s.lastLog = now
		w.log.Warn("still waiting for the JetStream store", "for", now.Sub(s.since).Round(time.Second),
			"episodes_waiting", w.storeWaiting.Load(), "op", what, "err", err)
	}
}

// back notes that an episode that waited got through to the store.
func (s *storeState) back(w *Worker, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return
	}
	s.down = false
	w.log.Info("JetStream store available again; waiting episodes go on", "after", time.Since(s.since).Round(time.Millisecond), "op", what)
}

// storeDown reports whether episodes of this worker are waiting for the
// store.
func (w *Worker) storeDown() bool { return w.storeWaiting.Load() > 0 }

// handBacks remembers why this worker last handed each episode back, so that
// a later delivery beyond the limit names the cause if it lands here.
type handBacks struct {
	mu sync.Mutex
	m  map[string]handBack
}

// handBack is one delivery that ended without an outcome on this worker.
type handBack struct {
	attempt int32
	err     error
}

func (h *handBacks) note(id string, attempt int32, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]handBack{}
	}
	if _, ok := h.m[id]; !ok && len(h.m) >= maxHandBacks {
		for k := range h.m { // forget any one: this is a hint, not a record
			delete(h.m, k)
			break
		}
	}
	h.m[id] = handBack{attempt: attempt, err: err}
}

func (h *handBacks) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

func (h *handBacks) last(id string) (handBack, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hb, ok := h.m[id]
	return hb, ok
}

// giveUpReason says why an episode delivered beyond the limit has no
// outcome: the cause this worker saw if an earlier delivery of it ended
// here, and otherwise what a delivery ending without an outcome means.
func (w *Worker) giveUpReason(id string, deliveries int32) string {
	hb, ok := w.handBacks.last(id)
	switch {
	case ok && errors.Is(hb.err, errInfra):
		return fmt.Sprintf("gave up after %d deliveries without an outcome: the model side stayed down (delivery %d here: %v)", deliveries, hb.attempt, hb.err)
	case ok:
		return fmt.Sprintf("gave up after %d deliveries without an outcome (delivery %d here ended with: %v)", deliveries, hb.attempt, hb.err)
	}
	return fmt.Sprintf("gave up after %d deliveries without an outcome: the last one ended without a result (its worker stopped, lost contact with the server, or shut down while waiting for the store)", deliveries)
}
