package metrics_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestLLMWorkerFamilies runs an LLM worker on the stand-in model: its
// calls feed the per-endpoint histograms, and once the model server is
// gone its calls fail, the endpoint is marked down, and /readyz says no
// model endpoint is healthy.
func TestLLMWorkerFamilies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model, stopModel, err := toyllm.New(toyllm.Options{}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	t.Cleanup(func() { stopOnce.Do(stopModel) })
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s, "llmworker")
	js := bustest.JetStream(t, s, "streams")
	subj := messages.NewSubjects("")
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	srv, err := m.Serve("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	m.WatchNATS(nc, js, subj)
	w, err := llm.New(nc, llm.Options{Endpoints: []string{model}, Logger: slog.New(slog.DiscardHandler), Metrics: m.LLM(), HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchLLM(w); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchLLM(w); err == nil {
		t.Error("a second LLM worker in one registry was accepted")
	}
	wctx, stopWorker := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stopWorker(); wg.Wait() })
	wg.Go(func() {
		if err := w.Run(wctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	client := bustest.Connect(t, s, "client")
	generate := func() *messages.GenerateReply {
		t.Helper()
		var tok *messages.TokenizeReply
		bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			var err error
			tok, err = call[messages.TokenizeReply](ctx, client, subj.Tokenize(), &messages.TokenizeRequest{V: messages.Version, EpisodeID: "e", Text: "Guess a number."})
			return err
		})
		if tok.Error != "" {
			return &messages.GenerateReply{Error: tok.Error, Code: tok.Code}
		}
		rep, err := call[messages.GenerateReply](ctx, client, subj.Generate(), &messages.GenerateRequest{
			V: messages.Version, EpisodeID: "e", Prompt: tok.Tokens, MaxTokens: 8, Sampling: messages.SamplingParams{Temperature: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := generate(); rep.Error != "" {
		t.Fatalf("generate: %s", rep.Error)
	}
	readyzIs(t, srv.URL(), http.StatusOK, "ready")
	f := scrape(t, srv.URL())
	ep := map[string]string{"endpoint": model}
	for _, name := range []string{"rollfleet_generate_duration_seconds", "rollfleet_tokenize_duration_seconds", "rollfleet_model_endpoint_healthy"} {
		if v, _ := f.value(name, ep); v < 1 {
			t.Errorf("%s%v = %v, want ≥ 1", name, ep, v)
		}
	}

	stopOnce.Do(stopModel)
	if rep := generate(); rep.Error == "" {
		t.Fatal("generate succeeded without a model server")
	}
	readyzIs(t, srv.URL(), http.StatusServiceUnavailable, "model endpoints: no model endpoint is healthy")
	f = scrape(t, srv.URL())
	if v, ok := f.value("rollfleet_model_endpoint_healthy", ep); !ok || v != 0 {
		t.Errorf("rollfleet_model_endpoint_healthy = %v (%v) with the server gone", v, ok)
	}
	if v, _ := f.value("rollfleet_model_errors_total", ep); v < 1 {
		t.Errorf("rollfleet_model_errors_total = %v with the server gone", v)
	}
}

// call sends a request and decodes its reply.
func call[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, nc *nats.Conn, subject string, req any) (*T, error) {
	data, err := messages.Marshal(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, subject, data)
	if err != nil {
		return nil, err
	}
	return messages.Decode[T, P](m.Data)
}
