package vllm

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/toyllm"
)

// toyServer starts the stand-in model server and returns it with a client.
func toyServer(t *testing.T, opts toyllm.Options) (*toyllm.Server, *Client) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	s := toyllm.New(opts)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	c, err := New(ts.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return s, c
}

func TestWeightUpdateRoundTrip(t *testing.T) {
	_, c := toyServer(t, toyllm.Options{})
	ctx := t.Context()
	check := func(wantPaused bool, wantVersion string) {
		t.Helper()
		paused, err := c.IsPaused(ctx)
		if err != nil || paused != wantPaused {
			t.Fatalf("IsPaused = %v, %v; want %v", paused, err, wantPaused)
		}
		v, err := c.WeightInfo(ctx)
		if err != nil || v != wantVersion {
			t.Fatalf("WeightInfo = %q, %v; want %q", v, err, wantVersion)
		}
	}
	check(false, "default")
	for _, mode := range []string{"", PauseAbort, PauseWait, PauseKeep} {
		if err := c.Pause(ctx, mode); err != nil {
			t.Fatalf("Pause(%q): %v", mode, err)
		}
		check(true, "default")
		if err := c.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		check(false, "default")
	}
	if err := c.UpdateWeights(ctx, map[string]any{"skill": 9.5, "weight_version": "step-1"}); err != nil {
		t.Fatal(err)
	}
	check(false, "step-1")
	if err := c.StartWeightUpdate(ctx); err != nil {
		t.Fatal(err)
	}
	check(true, "step-1")
	if err := c.UpdateWeights(ctx, map[string]any{"skill": 12}); err != nil {
		t.Fatal(err)
	}
	if err := c.FinishWeightUpdate(ctx, "step-2"); err != nil {
		t.Fatal(err)
	}
	check(false, "step-2")
	if err := c.FinishWeightUpdate(ctx, ""); err != nil {
		t.Fatal(err)
	}
	check(false, "step-2")
}

// TestPauseAbortsCompletion pauses the server while a completion is in
// flight: the completion ends with finish_reason "abort" and the tokens
// generated so far, and a completion sent while paused runs after Resume.
func TestPauseAbortsCompletion(t *testing.T) {
	_, c := toyServer(t, toyllm.Options{TokenLatency: 50 * time.Microsecond})
	ctx := t.Context()
	prompt := toyllm.Tokenizer{}.Encode("Guess the number between 1 and 20")
	seed := int64(3)
	req := CompletionRequest{Prompt: prompt, MaxTokens: 20000, Temperature: 1, Seed: &seed, IgnoreEOS: true}
	type result struct {
		comp Completion
		err  error
	}
	done := make(chan result, 1)
	go func() {
		comp, err := c.Complete(ctx, req)
		done <- result{comp, err}
	}()
	metricsURL := c.BaseURL() + "/metrics"
	waitMetric(t, metricsURL, `vllm:num_requests_running{model_name="rollfleet-toy"} 1.0`)
	if err := c.Pause(ctx, PauseAbort); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.comp.FinishReason != "abort" || len(r.comp.TokenIDs) >= req.MaxTokens || len(r.comp.TokenIDs) != len(r.comp.Logprobs) {
		t.Errorf("aborted completion: finish %q, %d tokens, %d logprobs", r.comp.FinishReason, len(r.comp.TokenIDs), len(r.comp.Logprobs))
	}

	req.MaxTokens = 5
	go func() {
		comp, err := c.Complete(ctx, req)
		done <- result{comp, err}
	}()
	waitMetric(t, metricsURL, `vllm:num_requests_waiting{model_name="rollfleet-toy"} 1.0`)
	select {
	case r := <-done:
		t.Fatalf("completion finished while paused: %+v, %v", r.comp, r.err)
	default:
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.comp.FinishReason != "length" {
		t.Errorf("after Resume: %+v, %v", r.comp, r.err)
	}
}

// waitMetric polls /metrics until it has line, failing after a deadline.
func waitMetric(t *testing.T, url, line string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in /metrics:\n%s", line, b)
		}
		runtime.Gosched()
	}
}

func TestWeightUpdateErrors(t *testing.T) {
	_, c := toyServer(t, toyllm.Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"bad mode", func() error { return c.Pause(ctx, "later") }, `invalid pause mode "later"`},
		{"unknown key", func() error { return c.UpdateWeights(ctx, map[string]any{"skill": 3, "names": []string{"w"}}) }, "unknown keys names"},
		{"no skill", func() error { return c.UpdateWeights(ctx, nil) }, "skill is required"},
		{"skill out of range", func() error { return c.UpdateWeights(ctx, map[string]any{"skill": 99}) }, "skill must be in"},
		{"unencodable", func() error { return c.UpdateWeights(ctx, map[string]any{"skill": func() {}}) }, "encoding update_info"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.want)
		}
		if errors.Is(err, ErrNotSupported) || Retryable(ctx, err) {
			t.Errorf("%s: error %v is ErrNotSupported or retryable", tc.name, err)
		}
	}
}

// TestWeightEndpointsNotSupported calls a server without the endpoints, as
// vLLM is outside development mode: every call fails with ErrNotSupported.
func TestWeightEndpointsNotSupported(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	}))
	t.Cleanup(ts.Close)
	c, err := New(ts.URL, Options{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	calls := map[string]func() error{
		"Pause":              func() error { return c.Pause(ctx, PauseWait) },
		"Resume":             func() error { return c.Resume(ctx) },
		"IsPaused":           func() error { _, err := c.IsPaused(ctx); return err },
		"UpdateWeights":      func() error { return c.UpdateWeights(ctx, map[string]any{"skill": 3}) },
		"StartWeightUpdate":  func() error { return c.StartWeightUpdate(ctx) },
		"FinishWeightUpdate": func() error { return c.FinishWeightUpdate(ctx, "v") },
		"WeightInfo":         func() error { _, err := c.WeightInfo(ctx); return err },
	}
	for name, call := range calls {
		err := call()
		var ae *APIError
		if !errors.Is(err, ErrNotSupported) || !errors.As(err, &ae) || ae.Status != http.StatusNotFound ||
			!strings.Contains(err.Error(), "VLLM_SERVER_DEV_MODE=1") {
			t.Errorf("%s: error %v, want ErrNotSupported wrapping the 404", name, err)
		}
		if Retryable(ctx, err) {
			t.Errorf("%s: a 404 is retryable", name)
		}
	}
}

// TestWeightInfoBadResponse checks that answers without their field are
// ErrBadResponse.
func TestWeightInfoBadResponse(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(ts.Close)
	c, err := New(ts.URL, Options{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WeightInfo(t.Context()); !errors.Is(err, ErrBadResponse) {
		t.Errorf("WeightInfo: %v, want ErrBadResponse", err)
	}
	if _, err := c.IsPaused(t.Context()); !errors.Is(err, ErrBadResponse) {
		t.Errorf("IsPaused: %v, want ErrBadResponse", err)
	}
}
