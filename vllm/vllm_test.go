package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// completionJSON is a vLLM /v1/completions response as sent for the
// client's request (logprobs 0, tokens as token ids), with token_ids as a server asked for return_token_ids sends them. The
// last token is <|im_end|>, whose logprob sits at vLLM's floor of -9999.0.
const completionJSON = `{"id":"cmpl-8c1e","object":"text_completion","created":1736000000,"model":"Qwen/Qwen3-0.6B",
"choices":[{"index":0,"text":"<think>\n\n</think>\n\n\\boxed{50}<|im_end|>",
 "logprobs":{"text_offset":[0,7,9,17,19,26,27],"token_logprobs":[-0.00012302,-0.5,-1.7881393e-05,-0.25,-3.0,-0.001953125,-9999.0],
  "tokens":["token_id:151667","token_id:271","token_id:151668","token_id:271","token_id:59","token_id:90","token_id:151645"],
  "top_logprobs":[{"token_id:151667":-0.00012302},{"token_id:271":-0.5},{"token_id:151668":-1.7881393e-05},{"token_id:271":-0.25},{"token_id:59":-3.0},{"token_id:90":-0.001953125},{"token_id:151645":-9999.0}]},
 "finish_reason":"stop","stop_reason":null,"token_ids":[151667,271,151668,271,59,90,151645],"prompt_token_ids":[151644,872,198],"prompt_logprobs":null}],
"usage":{"prompt_tokens":3,"total_tokens":10,"completion_tokens":7,"prompt_tokens_details":null},"system_fingerprint":null,"kv_transfer_params":null}`

var (
	wantIDs      = []int32{151667, 271, 151668, 271, 59, 90, 151645}
	wantLogprobs = []float32{-0.00012302, -0.5, -1.7881393e-05, -0.25, -3.0, -0.001953125, -9999.0}
)

// server starts an httptest server with handler and returns a client for it
// with the model name "m".
func server(t testing.TB, handler http.HandlerFunc) (*Client, *httptest.Server) {
	t.Helper()
	return serverWith(t, handler, Options{Model: "m"})
}

func serverWith(t testing.TB, handler http.HandlerFunc, opts Options) (*Client, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

// reply answers every request with status and body.
func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// recorder answers with status and body and keeps the last request's
// method, path and decoded JSON body.
type recorder struct {
	mu     sync.Mutex
	method string
	path   string
	ctype  string
	body   map[string]json.RawMessage
}

func (rec *recorder) handler(t testing.TB, status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.method, rec.path, rec.ctype = r.Method, r.URL.Path, r.Header.Get("Content-Type")
		rec.body = nil
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&rec.body); err != nil {
				t.Errorf("request body is not a JSON object: %v", err)
			}
		}
		rec.mu.Unlock()
		reply(status, body)(w, r)
	}
}

// request returns the recorded request's method, path and Content-Type.
func (rec *recorder) request() (method, path, ctype string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.method, rec.path, rec.ctype
}

// fields returns the recorded request's fields as compact JSON text.
func (rec *recorder) fields() map[string]string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := make(map[string]string, len(rec.body))
	for k, v := range rec.body {
		out[k] = string(v)
	}
	return out
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"http://localhost:8000", "http://localhost:8000"},
		{"http://localhost:8000/", "http://localhost:8000"},
		{"https://10.0.0.5:8000//", "https://10.0.0.5:8000"},
		{"http://gateway/vllm/node3/", "http://gateway/vllm/node3"},
	} {
		c, err := New(tc.in, Options{})
		if err != nil {
			t.Errorf("New(%q): %v", tc.in, err)
			continue
		}
		if c.BaseURL() != tc.want {
			t.Errorf("New(%q).BaseURL() = %q, want %q", tc.in, c.BaseURL(), tc.want)
		}
	}
	for _, bad := range []string{"", "localhost:8000", "ftp://host", "http://", "http:///v1", "http://h:8000?x=1", "http://h#f", "http://h\x7f", "mailto:x@y"} {
		if _, err := New(bad, Options{}); err == nil {
			t.Errorf("New(%q) succeeded, want an error", bad)
		}
	}
	if _, err := New("http://h", Options{MaxResponseBytes: -1}); err == nil {
		t.Error("New with negative MaxResponseBytes succeeded")
	}
}

