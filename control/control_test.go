package control_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
)

// fleet starts a server with rollfleet's streams and returns a trainer's
// client on it.
func fleet(t *testing.T) (*control.Client, func(name string) *control.Watcher) {
	c, watch, _ := fleetOn(t)
	return c, watch
}

// fleetOn is fleet, with a function that connects to the server.
func fleetOn(t *testing.T) (*control.Client, func(name string) *control.Watcher, func(name string) *nats.Conn) {
	t.Helper()
	s := bustest.RunServer(t)
	ctx := t.Context()
	js := bustest.JetStream(t, s, "setup")
	if err := bus.EnsureStreams(ctx, js, messages.NewSubjects(""), bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := control.NewClient(bustest.Connect(t, s, "trainer"), messages.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	watch := func(name string) *control.Watcher {
		w, err := control.Watch(ctx, bustest.Connect(t, s, name), control.WatchOptions{Resync: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	return c, watch, func(name string) *nats.Conn { return bustest.Connect(t, s, name) }
}

func TestWatcherFollowsAnnouncements(t *testing.T) {
	c, watch := fleet(t)
	ctx := t.Context()
	w := watch("worker")
	if st := w.State(); st.Version != 0 || st.Paused {
		t.Fatalf("initial state %+v, want version 0, running", st)
	}
	changed := w.Changed()
	if _, err := c.Pause(ctx, messages.OnPauseAbort); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed not closed after a pause")
	}
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if st := w.State(); !st.Paused || st.OnPause != messages.OnPauseAbort {
			return fmt.Errorf("state %+v, want paused with abort", st)
		}
		return nil
	})

	// WaitRunning holds until the resume.
	got := make(chan messages.PolicyState, 1)
	go func() {
		st, _ := w.WaitRunning(ctx)
		got <- st
	}()
	select {
	case st := <-got:
		t.Fatalf("WaitRunning returned %+v while paused", st)
	default:
	}
	if _, err := c.Resume(ctx, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-got:
		if st.Version != 3 || st.Paused {
			t.Fatalf("WaitRunning returned %+v, want version 3 running", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitRunning did not return after the resume")
	}

	// A worker that starts late knows the state at once.
	if st := watch("late").State(); st.Version != 3 || st.Paused || st.Epoch != 2 {
		t.Fatalf("late watcher's state %+v, want epoch 2, version 3, running", st)
	}
	paused, err := c.Pause(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if paused.OnPause != messages.OnPauseFinish || paused.Version != 3 {
		t.Fatalf("pause announced %+v, want version 3 with finish", paused)
	}
	if st := watch("later").State(); !st.Paused {
		t.Fatalf("a watcher started during a pause sees %+v", st)
	}
}

func TestResumeRefusesOlderVersions(t *testing.T) {
	c, _ := fleet(t)
	ctx := t.Context()
	if _, err := c.Resume(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(ctx, 4); !errors.Is(err, control.ErrVersionBackwards) {
		t.Fatalf("resume to an older version: %v, want ErrVersionBackwards", err)
	}
	if _, err := c.Pause(ctx, "later"); !errors.Is(err, control.ErrBadOnPause) {
		t.Fatalf("pause with an unknown on_pause: %v, want ErrBadOnPause", err)
	}
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 5 || st.Paused || st.Epoch != 1 {
		t.Fatalf("state %+v after refused announcements, want epoch 1 version 5", st)
	}
}

// Two trainers announcing at once: every announcement gets its own epoch.
func TestConcurrentAnnouncementsKeepEveryEpoch(t *testing.T) {
	c, _ := fleet(t)
	ctx := t.Context()
	const n = 20
	type result struct {
		st  messages.PolicyState
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			st, err := c.Resume(ctx, 1)
			results <- result{st, err}
		}()
	}
	epochs := map[uint64]bool{}
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if epochs[r.st.Epoch] {
			t.Fatalf("two announcements stored as epoch %d", r.st.Epoch)
		}
		epochs[r.st.Epoch] = true
	}
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != n || len(epochs) != n {
		t.Fatalf("epoch %d after %d announcements, %d distinct epochs returned", st.Epoch, n, len(epochs))
	}
}

// Pause returns only once every LLM worker applies it and has nothing in
// flight.
func TestPauseWaitsForTheWorkersToDrain(t *testing.T) {
	c, watch, connect := fleetOn(t)
	ctx := t.Context()
	w := watch("llm")
	var inFlight atomic.Int64
	inFlight.Store(2)
	status := func() messages.WorkerStatus {
		st := w.State()
		return messages.WorkerStatus{Kind: messages.WorkerLLM, ID: "llm-1", Epoch: st.Epoch, Version: st.Version, Paused: st.Paused, InFlight: inFlight.Load()}
	}
	srv, err := control.ServeStatus(connect("llm-status"), messages.Subjects{}, status)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Unsubscribe() }()

	done := make(chan error, 1)
	go func() {
		_, err := c.Pause(ctx, messages.OnPauseFinish)
		done <- err
	}()
	// The worker still has two generations running: the pause waits.
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !w.State().Paused {
			return errors.New("worker not paused yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Pause returned (%v) with generations in flight", err)
	case <-time.After(3 * 100 * time.Millisecond): // three polls
	}
	inFlight.Store(0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pause did not return once the worker drained")
	}
	workers, err := c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != 1 || workers[0].ID != "llm-1" || !workers[0].Paused {
		t.Fatalf("workers %+v, want llm-1 paused", workers)
	}

	// A pause whose context ends first says what it waited for.
	inFlight.Store(1)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Pause(short, messages.OnPauseAbort); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pause that cannot drain: %v, want a deadline error", err)
	}
}

// An LLM worker that answered before the pause and then falls silent is
// waited for: a worker slow to answer is not taken for drained.
func TestPauseWaitsForASilentWorker(t *testing.T) {
	c, _, connect := fleetOn(t)
	ctx := t.Context()
	nc := connect("llm")
	var answered atomic.Int64
	var drained atomic.Bool
	sub, err := nc.Subscribe(messages.NewSubjects("").ControlWorkers(), func(m *nats.Msg) {
		// It answers the request before the announcement, busy, and then
		// nothing until it has drained.
		if answered.Load() > 0 && !drained.Load() {
			return
		}
		answered.Add(1)
		st := messages.WorkerStatus{V: messages.Version, Kind: messages.WorkerLLM, ID: "llm-slow", InFlight: 1}
		if drained.Load() {
			st.Epoch, st.InFlight = 1, 0
		}
		data, _ := messages.Marshal(&st)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Pause(ctx, messages.OnPauseFinish)
		done <- err
	}()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st, err := c.State(ctx); err != nil || !st.Paused {
			return fmt.Errorf("not paused yet (%v)", err)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Pause returned (%v) while a worker known to be busy was silent", err)
	case <-time.After(3 * 100 * time.Millisecond): // a few polls, fewer than silentPolls
	}
	drained.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pause did not return once the worker drained")
	}
}
