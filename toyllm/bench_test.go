package toyllm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchBody is a request as a rollout worker sends it, mid-game.
func benchBody(b *testing.B) []byte {
	body, err := json.Marshal(map[string]any{
		"model": DefaultModel, "prompt": gamePrompt(), "max_tokens": 256, "temperature": 1.0, "seed": 42,
		"logprobs": 0, "return_tokens_as_token_ids": true, "return_token_ids": true, "skip_special_tokens": false,
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// nullWriter is a ResponseWriter that keeps nothing, so that the benchmark
// measures the handler alone.
type nullWriter struct {
	h      http.Header
	status int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nullWriter) WriteHeader(status int)      { w.status = status }

// BenchmarkCompletion measures one /v1/completions turn in the handler,
// without the network.
func BenchmarkCompletion(b *testing.B) {
	s := New(Options{Logger: discardLogger()})
	body := benchBody(b)
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	w := &nullWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req.Body = readCloser{bytes.NewReader(body)}
		s.Handler().ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkCompletionHTTP measures turns over loopback HTTP from parallel
// clients, the way rollout workers call it; client and server share the CPUs.
func BenchmarkCompletionHTTP(b *testing.B) {
	_, url := newTestServer(b, Options{})
	body := benchBody(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			// Decoding the body is the client's cost, not the server's.
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d: %v", resp.StatusCode, err)
				return
			}
		}
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
