package llm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// controlled is a fixture with the streams and a trainer's control client.
func controlled(t *testing.T) (*fixture, *control.Client) {
	t.Helper()
	f := newFixture(t)
	js, err := jetstream.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(t.Context(), js, f.subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := control.NewClient(bustest.Connect(t, f.srv, "trainer"), f.subj)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// generateAsync sends a generate request and delivers its reply (or the
// error) on the returned channel.
func (f *fixture) generateAsync(t *testing.T, req *messages.GenerateRequest) <-chan *messages.GenerateReply {
	t.Helper()
	data, err := messages.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *messages.GenerateReply, 1)
	go func() {
		rep, err := decodeReply[messages.GenerateReply](f.nc.Request(f.subj.Generate(), data, waitTimeout))
		if err != nil {
			rep = &messages.GenerateReply{Error: err.Error()}
		}
		out <- rep
	}()
	return out
}

// workerState waits until the only LLM worker's status satisfies ok.
func workerState(t *testing.T, c *control.Client, what string, ok func(messages.WorkerStatus) bool) {
	t.Helper()
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		ws, err := c.Workers(t.Context())
		if err != nil {
			return err
		}
		if len(ws) != 1 || !ok(ws[0]) {
			return fmt.Errorf("workers %+v, want one that is %s", ws, what)
		}
		return nil
	})
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s", what)
	}
	panic("unreachable")
}

func turnRequest() *messages.GenerateRequest {
	return &messages.GenerateRequest{
		V: messages.Version, EpisodeID: "e1", Prompt: messages.Tokens{1, 2, 3}, MaxTokens: 4,
		Sampling: messages.SamplingParams{Temperature: 1},
	}
}

// A pause with finish lets the running generation end under the old
// version, returns only then, and holds a new request until the resume,
// which tags it with the new version.
func TestPauseFinishHoldsNewGenerations(t *testing.T) {
	f, c := controlled(t)
	ctx := t.Context()
	m := newModel(t, toyllm.Options{}, func(m *model) { m.hold = make(chan struct{}) })
	f.start(t, Options{}, m)

	first := f.generateAsync(t, turnRequest())
	receive(t, m.entered, "first completion")
	paused := make(chan error, 1)
	go func() {
		_, err := c.Pause(ctx, messages.OnPauseFinish)
		paused <- err
	}()
	workerState(t, c, "paused with one generation in flight at its healthy endpoint", func(s messages.WorkerStatus) bool {
		return s.Paused && s.InFlight == 1 && len(s.Endpoints) == 1 && s.Endpoints[0].URL == m.url &&
			s.Endpoints[0].Healthy && s.Endpoints[0].InFlight == 1 && s.Endpoints[0].Max == 64
	})
	second := f.generateAsync(t, turnRequest())
	workerState(t, c, "holding a request", func(s messages.WorkerStatus) bool { return s.Held == 1 })
	select {
	case err := <-paused:
		t.Fatalf("Pause returned (%v) while a generation ran", err)
	default:
	}

	m.hold <- struct{}{} // the first completion ends
	if err := receive(t, paused, "end of the pause"); err != nil {
		t.Fatal(err)
	}
	if rep := receive(t, first, "first reply"); rep.Error != "" || rep.PolicyVersion != 0 || len(rep.Tokens) == 0 {
		t.Fatalf("first reply %+v, want tokens under version 0", rep)
	}
	if n := len(m.completions()); n != 1 {
		t.Fatalf("%d completions reached the model during the pause, want only the first", n)
	}

	if _, err := c.Resume(ctx, 7); err != nil {
		t.Fatal(err)
	}
	receive(t, m.entered, "second completion")
	m.hold <- struct{}{}
	if rep := receive(t, second, "second reply"); rep.Error != "" || rep.PolicyVersion != 7 {
		t.Fatalf("second reply %+v, want tokens under version 7", rep)
	}
}

// A pause with abort cancels the running generation at once; it is
// generated again, whole, after the resume, under the new version.
func TestPauseAbortRegeneratesAfterResume(t *testing.T) {
	f, c := controlled(t)
	ctx := t.Context()
	m := newModel(t, toyllm.Options{}, func(m *model) { m.hold = make(chan struct{}) })
	w := f.start(t, Options{}, m)

	reply := f.generateAsync(t, turnRequest())
	receive(t, m.entered, "completion")
	pctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if _, err := c.Pause(pctx, messages.OnPauseAbort); err != nil {
		t.Fatalf("pause with abort: %v", err)
	}
	if got := w.Stats().Aborted; got != 1 {
		t.Fatalf("%d generations aborted, want 1", got)
	}
	workerState(t, c, "holding the aborted request", func(s messages.WorkerStatus) bool {
		return s.Paused && s.InFlight == 0 && s.Held == 1
	})

	if _, err := c.Resume(ctx, 2); err != nil {
		t.Fatal(err)
	}
	receive(t, m.entered, "the completion again")
	m.hold <- struct{}{}
	rep := receive(t, reply, "reply")
	if rep.Error != "" || rep.PolicyVersion != 2 || len(rep.Tokens) == 0 {
		t.Fatalf("reply %+v, want tokens under version 2", rep)
	}
	prompts := m.completions()
	if len(prompts) != 2 || fmt.Sprint(prompts[0]) != fmt.Sprint(prompts[1]) {
		t.Fatalf("completions %v, want the same prompt twice", prompts)
	}
}

// A worker started during a pause holds its first request.
func TestWorkerStartedDuringAPauseHolds(t *testing.T) {
	f, c := controlled(t)
	ctx := t.Context()
	if _, err := c.Pause(ctx, ""); err != nil {
		t.Fatal(err)
	}
	m := newModel(t, toyllm.Options{}, nil)
	f.start(t, Options{}, m)
	reply := f.generateAsync(t, turnRequest())
	workerState(t, c, "holding a request", func(s messages.WorkerStatus) bool { return s.Paused && s.Held == 1 })
	if _, err := c.Resume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if rep := receive(t, reply, "reply"); rep.Error != "" || rep.PolicyVersion != 1 {
		t.Fatalf("reply %+v, want tokens under version 1", rep)
	}
}
