package toyllm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/chat"
)

func TestChatCompletions(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	msgs := []chat.Message{{Role: "system", Content: "Play well."}, {Role: "user", Content: gtnInstructions(1, 20, 10, 3)}}
	status, body := c.post("/v1/chat/completions", map[string]any{
		"messages": msgs, "max_completion_tokens": 100, "temperature": 0,
		"logprobs": true, "top_logprobs": 3, "return_token_ids": true,
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var raw struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	requireKeys(t, "response", body, "id", "object", "created", "model", "choices", "service_tier",
		"system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params")
	requireKeys(t, "choice", raw.Choices[0], "index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids")
	var r chatResponse
	decodeStrict(t, body, &r)
	if !strings.HasPrefix(r.ID, "chatcmpl-") || r.Object != "chat.completion" || r.Model != DefaultModel {
		t.Errorf("header %q %q %q", r.ID, r.Object, r.Model)
	}
	ch := r.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content != greedyReply || ch.FinishReason != "stop" || ch.StopReason != float64(ImEndID) {
		t.Errorf("choice %+v", ch)
	}
	if want := (Tokenizer{}).Encode(chat.Render(msgs, true)); !slices.Equal(r.PromptTokenIDs, want) || r.Usage.PromptTokens != len(want) {
		t.Errorf("prompt_token_ids %v, want %v", r.PromptTokenIDs, want)
	}
	content := ch.Logprobs.Content
	if len(content) != len(ch.TokenIDs) || r.Usage.CompletionTokens != len(ch.TokenIDs) {
		t.Fatalf("%d logprobs for %d tokens", len(content), len(ch.TokenIDs))
	}
	for i, e := range content {
		id := ch.TokenIDs[i]
		if e.Token != tokenStrings[id] || !slices.Equal(e.Bytes, bytesOf(id)) || e.Logprob > 0 || len(e.TopLogprobs) != 3 {
			t.Errorf("entry %d for id %d: %+v", i, id, e)
		}
		// Greedy: the sampled token is the most likely one.
		if e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob ||
			!slices.IsSortedFunc(e.TopLogprobs, func(a, b chatTopLogprob) int { return -cmpFloat(a.Logprob, b.Logprob) }) {
			t.Errorf("entry %d: top_logprobs %+v", i, e.TopLogprobs)
		}
	}
}

func bytesOf(id int32) []int {
	var out []int
	for _, b := range appendTokenText(nil, id, false) {
		out = append(out, int(b))
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestChatPromptForms(t *testing.T) {
	var rec recorder
	_, url := newTestServer(t, Options{Record: rec.record})
	c := newClient(t, url)
	var tok Tokenizer
	tests := []struct {
		name string
		body string
		want string
	}{
		{
			name: "content parts",
			body: `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":2}`,
			want: "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "null content, no generation prompt",
			body: `{"messages":[{"role":"user","content":null}],"max_tokens":2,"add_generation_prompt":false}`,
			want: "<|im_start|>user\n<|im_end|>\n",
		},
		{
			name: "continue the final message",
			body: `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"I guess"}],"max_tokens":2,` +
				`"add_generation_prompt":false,"continue_final_message":true}`,
			want: "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nI guess",
		},
	}
	for _, tc := range tests {
		status, body := c.post("/v1/chat/completions", tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.name, status, body)
		}
		calls := rec.all()
		if got := tok.Decode(calls[len(calls)-1].prompt); got != tc.want {
			t.Errorf("%s: prompt %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestTokenize(t *testing.T) {
	_, url := newTestServer(t, Options{MaxModelLen: 1000})
	c := newClient(t, url)
	var tok Tokenizer
	msgs := []chat.Message{{Role: "user", Content: "hé"}}
	tests := []struct {
		name string
		body any
		want string
		strs bool
	}{
		{name: "text with special tokens", body: map[string]any{"prompt": "<|im_start|>x<|im_end|>", "add_special_tokens": true}, want: "<|im_start|>x<|im_end|>"},
		{name: "token strings", body: map[string]any{"prompt": "a\xc3\xa9", "return_token_strs": true}, want: "a\xc3\xa9", strs: true},
		{name: "messages", body: map[string]any{"messages": msgs}, want: chat.Render(msgs, true)},
		{name: "messages without generation prompt", body: map[string]any{"messages": msgs, "add_generation_prompt": false}, want: chat.Render(msgs, false)},
	}
	for _, tc := range tests {
		status, body := c.post("/tokenize", tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.name, status, body)
		}
		requireKeys(t, tc.name, body, "count", "max_model_len", "tokens", "token_strs")
		var r tokenizeResponse
		decodeStrict(t, body, &r)
		want := tok.Encode(tc.want)
		if !slices.Equal(r.Tokens, want) || r.Count != len(want) || r.MaxModelLen != 1000 {
			t.Errorf("%s: %+v, want tokens %v", tc.name, r, want)
		}
		if tc.strs != (r.TokenStrs != nil) {
			t.Errorf("%s: token_strs %v", tc.name, r.TokenStrs)
		}
		for i, s := range r.TokenStrs {
			if s != tokenStrings[r.Tokens[i]] {
				t.Errorf("%s: token_strs[%d] = %q", tc.name, i, s)
			}
		}
	}
}

func TestDetokenize(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	text := "<|im_start|>assistant\n\\boxed{7}é<|im_end|>"
	status, body := c.post("/detokenize", map[string]any{"tokens": Tokenizer{}.Encode(text)})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var r detokenizeResponse
	decodeStrict(t, body, &r)
	if r.Prompt != text {
		t.Errorf("prompt %q, want %q", r.Prompt, text)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	_, url := newTestServer(t, Options{Model: `my "toy"`, MaxModelLen: 4096})
	get := func(path string) (int, string, []byte) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	status, _, body := get("/v1/models")
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			modelCard
		} `json:"data"`
	}
	decodeStrict(t, body, &models)
	if status != http.StatusOK || models.Object != "list" || len(models.Data) != 1 ||
		models.Data[0].ID != `my "toy"` || models.Data[0].Object != "model" || models.Data[0].MaxModelLen != 4096 {
		t.Errorf("models: %d %s", status, body)
	}
	if status, _, body := get("/health"); status != http.StatusOK || len(body) != 0 {
		t.Errorf("health: %d %q", status, body)
	}
	status, ctype, body := get("/metrics")
	want := `vllm:num_requests_running{model_name="my \"toy\""} 0.0`
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") || !strings.Contains(string(body), want) {
		t.Errorf("metrics: %d %s, want a line %s", status, body, want)
	}
	resp, err := http.Post(url+"/health", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /health: %d", resp.StatusCode)
	}
}

func TestBadRequests(t *testing.T) {
	_, url := newTestServer(t, Options{MaxModelLen: 1000})
	c := newClient(t, url)
	const (
		cmpl = "/v1/completions"
		chc  = "/v1/chat/completions"
	)
	tests := []struct {
		path   string
		body   string
		status int
		msg    string
	}{
		{cmpl, `{`, 400, "invalid JSON body"},
		{cmpl, ``, 400, "invalid JSON body"},
		{cmpl, `[1,2]`, 400, "request body must be a JSON object"},
		{cmpl, `{"prompt":[1,2],"model":"gpt-4"}`, 404, "The model `gpt-4` does not exist."},
		{cmpl, `{"prompt":[1,300]}`, 400, "Token id 300 is out of vocabulary"},
		{cmpl, `{"prompt":[1, -1]}`, 400, "Token id -1 is out of vocabulary"},
		{cmpl, `{"prompt":[99999999999999999999999]}`, 400, "out of vocabulary"},
		{cmpl, `{"prompt":[1.5]}`, 400, "prompt token ids must be integers"},
		{cmpl, `{"prompt":[1e2]}`, 400, "prompt token ids must be integers"},
		{cmpl, `{"prompt":[[1,2]]}`, 400, "batched prompts are not supported"},
		{cmpl, `{"prompt":["a","b"]}`, 400, "batched prompts are not supported"},
		{cmpl, `{"prompt":[true]}`, 400, "prompt must be a string or a list of token ids"},
		{cmpl, `{"prompt":{}}`, 400, "prompt must be a string or a list of token ids"},
		{cmpl, `{"prompt":[]}`, 400, "prompt must not be empty"},
		{cmpl, `{"prompt":""}`, 400, "prompt must not be empty"},
		{cmpl, `{}`, 400, "prompt is required"},
		{cmpl, `{"prompt":"x","n":2}`, 400, "n must be 1"},
		{cmpl, `{"prompt":"x","max_tokens":-1}`, 400, "max_tokens must be at least 1, got -1."},
		{cmpl, `{"prompt":"x","max_tokens":0}`, 400, "max_tokens must be at least 1, got 0."},
		{cmpl, `{"prompt":"x","max_tokens":"ten"}`, 400, `invalid value for field "max_tokens"`},
		{cmpl, `{"prompt":"x","temperature":-0.5}`, 400, "temperature must be non-negative"},
		{cmpl, `{"prompt":"x","top_p":0}`, 400, "top_p must be in (0, 1]"},
		{cmpl, `{"prompt":"x","top_p":1.5}`, 400, "top_p must be in (0, 1]"},
		{cmpl, `{"prompt":"x","top_k":-2}`, 400, "top_k must be"},
		{cmpl, `{"prompt":"x","min_p":2}`, 400, "min_p must be in [0, 1]"},
		{cmpl, `{"prompt":"x","logprobs":21}`, 400, "Requested sample logprobs of 21, which is greater than max allowed: 20"},
		{cmpl, `{"prompt":"x","logprobs":-1}`, 400, "logprobs must be non-negative"},
		{cmpl, `{"prompt":"x","logprobs":true}`, 400, `invalid value for field "logprobs"`},
		{cmpl, `{"prompt":"x","stream":true}`, 400, "stream is not supported"},
		{cmpl, `{"prompt":"x","repetition_penalty":1.2}`, 400, "penalties are not supported"},
		{cmpl, `{"prompt":"x","min_tokens":3}`, 400, "min_tokens is not supported"},
		{cmpl, `{"prompt":"x","stop":[""]}`, 400, "stop cannot contain an empty string."},
		{cmpl, `{"prompt":"x","stop":5}`, 400, "stop must be a string or a list of strings"},
		{cmpl, `{"prompt":"x","stop_token_ids":[1e40]}`, 400, `invalid value for field "stop_token_ids`},
		{chc, `{"messages":[]}`, 400, "messages must not be empty"},
		{chc, `{"messages":[{"content":"x"}]}`, 400, "role is required"},
		{chc, `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, `content part of type "image_url" is not supported`},
		{chc, `{"messages":[{"role":"user","content":5}]}`, 400, "message content must be a string or a list of text parts"},
		{chc, `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, 400,
			"Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
		{chc, `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "when using `top_logprobs`, `logprobs` must be set to true."},
		{chc, `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30}`, 400, "greater than max allowed: 20"},
		{chc, `{"messages":[{"role":"user","content":"x"}],"max_tokens":995}`, 400, "maximum context length is 1000 tokens"},
		{chc, `{"messages":[{"role":"user","content":"x"}],"model":"other"}`, 404, "does not exist"},
		{"/tokenize", `{}`, 400, "prompt or messages is required"},
		{"/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"x"}]}`, 400, "either prompt or messages"},
		{"/tokenize", `{"prompt":"a","model":"other"}`, 404, "does not exist"},
		{"/detokenize", `{"tokens":[1,999]}`, 400, "Token id 999 is out of vocabulary"},
		{"/detokenize", `{"tokens":"abc"}`, 400, `invalid value for field "tokens"`},
	}
	for _, tc := range tests {
		t.Run(tc.path+" "+tc.body, func(t *testing.T) {
			status, body := c.post(tc.path, tc.body)
			checkError(t, status, body, tc.status, tc.msg)
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	s, url := newTestServer(t, Options{MaxModelLen: 16})
	body := `{"prompt":"` + strings.Repeat("a", int(s.maxBody)) + `"}`
	status, out := newClient(t, url).post("/v1/completions", body)
	checkError(t, status, out, http.StatusRequestEntityTooLarge, "request body exceeds")
}

// waitFor polls cond until it holds; the test's deadline bounds the wait.
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// metricsValue reads one gauge from /metrics.
func metricsValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+"{"); ok {
			_, val, _ := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

func TestMaxConcurrent(t *testing.T) {
	const limit, total = 2, 7
	var inside, peak atomic.Int32
	entered := make(chan struct{}, total)
	release := make(chan struct{})
	s, url := newTestServer(t, Options{MaxConcurrent: limit, Record: func(_, _ []int32) {
		n := inside.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		entered <- struct{}{}
		<-release
		inside.Add(-1)
	}})
	c := newClient(t, url)
	var wg sync.WaitGroup
	statuses := make(chan int, total)
	for range total {
		wg.Go(func() {
			status, _ := c.post("/v1/completions", `{"prompt":"hi","max_tokens":4}`)
			statuses <- status
		})
	}
	for range limit {
		<-entered
	}
	// All slots are taken and everyone else is queued: nothing can be in
	// flight between the two.
	waitFor(func() bool { return s.waiting.Load() == total-limit })
	if got := inside.Load(); got != limit {
		t.Errorf("%d requests generating, want %d", got, limit)
	}
	if r, w := metricsValue(t, url, "vllm:num_requests_running"), metricsValue(t, url, "vllm:num_requests_waiting"); r != limit || w != total-limit {
		t.Errorf("metrics: %v running, %v waiting", r, w)
	}
	// Every slot is busy: the stand-in's KV cache is full.
	if u, m := metricsValue(t, url, "vllm:kv_cache_usage_perc"), metricsValue(t, url, "toyllm:max_concurrent"); u != 1 || m != limit {
		t.Errorf("metrics: kv cache usage %v, max concurrent %v", u, m)
	}
	if v := metricsValue(t, url, "toyllm:running_seconds_total"); v != 0 {
		t.Errorf("running seconds %v before any generation finished", v)
	}
	close(release)
	wg.Wait()
	close(statuses)
	for status := range statuses {
		if status != http.StatusOK {
			t.Errorf("status %d", status)
		}
	}
	if p := peak.Load(); p != limit {
		t.Errorf("peak concurrency %d, want %d", p, limit)
	}
	if r := metricsValue(t, url, "vllm:num_requests_running"); r != 0 {
		t.Errorf("%v still running", r)
	}
	if u, v := metricsValue(t, url, "vllm:kv_cache_usage_perc"), metricsValue(t, url, "toyllm:running_seconds_total"); u != 0 || v <= 0 {
		t.Errorf("metrics after the generations: kv cache usage %v, running seconds %v", u, v)
	}
}

func TestRecord(t *testing.T) {
	var rec recorder
	_, url := newTestServer(t, Options{Record: rec.record})
	c := newClient(t, url)
	prompt := gamePrompt()
	r := c.complete(map[string]any{"prompt": prompt, "max_tokens": 64, "seed": 3, "return_token_ids": true})
	if status, _ := c.post("/v1/completions", `{"prompt":[1],"n":3}`); status != http.StatusBadRequest {
		t.Fatalf("status %d", status)
	}
	calls := rec.all()
	if len(calls) != 1 {
		t.Fatalf("Record called %d times, want once", len(calls))
	}
	if !slices.Equal(calls[0].prompt, prompt) || !slices.Equal(calls[0].generated, r.Choices[0].TokenIDs) {
		t.Errorf("Record got %v / %v, response has %v", calls[0].prompt, calls[0].generated, r.Choices[0].TokenIDs)
	}
}

// TestLatencyHonoursContext checks that a request waiting out its latency
// ends when its client goes away, freeing its slot.
func TestLatencyHonoursContext(t *testing.T) {
	s, url := newTestServer(t, Options{TokenLatency: time.Hour, MaxConcurrent: 1})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		if err != nil {
			errc <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(func() bool { return s.running.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("request error %v, want context.Canceled", err)
	}
	waitFor(func() bool { return s.running.Load() == 0 })
}

func TestTokenLatency(t *testing.T) {
	_, url := newTestServer(t, Options{TokenLatency: time.Microsecond})
	r := newClient(t, url).complete(map[string]any{"prompt": "x", "max_tokens": 3})
	if n := r.Usage.CompletionTokens; n != 3 {
		t.Errorf("%d tokens", n)
	}
}

func TestStartStop(t *testing.T) {
	s := New(Options{Logger: discardLogger()})
	url, stop, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health %d", resp.StatusCode)
	}
	stop()
	stop()
	if resp, err := http.Get(url + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("server still answering after stop")
	}
	if _, _, err := s.Start(t.Context(), "bad address"); err == nil {
		t.Errorf("Start on a bad address succeeded")
	}
}

func TestListenAndServe(t *testing.T) {
	var logs bytes.Buffer
	s := New(Options{Logger: textLogger(&logs)})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe(ctx, "127.0.0.1:0") }()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("ListenAndServe: %v", err)
	}
	if !strings.Contains(logs.String(), "toyllm: serving") {
		t.Errorf("logs %q lack the serving line", logs.String())
	}
	if err := s.ListenAndServe(t.Context(), "bad address"); err == nil {
		t.Errorf("ListenAndServe on a bad address succeeded")
	}
}