func TestCompleteHappyPath(t *testing.T) {
	var rec recorder
	c, _ := server(t, rec.handler(t, 200, completionJSON))
	got, err := c.Complete(context.Background(), CompletionRequest{Prompt: []int32{151644, 872, 198}, MaxTokens: 64, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := Completion{
		TokenIDs:     wantIDs,
		Logprobs:     wantLogprobs,
		Text:         "<think>\n\n</think>\n\n\\boxed{50}<|im_end|>",
		FinishReason: "stop",
		PromptTokens: 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Complete =\n%+v\nwant\n%+v", got, want)
	}
	if m, p, ct := rec.request(); m != http.MethodPost || p != "/v1/completions" || ct != "application/json" {
		t.Errorf("request %s %s (Content-Type %q), want POST /v1/completions (application/json)", m, p, ct)
	}
}

func TestCompleteRequestBody(t *testing.T) {
	seed := int64(-7)
	for _, tc := range []struct {
		name string
		req  CompletionRequest
		want map[string]string // every field the body must have, as compact JSON
	}{
		{
			name: "minimal",
			req:  CompletionRequest{Prompt: []int32{1, 0, 151645}, MaxTokens: 16},
			want: map[string]string{
				"model": `"m"`, "prompt": `[1,0,151645]`, "max_tokens": `16`, "temperature": `0`,
				"n": `1`, "logprobs": `0`, "return_tokens_as_token_ids": `true`,
				"skip_special_tokens": `false`,
			},
		},
		{
			name: "every option",
			req: CompletionRequest{
				Prompt: []int32{2147483647}, MaxTokens: 3, Temperature: 0.7, TopP: 0.95, TopK: -1,
				Seed: &seed, Stop: []string{"</answer>", "\"q\"\n\x01\xff"}, StopTokenIDs: []int32{151643, 151645},
			},
			want: map[string]string{
				"model": `"m"`, "prompt": `[2147483647]`, "max_tokens": `3`, "temperature": `0.7`,
				"top_p": `0.95`, "top_k": `-1`, "seed": `-7`,
				"stop": `["</answer>","\"q\"\n\u0001\ufffd"]`, "stop_token_ids": `[151643,151645]`,
				"n": `1`, "logprobs": `0`, "return_tokens_as_token_ids": `true`,
				"skip_special_tokens": `false`,
			},
		},
		{
			name: "sampling extras",
			req: CompletionRequest{
				Prompt: []int32{5}, MaxTokens: 4, Temperature: 1, MinP: 0.05, PresencePenalty: -0.5,
				FrequencyPenalty: 1.5, RepetitionPenalty: 1.1, MinTokens: 2, IgnoreEOS: true,
				SkipSpecialTokens: true, IncludeStopStrInOutput: true,
			},
			want: map[string]string{
				"model": `"m"`, "prompt": `[5]`, "max_tokens": `4`, "temperature": `1`, "min_p": `0.05`,
				"presence_penalty": `-0.5`, "frequency_penalty": `1.5`, "repetition_penalty": `1.1`,
				"min_tokens": `2`, "ignore_eos": `true`, "include_stop_str_in_output": `true`,
				"n": `1`, "logprobs": `0`, "return_tokens_as_token_ids": `true`,
				"skip_special_tokens": `true`,
			},
		},
		{
			name: "tiny temperature",
			req:  CompletionRequest{Prompt: []int32{5}, MaxTokens: 1, Temperature: 1e-7, TopK: 20},
			want: map[string]string{
				"model": `"m"`, "prompt": `[5]`, "max_tokens": `1`, "temperature": `1e-07`, "top_k": `20`,
				"n": `1`, "logprobs": `0`, "return_tokens_as_token_ids": `true`,
				"skip_special_tokens": `false`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			c, _ := server(t, rec.handler(t, 200, completionJSON))
			if _, err := c.Complete(context.Background(), tc.req); err != nil {
				t.Fatal(err)
			}
			if got := rec.fields(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("request fields\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestCompleteInvalidRequest(t *testing.T) {
	var calls atomic.Int32
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	for _, req := range []CompletionRequest{
		{MaxTokens: 1},
		{Prompt: []int32{1}},
		{Prompt: []int32{1}, MaxTokens: -1},
		{Prompt: []int32{1}, MaxTokens: 1, Temperature: math.NaN()},
		{Prompt: []int32{1}, MaxTokens: 1, Temperature: -0.5},
		{Prompt: []int32{1}, MaxTokens: 1, TopP: 1.5},
		{Prompt: []int32{1}, MaxTokens: 1, TopP: math.NaN()},
		{Prompt: []int32{1}, MaxTokens: 1, TopK: -2},
		{Prompt: []int32{1}, MaxTokens: 1, MinP: 1.5},
		{Prompt: []int32{1}, MaxTokens: 1, MinP: math.NaN()},
		{Prompt: []int32{1}, MaxTokens: 1, PresencePenalty: math.Inf(1)},
		{Prompt: []int32{1}, MaxTokens: 1, FrequencyPenalty: math.NaN()},
		{Prompt: []int32{1}, MaxTokens: 1, RepetitionPenalty: -1},
		{Prompt: []int32{1}, MaxTokens: 1, MinTokens: -1},
	} {
		_, err := c.Complete(context.Background(), req)
		if err == nil || Retryable(context.Background(), err) {
			t.Errorf("Complete(%+v) = %v, want a non-retryable error", req, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("invalid requests reached the server %d times", n)
	}
}

// TestCompleteTokenIDFallback covers servers that do not send token_ids:
// the ids come from the "token_id:<id>" logprob tokens. A server that sends
// token_ids has them read, whatever its logprob tokens look like.
func TestCompleteTokenIDFallback(t *testing.T) {
	for name, body := range map[string]string{
		"absent":                               strings.Replace(completionJSON, `"token_ids":[151667,271,151668,271,59,90,151645],`, "", 1),
		"null":                                 strings.Replace(completionJSON, `"token_ids":[151667,271,151668,271,59,90,151645]`, `"token_ids":null`, 1),
		"token_ids beside plain token strings": strings.Replace(completionJSON, `"token_id:271","token_id:151668"`, `"\n\n","</think>"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := server(t, reply(200, body))
			got, err := c.Complete(context.Background(), CompletionRequest{Prompt: []int32{1}, MaxTokens: 7})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.TokenIDs, wantIDs) || !reflect.DeepEqual(got.Logprobs, wantLogprobs) {
				t.Errorf("got ids %v logprobs %v, want %v %v", got.TokenIDs, got.Logprobs, wantIDs, wantLogprobs)
			}
		})
	}
}

func TestCompleteStopReason(t *testing.T) {
	for _, tc := range []struct {
		json, finish, want string
	}{
		{`"finish_reason":"stop","stop_reason":null`, "stop", ""},
		{`"finish_reason":"stop","stop_reason":151645`, "stop", "151645"},
		{`"finish_reason":"stop","stop_reason":"</answer>"`, "stop", "</answer>"},
		{`"finish_reason":"length","stop_reason":null`, "length", ""},
		{`"finish_reason":"abort"`, "abort", ""},
	} {
		body := strings.Replace(completionJSON, `"finish_reason":"stop","stop_reason":null`, tc.json, 1)
		got, err := decodeCompletion([]byte(body))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if got.FinishReason != tc.finish || got.StopReason != tc.want {
			t.Errorf("%s: finish %q stop %q, want %q %q", tc.json, got.FinishReason, got.StopReason, tc.finish, tc.want)
		}
	}
}

// TestLogprobsExact checks that every float32 survives the trip through
// JSON the way vLLM writes it (the float32 widened to float64, shortest
// repr) bit for bit.
func TestLogprobsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	want := []float32{-9999, 0, float32(math.Copysign(0, -1)), -math.SmallestNonzeroFloat32, -1e-38, -math.MaxFloat32, -1.1920929e-07, -0.1}
	for range 2000 {
		want = append(want, -math.Float32frombits(rng.Uint32N(0x7f800000)))
	}
	ids := make([]string, len(want))
	lps := make([]string, len(want))
	for i, f := range want {
		ids[i] = strconv.Itoa(i)
		lps[i] = strconv.FormatFloat(float64(f), 'g', -1, 64)
	}
	body := fmt.Sprintf(`{"choices":[{"text":"","logprobs":{"token_logprobs":[%s]},"finish_reason":"length","token_ids":[%s]}]}`,
		strings.Join(lps, ","), strings.Join(ids, ","))
	got, err := decodeCompletion([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got.Logprobs[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logprob %d: got %v (%#x), want %v (%#x) from %s", i, got.Logprobs[i], math.Float32bits(got.Logprobs[i]), want[i], math.Float32bits(want[i]), lps[i])
		}
	}
}

func TestTokenize(t *testing.T) {
	const answer = `{"count":3,"max_model_len":40960,"tokens":[151644,872,198],"token_strs":null}`
	for _, tc := range []struct {
		name string
		req  TokenizeRequest
		want map[string]string
	}{
		{
			name: "text",
			req:  TokenizeRequest{Prompt: "<|im_start|>user\nhi"},
			want: map[string]string{"model": `"m"`, "prompt": `"\u003c|im_start|\u003euser\nhi"`, "add_special_tokens": `false`},
		},
		{
			name: "text with special tokens",
			req:  TokenizeRequest{Prompt: "hi", AddSpecialTokens: true},
			want: map[string]string{"model": `"m"`, "prompt": `"hi"`, "add_special_tokens": `true`},
		},
		{
			name: "chat",
			req: TokenizeRequest{
				Prompt:              "ignored",
				Messages:            []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Guess \"a\" number"}},
				AddGenerationPrompt: true,
			},
			want: map[string]string{
				"model":                 `"m"`,
				"messages":              `[{"role":"system","content":"Be brief."},{"role":"user","content":"Guess \"a\" number"}]`,
				"add_generation_prompt": `true`, "add_special_tokens": `false`,
			},
		},
		{
			name: "chat with template settings",
			req: TokenizeRequest{
				Messages:             []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "I guess"}},
				ContinueFinalMessage: true,
				ChatTemplateKwargs:   json.RawMessage(`{"enable_thinking":false}`),
			},
			want: map[string]string{
				"model":                 `"m"`,
				"messages":              `[{"role":"user","content":"Hi"},{"role":"assistant","content":"I guess"}]`,
				"add_generation_prompt": `false`, "continue_final_message": `true`,
				"chat_template_kwargs": `{"enable_thinking":false}`, "add_special_tokens": `false`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			c, _ := server(t, rec.handler(t, 200, answer))
			got, err := c.Tokenize(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if want := []int32{151644, 872, 198}; !reflect.DeepEqual(got, want) {
				t.Errorf("Tokenize = %v, want %v", got, want)
			}
			if m, p, _ := rec.request(); m != http.MethodPost || p != "/tokenize" {
				t.Errorf("request %s %s, want POST /tokenize", m, p)
			}
			if diff := compareFields(rec.fields(), tc.want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// compareFields compares request fields as JSON values (so that equivalent
// escapes compare equal).
func compareFields(got, want map[string]string) string {
	norm := func(m map[string]string) map[string]any {
		out := make(map[string]any, len(m))
		for k, v := range m {
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				x = "invalid JSON: " + v
			}
			out[k] = x
		}
		return out
	}
	if g, w := norm(got), norm(want); !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("request fields\n got %v\nwant %v", got, want)
	}
	return ""
}

func TestTokenizeBadResponse(t *testing.T) {
	for _, body := range []string{
		`{"count":1,"max_model_len":10}`,
		`{"count":2,"tokens":[1]}`,
		`{"tokens":[-1]}`,
		`{"tokens":[1.5]}`,
		`{"tokens":[2147483648]}`,
		`{"tokens":["token_id:1"]}`,
		`{"tokens":[1,null]}`,
	} {
		c, _ := server(t, reply(200, body))
		_, err := c.Tokenize(context.Background(), TokenizeRequest{Prompt: "x"})
		if !errors.Is(err, ErrBadResponse) || !Retryable(context.Background(), err) {
			t.Errorf("Tokenize with answer %s: %v, want ErrBadResponse", body, err)
		}
	}
}

func TestDetokenize(t *testing.T) {
	var rec recorder
	c, _ := server(t, rec.handler(t, 200, `{"prompt":"Hi<|im_end|>"}`))
	got, err := c.Detokenize(context.Background(), []int32{13048, 151645})
	if err != nil {
		t.Fatal(err)
	}
	if got != "Hi<|im_end|>" {
		t.Errorf("Detokenize = %q", got)
	}
	if m, p, _ := rec.request(); m != http.MethodPost || p != "/detokenize" {
		t.Errorf("request %s %s, want POST /detokenize", m, p)
	}
	if diff := compareFields(rec.fields(), map[string]string{"model": `"m"`, "tokens": `[13048,151645]`}); diff != "" {
		t.Error(diff)
	}

	c, _ = server(t, reply(200, `{"text":"Hi"}`))
	if _, err := c.Detokenize(context.Background(), []int32{1}); !errors.Is(err, ErrBadResponse) {
		t.Errorf("Detokenize without prompt: %v, want ErrBadResponse", err)
	}
}

func TestHealth(t *testing.T) {
	for _, tc := range []struct {
		status int
		ok     bool
	}{
		{200, true}, {204, false}, {404, false}, {500, false}, {503, false},
	} {
		var path atomic.Value
		c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
			path.Store(r.Method + " " + r.URL.Path)
			w.WriteHeader(tc.status)
		})
		err := c.Health(context.Background())
		if tc.ok && err != nil {
			t.Errorf("status %d: %v, want healthy", tc.status, err)
		}
		if !tc.ok && (!errors.Is(err, ErrUnavailable) || !Retryable(context.Background(), err)) {
			t.Errorf("status %d: %v, want ErrUnavailable", tc.status, err)
		}
		if p := path.Load(); p != "GET /health" {
			t.Errorf("request %v, want GET /health", p)
		}
	}
}

func TestModels(t *testing.T) {
	var rec recorder
	c, _ := server(t, rec.handler(t, 200, `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","created":1,"owned_by":"vllm","root":"Qwen/Qwen3-0.6B","parent":null,"max_model_len":40960,"permission":[]},{"id":"lora-a","max_model_len":40960}]}`))
	got, err := c.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Model{{ID: "Qwen/Qwen3-0.6B", MaxModelLen: 40960}, {ID: "lora-a", MaxModelLen: 40960}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Models = %v, want %v", got, want)
	}
	if m, p, _ := rec.request(); m != http.MethodGet || p != "/v1/models" {
		t.Errorf("request %s %s, want GET /v1/models", m, p)
	}
	for _, body := range []string{`{"object":"list"}`, `{"data":null}`, `{"data":[{"max_model_len":1}]}`, `[]`} {
		c, _ := server(t, reply(200, body))
		if _, err := c.Models(context.Background()); !errors.Is(err, ErrBadResponse) {
			t.Errorf("Models with answer %s: %v, want ErrBadResponse", body, err)
		}
	}
}

// TestLazyModel checks that concurrent first calls share one /v1/models
// fetch and all send the listed model.
func TestLazyModel(t *testing.T) {
	var fetches atomic.Int32
	first := make(chan struct{})
	release := make(chan struct{})
	var rec recorder
	completions := rec.handler(t, 200, completionJSON)
	c, _ := serverWith(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			if fetches.Add(1) == 1 {
				close(first)
				<-release // hold the fetch so the other callers pile up behind it
			}
			io.WriteString(w, `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","max_model_len":40960}]}`)
		default:
			completions(w, r)
		}
	}, Options{})

	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := c.Complete(context.Background(), CompletionRequest{Prompt: []int32{1}, MaxTokens: 7})
			errs <- err
		})
	}
	<-first
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if f := fetches.Load(); f != 1 {
		t.Errorf("/v1/models fetched %d times, want 1", f)
	}
	if m := rec.fields()["model"]; m != `"Qwen/Qwen3-0.6B"` {
		t.Errorf("model sent = %s", m)
	}
}

func TestLazyModelErrors(t *testing.T) {
	t.Run("failure is not cached", func(t *testing.T) {
		var fetches atomic.Int32
		c, _ := serverWith(t, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/v1/models" && fetches.Add(1) == 1:
				w.WriteHeader(http.StatusServiceUnavailable)
			case r.URL.Path == "/v1/models":
				io.WriteString(w, `{"data":[{"id":"m2"}]}`)
			default:
				io.WriteString(w, completionJSON)
			}
		}, Options{})
		req := CompletionRequest{Prompt: []int32{1}, MaxTokens: 7}
		if _, err := c.Complete(context.Background(), req); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("first Complete: %v, want ErrUnavailable", err)
		}
		if _, err := c.Complete(context.Background(), req); err != nil {
			t.Fatalf("second Complete: %v", err)
		}
		if f := fetches.Load(); f != 2 {
			t.Errorf("/v1/models fetched %d times, want 2", f)
		}
	})
	t.Run("no models", func(t *testing.T) {
		c, _ := serverWith(t, reply(200, `{"object":"list","data":[]}`), Options{})
		_, err := c.Tokenize(context.Background(), TokenizeRequest{Prompt: "x"})
		if !errors.Is(err, ErrBadResponse) {
			t.Errorf("Tokenize: %v, want ErrBadResponse", err)
		}
	})
	t.Run("waiting for another fetch honours ctx", func(t *testing.T) {
		started := make(chan struct{})
		release := make(chan struct{})
		c, _ := serverWith(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}, Options{})
		t.Cleanup(func() { close(release) })
		holder, cancel := context.WithCancel(context.Background())
		held := make(chan error, 1)
		go func() { // holds the fetch until cancelled
			_, err := c.Detokenize(holder, []int32{1})
			held <- err
		}()
		<-started
		ctx, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel2()
		_, err := c.Detokenize(ctx, []int32{1})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Detokenize: %v, want DeadlineExceeded", err)
		}
		cancel()
		if err := <-held; !errors.Is(err, context.Canceled) {
			t.Errorf("holding Detokenize: %v, want Canceled", err)
		}
	})
}
