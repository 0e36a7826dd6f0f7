package toyllm

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

func newTestServer(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := New(opts)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// testClient posts requests to a test server.
type testClient struct {
	t   testing.TB
	url string
}

func newClient(t testing.TB, url string) *testClient { return &testClient{t, url} }

// post sends body (a string as is, anything else as JSON) and returns the
// status and response body.
func (c *testClient) post(path string, body any) (int, []byte) {
	c.t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		raw = string(b)
	}
	resp, err := http.Post(c.url+path, "application/json", strings.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// decodeStrict decodes a response into a struct mirroring vLLM's, failing on
// any field the mirror does not know.
func decodeStrict(t testing.TB, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
}

// complete posts to /v1/completions and decodes the 200 response.
func (c *testClient) complete(body any) completionResponse {
	c.t.Helper()
	status, out := c.post("/v1/completions", body)
	if status != http.StatusOK {
		c.t.Fatalf("status %d: %s", status, out)
	}
	var r completionResponse
	decodeStrict(c.t, out, &r)
	if len(r.Choices) != 1 {
		c.t.Fatalf("%d choices", len(r.Choices))
	}
	return r
}

// The mirrors of vLLM's response bodies.
type (
	completionResponse struct {
		ID                string             `json:"id"`
		Object            string             `json:"object"`
		Created           int64              `json:"created"`
		Model             string             `json:"model"`
		Choices           []completionChoice `json:"choices"`
		ServiceTier       *string            `json:"service_tier"`
		SystemFingerprint *string            `json:"system_fingerprint"`
		Usage             usageInfo          `json:"usage"`
		KVTransferParams  json.RawMessage    `json:"kv_transfer_params"`
	}
	completionChoice struct {
		Index          int                 `json:"index"`
		Text           string              `json:"text"`
		Logprobs       *completionLogprobs `json:"logprobs"`
		FinishReason   string              `json:"finish_reason"`
		StopReason     any                 `json:"stop_reason"`
		TokenIDs       []int32             `json:"token_ids"`
		PromptLogprobs json.RawMessage     `json:"prompt_logprobs"`
		PromptTokenIDs []int32             `json:"prompt_token_ids"`
	}
	completionLogprobs struct {
		TextOffset    []int                `json:"text_offset"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		Tokens        []string             `json:"tokens"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}
	usageInfo struct {
		PromptTokens        int             `json:"prompt_tokens"`
		TotalTokens         int             `json:"total_tokens"`
		CompletionTokens    int             `json:"completion_tokens"`
		PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
	}
	chatResponse struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		Choices           []chatChoice    `json:"choices"`
		ServiceTier       *string         `json:"service_tier"`
		SystemFingerprint *string         `json:"system_fingerprint"`
		Usage             usageInfo       `json:"usage"`
		PromptLogprobs    json.RawMessage `json:"prompt_logprobs"`
		PromptTokenIDs    []int32         `json:"prompt_token_ids"`
		KVTransferParams  json.RawMessage `json:"kv_transfer_params"`
	}
	chatChoice struct {
		Index   int `json:"index"`
		Message struct {
			Role             string            `json:"role"`
			Content          string            `json:"content"`
			ReasoningContent *string           `json:"reasoning_content"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		Logprobs *struct {
			Content []chatLogprob `json:"content"`
		} `json:"logprobs"`
		FinishReason string  `json:"finish_reason"`
		StopReason   any     `json:"stop_reason"`
		TokenIDs     []int32 `json:"token_ids"`
	}
	chatLogprob struct {
		Token       string           `json:"token"`
		Logprob     float64          `json:"logprob"`
		Bytes       []int            `json:"bytes"`
		TopLogprobs []chatTopLogprob `json:"top_logprobs"`
	}
	chatTopLogprob struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
)

// requireKeys checks that a JSON object has exactly the given keys, so that
// null fields are present as vLLM sends them.
func requireKeys(t *testing.T, what string, obj json.RawMessage, keys ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks %q: %s", what, k, obj)
		}
		delete(m, k)
	}
	for k := range m {
		t.Errorf("%s has unexpected key %q", what, k)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// recorder collects the calls of Options.Record.
type recorder struct {
	mu    sync.Mutex
	calls []recorded
}

type recorded struct{ prompt, generated []int32 }

func (r *recorder) record(prompt, generated []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, recorded{prompt, generated})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func textLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
