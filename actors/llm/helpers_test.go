package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// waitTimeout bounds every wait in these tests; only a failing test
// reaches it.
const waitTimeout = 20 * time.Second

// model is the stand-in model server over real HTTP, with switches a test
// flips to make it fail or stall.
type model struct {
	url string
	toy http.Handler

	// down makes /health and /v1/completions answer 503, as a vLLM server
	// that is starting or overloaded does.
	down atomic.Bool
	// flap makes every other /health answer 503, as a loaded vLLM server's
	// stalled checks do.
	flap atomic.Bool
	// fault, when set, answers /v1/completions instead of the model.
	fault http.HandlerFunc
	// hold, when set, makes each completion announce itself on entered
	// and wait for a value from hold, or for hold to be closed (or for the
	// client to give up): a send releases one completion, a close all.
	hold    chan struct{}
	entered chan struct{}

	srv       *httptest.Server
	health    atomic.Int64
	tokenizes atomic.Int64

	mu sync.Mutex
	// prompts are the token ids of every /v1/completions request received.
	prompts [][]int32
	// active and peak count the completions being answered at once.
	active, peak int
}

func newModel(t *testing.T, opts toyllm.Options, setup func(*model)) *model {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	m := &model{toy: toyllm.New(opts).Handler(), entered: make(chan struct{}, 64)}
	if setup != nil {
		setup(m)
	}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	m.url = m.srv.URL
	return m
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/tokenize":
		m.tokenizes.Add(1)
	case "/health":
		n := m.health.Add(1)
		if m.down.Load() || m.flap.Load() && n%2 == 0 {
			unavailable(w)
			return
		}
	case "/v1/completions":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct {
			Prompt []int32 `json:"prompt"`
		}
		if err := json.Unmarshal(body, &req); err == nil {
			m.mu.Lock()
			m.prompts = append(m.prompts, req.Prompt)
			m.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.mu.Lock()
		m.active++
		m.peak = max(m.peak, m.active)
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.active--
			m.mu.Unlock()
		}()
		if m.hold != nil {
			m.entered <- struct{}{}
			select {
			case <-m.hold:
			case <-r.Context().Done():
				return
			}
		}
		switch {
		case m.down.Load():
			unavailable(w)
			return
		case m.fault != nil:
			m.fault(w, r)
			return
		}
	}
	m.toy.ServeHTTP(w, r)
}

// unavailable answers as vLLM does when it cannot take the request.
func unavailable(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"object":"error","message":"server overloaded","type":"ServiceUnavailableError","code":503}`)
}

// completions returns the prompts of the completions m received.
func (m *model) completions() [][]int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]int32(nil), m.prompts...)
}

// peakInFlight is the most completions m answered at once.
func (m *model) peakInFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// fixture is an embedded NATS server and a connection playing the env
// worker.
type fixture struct {
	srv  *server.Server
	nc   *nats.Conn
	subj messages.Subjects
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := bustest.RunServer(t)
	return &fixture{srv: s, nc: bustest.Connect(t, s, "test"), subj: messages.NewSubjects("")}
}

// running is a worker whose Run goroutine the test controls.
type running struct {
	*Worker
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error // receives Run's result
}

// start runs a worker for models on its own connection until the test
// ends, and waits until it is subscribed.
func (f *fixture) start(t *testing.T, opts Options, models ...*model) *running {
	t.Helper()
	nc := bustest.Connect(t, f.srv, "llm")
	for _, m := range models {
		opts.Endpoints = append(opts.Endpoints, m.url)
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	w, err := New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Worker: w, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := r.wait(); err != nil {
			t.Error(err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-r.done:
		t.Fatalf("worker stopped before it was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("worker not ready")
	}
	// Ready promises that the server has every subscription already.
	for _, s := range []string{f.subj.Generate(), f.subj.Tokenize(), f.subj.TokenizeChat(), f.subj.Detokenize(), f.subj.ModelInfo()} {
		if !f.srv.GlobalAccount().SubscriptionInterest(s) {
			t.Fatalf("ready, but no subscriber on %s", s)
		}
	}
	return r
}

var errStillRunning = errors.New("worker Run has not returned")

// wait waits, bounded, for Run to return; it may be called more than once.
func (r *running) wait() error {
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(waitTimeout):
		return errStillRunning
	}
}

// generate sends a GenerateRequest and decodes the reply.
func (f *fixture) generate(t *testing.T, req *messages.GenerateRequest) *messages.GenerateReply {
	t.Helper()
	return request[messages.GenerateReply](t, f, f.subj.Generate(), req)
}

// tokenize sends a TokenizeRequest and decodes the reply.
func (f *fixture) tokenize(t *testing.T, req *messages.TokenizeRequest) *messages.TokenizeReply {
	t.Helper()
	return request[messages.TokenizeReply](t, f, f.subj.Tokenize(), req)
}

func request[T any, P interface {
	*T
	Validate() error
}](t *testing.T, f *fixture, subject string, req any) *T {
	t.Helper()
	data, err := messages.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := decodeReply[T, P](f.nc.Request(subject, data, waitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func decodeReply[T any, P interface {
	*T
	Validate() error
}](m *nats.Msg, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	rep, err := messages.Decode[T, P](m.Data)
	if err != nil {
		return nil, fmt.Errorf("undecodable reply: %w", err)
	}
	return rep, nil
}

// gamePrompt is the first turn of a GuessTheNumber game, as token ids.
func gamePrompt() []int32 {
	return toyllm.Tokenizer{}.Encode(chat.Render([]chat.Message{{Role: "user", Content: "You are playing Guess The Number. " +
		"Guess the number between 1 and 20 and put your guess in \\boxed{}."}}, true))
}

// generateRequest is a GenerateRequest for turn 0 of episode.
func generateRequest(episode string, seed int64) *messages.GenerateRequest {
	return &messages.GenerateRequest{
		V: messages.Version, EpisodeID: episode, Prompt: gamePrompt(), MaxTokens: 200,
		Sampling: messages.SamplingParams{Temperature: 1, Seed: &seed},
	}
}

// preferring returns n episode ids whose sticky endpoint among urls is
// urls[want].
func preferring(urls []string, want, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("episode-%d", i)
		best := 0
		for j, u := range urls {
			if score(id, u) > score(id, urls[best]) {
				best = j
			}
		}
		if best == want {
			ids = append(ids, id)
		}
	}
	return ids
}

func urls(models ...*model) []string {
	var us []string
	for _, m := range models {
		us = append(us, m.url)
	}
	return us
}
