package bus_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestAuthConfEnvWorkerJudge runs the judge an env worker serves itself
// ("envworker --math-judge URL": an LLM worker on the judge's subjects in
// the env worker's process) under the env worker's user: the judge's LLM
// worker subscribes and follows its policy state, and the env worker's
// generate and tokenize requests to it are answered. Nothing is refused.
func TestAuthConfEnvWorkerJudge(t *testing.T) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, _ := startAuthStreams(t, ctx, subj)
	model := httptest.NewServer(toyllm.New(toyllm.Options{Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(model.Close)

	nc, _, log := connectAs(t, url, "envworker")
	jo, jw, err := envactor.NewJudge(nc, model.URL, subj, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stop, err := jw.Start(ctx)
	if err != nil {
		t.Fatalf("judge's LLM worker: %v (%q)", err, log.Lines())
	}
	t.Cleanup(stop)
	ask := func(subject string, req any) []byte {
		t.Helper()
		data, err := messages.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.RequestWithContext(ctx, subject, data)
		if err != nil {
			t.Fatalf("request %s: %v (%q)", subject, err, log.Lines())
		}
		return m.Data
	}
	tok, err := messages.Decode[messages.TokenizeReply](ask(jo.Subjects.Tokenize(), &messages.TokenizeRequest{V: messages.Version, Text: "Is 1/2 equal to 0.5?"}))
	if err != nil || tok.Error != "" || len(tok.Tokens) == 0 {
		t.Fatalf("tokenize: %+v, %v", tok, err)
	}
	gen, err := messages.Decode[messages.GenerateReply](ask(jo.Subjects.Generate(), &messages.GenerateRequest{
		V: messages.Version, EpisodeID: "judge-1", Prompt: tok.Tokens, MaxTokens: 16,
		Sampling: messages.SamplingParams{Temperature: 1, TopP: 1},
	}))
	if err != nil || gen.Error != "" || len(gen.Tokens) == 0 {
		t.Fatalf("generate: %+v, %v", gen, err)
	}
	// The judge's worker reads its policy state at start and every few
	// seconds; a refusal shows in the connection's error log.
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	// The log gets a refusal through the connection's callback queue,
	// maybe after the flush; the connection's last error is set before.
	if err := nc.LastError(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if lines := log.Lines(); len(lines) > 0 {
		t.Fatalf("refused: %q", lines)
	}
}
