package metrics_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	lw := startLLM(ctx, t, time.Hour)
	if err := lw.m.WatchLLM(lw.w); err == nil {
		t.Error("a second LLM worker in one registry was accepted")
	}
	s, subj, srv, model := lw.s, lw.subj, lw.srv, lw.model
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

	lw.stopModel()
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

// TestReadinessFollowsModelHealth stops the only model server of an LLM
// worker that nobody sends requests: its health checks alone must turn
// /readyz to 503 and the endpoint's gauge to 0.
func TestReadinessFollowsModelHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lw := startLLM(ctx, t, 10*time.Millisecond)
	readyzIs(t, lw.srv.URL(), http.StatusOK, "ready")
	lw.stopModel()
	readyzIs(t, lw.srv.URL(), http.StatusServiceUnavailable, "model endpoints: no model endpoint is healthy")
	if v, ok := scrape(t, lw.srv.URL()).value("rollfleet_model_endpoint_healthy", map[string]string{"endpoint": lw.model}); !ok || v != 0 {
		t.Errorf("rollfleet_model_endpoint_healthy = %v (%v) with the server gone", v, ok)
	}
	if st := lw.w.Stats(); st.Generate+st.Tokenize != 0 {
		t.Errorf("stats %+v: the worker was sent requests", st)
	}
}

// llmWorker is an LLM worker on the stand-in model, watched by metrics
// served over HTTP, running until the test ends.
type llmWorker struct {
	s         *server.Server
	subj      messages.Subjects
	m         *metrics.Metrics
	srv       *metrics.Server
	w         *llm.Worker
	model     string
	stopModel func()
}

// startLLM starts an LLM worker whose endpoint health is checked every
// healthEvery, with its streams and metrics.
func startLLM(ctx context.Context, t *testing.T, healthEvery time.Duration) *llmWorker {
	t.Helper()
	model, stopModel, err := toyllm.New(toyllm.Options{}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	lw := &llmWorker{model: model, stopModel: func() { stopOnce.Do(stopModel) }, subj: messages.NewSubjects("")}
	t.Cleanup(lw.stopModel)
	lw.s = bustest.RunServer(t)
	nc := bustest.Connect(t, lw.s, "llmworker")
	js := bustest.JetStream(t, lw.s, "streams")
	if err := bus.EnsureStreams(ctx, js, lw.subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	lw.m = metrics.New()
	if lw.srv, err = lw.m.Serve("127.0.0.1:0", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lw.srv.Close() })
	lw.m.WatchNATS(nc, js, lw.subj)
	lw.w, err = llm.New(nc, llm.Options{Endpoints: []string{model}, Logger: slog.New(slog.DiscardHandler), Metrics: lw.m.LLM(), HealthInterval: healthEvery})
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.m.WatchLLM(lw.w); err != nil {
		t.Fatal(err)
	}
	stop, err := lw.w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return lw
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
