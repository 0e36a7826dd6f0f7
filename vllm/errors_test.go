package vllm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

var req1 = CompletionRequest{Prompt: []int32{151644, 872}, MaxTokens: 8}

func TestAPIErrorFormats(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		body       string
		want       APIError
		ctxLen     bool
		unavail    bool
		retryable  bool
		errContain string
	}{
		{
			name:   "older format, int code, context length",
			status: 400,
			body:   `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4100 tokens (4000 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
			want: APIError{Status: 400, Type: "BadRequestError", Code: "400",
				Message: "This model's maximum context length is 4096 tokens. However, you requested 4100 tokens (4000 in the messages, 100 in the completion). Please reduce the length of the messages or completion."},
			ctxLen:     true,
			errContain: "HTTP 400 BadRequestError: This model's",
		},
		{
			name:   "newer format, int code, engine wording",
			status: 400,
			body:   `{"error":{"message":"The decoder prompt (length 5951) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 4096.","type":"BadRequestError","param":null,"code":400}}`,
			want: APIError{Status: 400, Type: "BadRequestError", Code: "400",
				Message: "The decoder prompt (length 5951) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 4096."},
			ctxLen: true,
		},
		{
			name:   "newer format, string code, upper case",
			status: 400,
			body:   `{"error":{"message":"MAXIMUM CONTEXT LENGTH exceeded","type":"invalid_request_error","code":"context_length_exceeded"}}`,
			want:   APIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Message: "MAXIMUM CONTEXT LENGTH exceeded"},
			ctxLen: true, errContain: "(code context_length_exceeded)",
		},
		{
			name:   "multimodal wording",
			status: 400,
			body:   `{"error":{"object":"error","message":"The prompt (total length 6287) is too long to fit into the model (context length 4096).","type":"BadRequestError","param":null,"code":400}}`,
			want:   APIError{Status: 400, Type: "BadRequestError", Code: "400", Message: "The prompt (total length 6287) is too long to fit into the model (context length 4096)."},
			ctxLen: true,
		},
		{
			name:   "other 400",
			status: 400,
			body:   `{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","param":null,"code":400}`,
			want:   APIError{Status: 400, Type: "BadRequestError", Code: "400", Message: "max_tokens must be at least 1, got 0."},
		},
		{
			name:   "context wording on a 404 is not a context-length error",
			status: 404,
			body:   `{"error":{"message":"The model maximum context length does not exist.","type":"NotFoundError","code":404}}`,
			want:   APIError{Status: 404, Type: "NotFoundError", Code: "404", Message: "The model maximum context length does not exist."},
		},
		{
			name:    "500 older format",
			status:  500,
			body:    `{"object":"error","message":"EngineCore encountered an issue.","type":"InternalServerError","param":null,"code":500}`,
			want:    APIError{Status: 500, Type: "InternalServerError", Code: "500", Message: "EngineCore encountered an issue."},
			unavail: true, retryable: true,
		},
		{
			name:    "503 plain text",
			status:  503,
			body:    "upstream connect error\n",
			want:    APIError{Status: 503, Message: "upstream connect error"},
			unavail: true, retryable: true,
		},
		{
			name:    "429 newer format",
			status:  429,
			body:    `{"error":{"message":"Too many requests","type":"RateLimitError","code":"429"}}`,
			want:    APIError{Status: 429, Type: "RateLimitError", Code: "429", Message: "Too many requests"},
			unavail: true, retryable: true,
		},
		{
			name:    "502 html",
			status:  502,
			body:    "<html><body>Bad Gateway</body></html>",
			want:    APIError{Status: 502, Message: "<html><body>Bad Gateway</body></html>"},
			unavail: true, retryable: true,
		},
		{
			name:   "error as a string keeps the raw body",
			status: 400,
			body:   `{"error":"maximum context length"}`,
			want:   APIError{Status: 400, Message: `{"error":"maximum context length"}`},
			ctxLen: true,
		},
		{
			name:   "FastAPI detail",
			status: 404,
			body:   `{"detail":"Not Found"}`,
			want:   APIError{Status: 404, Message: `{"detail":"Not Found"}`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := server(t, reply(tc.status, tc.body))
			ctx := context.Background()
			_, err := c.Complete(ctx, req1)
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("Complete: %v, want an *APIError", err)
			}
			if *apiErr != tc.want {
				t.Errorf("APIError = %+v, want %+v", *apiErr, tc.want)
			}
			if got := errors.Is(err, ErrContextLength); got != tc.ctxLen {
				t.Errorf("errors.Is(ErrContextLength) = %v, want %v", got, tc.ctxLen)
			}
			if got := errors.Is(err, ErrUnavailable); got != tc.unavail {
				t.Errorf("errors.Is(ErrUnavailable) = %v, want %v", got, tc.unavail)
			}
			if got := Retryable(ctx, err); got != tc.retryable {
				t.Errorf("Retryable = %v, want %v", got, tc.retryable)
			}
			if !strings.Contains(err.Error(), c.completionsURL) || !strings.Contains(err.Error(), tc.errContain) {
				t.Errorf("error %q lacks the URL or %q", err, tc.errContain)
			}
		})
	}
}

func TestAPIErrorTruncatesRawBody(t *testing.T) {
	e := decodeAPIError(502, []byte(strings.Repeat("é", 5000)))
	if len(e.Message) > maxMessage+len("…") || !strings.HasSuffix(e.Message, "…") || !strings.HasPrefix(e.Message, "éé") {
		t.Errorf("message of %d bytes not truncated cleanly: %q…", len(e.Message), e.Message[:10])
	}
}

func TestCompleteBadResponse(t *testing.T) {
	swap := func(old, new string) string {
		if !strings.Contains(completionJSON, old) {
			t.Fatalf("canned response lacks %q", old)
		}
		return strings.Replace(completionJSON, old, new, 1)
	}
	const lps = `"token_logprobs":[-0.00012302,-0.5,-1.7881393e-05,-0.25,-3.0,-0.001953125,-9999.0]`
	const ids = `"token_ids":[151667,271,151668,271,59,90,151645]`
	noIDs := swap(ids+",", "") // ids only in the "token_id:<id>" strings
	for name, body := range map[string]string{
		"garbage":                 "<html>oops</html>",
		"empty body":              "",
		"truncated":               completionJSON[:len(completionJSON)/2],
		"trailing garbage":        completionJSON + "}",
		"not an object":           `[1,2,3]`,
		"null":                    `null`,
		"no choices":              `{"id":"cmpl-1","usage":{"prompt_tokens":3}}`,
		"empty choices":           `{"choices":[]}`,
		"two choices":             `{"choices":[` + choice(completionJSON) + `,` + choice(completionJSON) + `]}`,
		"more logprobs than ids":  swap(ids, `"token_ids":[151667,271,151668,271,59,90]`),
		"fewer logprobs than ids": swap(lps, `"token_logprobs":[-0.1]`),
		"NaN logprob":             swap(lps, `"token_logprobs":[NaN,-0.5,-1,-0.25,-3.0,-0.001953125,-9999.0]`),
		"Infinity logprob":        swap(lps, `"token_logprobs":[-Infinity,-0.5,-1,-0.25,-3.0,-0.001953125,-9999.0]`),
		"null logprob":            swap(lps, `"token_logprobs":[null,-0.5,-1,-0.25,-3.0,-0.001953125,-9999.0]`),
		"string logprob":          swap(lps, `"token_logprobs":["-0.1",-0.5,-1,-0.25,-3.0,-0.001953125,-9999.0]`),
		"float32 overflow":        swap(lps, `"token_logprobs":[-1e39,-0.5,-1,-0.25,-3.0,-0.001953125,-9999.0]`),
		"logprobs null":           swap(`"logprobs":{`, `"logprobs":null,"x":{`),
		"no token_logprobs":       swap(lps, `"token_logprobs":null`),
		"negative id":             swap(ids, `"token_ids":[-1,271,151668,271,59,90,151645]`),
		"id beyond int32":         swap(ids, `"token_ids":[2147483648,271,151668,271,59,90,151645]`),
		"fractional id":           swap(ids, `"token_ids":[1.5,271,151668,271,59,90,151645]`),
		"null id":                 swap(ids, `"token_ids":[null,271,151668,271,59,90,151645]`),
		"no finish_reason":        swap(`"finish_reason":"stop",`, ``),
		"stop_reason object":      swap(`"stop_reason":null`, `"stop_reason":{}`),
		"unparsable token_id":     strings.Replace(noIDs, `"token_id:271"`, `"token_id:27x"`, 1),
		"token without prefix":    strings.Replace(noIDs, `"token_id:271"`, `"271"`, 1),
		"token_id beyond int32":   strings.Replace(noIDs, `"token_id:271"`, `"token_id:4294967567"`, 1),
		"no ids at all":           strings.Replace(noIDs, `"tokens":[`, `"tokenz":[`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := server(t, reply(200, body))
			ctx := context.Background()
			_, err := c.Complete(ctx, req1)
			if !errors.Is(err, ErrBadResponse) || !Retryable(ctx, err) {
				t.Errorf("Complete: %v, want a retryable ErrBadResponse", err)
			}
			t.Log(err)
		})
	}
}

// choice extracts the single choice object of a canned response.
func choice(resp string) string {
	start := strings.Index(resp, `{"index"`)
	end := strings.Index(resp, `],
"usage"`)
	return resp[start:end]
}

func TestConnectionRefused(t *testing.T) {
	c, srv := server(t, reply(200, completionJSON))
	srv.Close()
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"complete": func() error { _, err := c.Complete(ctx, req1); return err },
		"tokenize": func() error { _, err := c.Tokenize(ctx, TokenizeRequest{Prompt: "x"}); return err },
		"health":   func() error { return c.Health(ctx) },
		"models":   func() error { _, err := c.Models(ctx); return err },
	} {
		err := call()
		if !errors.Is(err, ErrUnavailable) || !Retryable(ctx, err) {
			t.Errorf("%s: %v, want a retryable ErrUnavailable", name, err)
		}
	}
}

// stalled returns a client whose server accepts requests and never answers
// until the test ends; arrived receives a value per request.
func stalled(t *testing.T) (*Client, <-chan struct{}) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close, which waits for handlers
	return c, arrived
}

func TestDeadlineWhileServerStalls(t *testing.T) {
	c, _ := stalled(t)
	outer := context.Background()
	ctx, cancel := context.WithTimeout(outer, 30*time.Millisecond)
	defer cancel()
	_, err := c.Complete(ctx, req1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Complete: %v, want context.DeadlineExceeded", err)
	}
	if Retryable(ctx, err) {
		t.Error("Retryable with the expired context = true, want false")
	}
	// Seen from a caller that bounded this one attempt, the server stalled.
	if !errors.Is(err, ErrUnavailable) || !Retryable(outer, err) {
		t.Errorf("per-attempt deadline: %v, want ErrUnavailable and retryable under the outer context", err)
	}
}

func TestCancelWhileServerStalls(t *testing.T) {
	c, arrived := stalled(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := c.Complete(ctx, req1)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete: %v, want context.Canceled", err)
	}
	if errors.Is(err, ErrUnavailable) || Retryable(context.Background(), err) {
		t.Errorf("a cancelled call must not count as a server failure: %v", err)
	}
}

func TestOversizeResponse(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"with Content-Length": reply(200, completionJSON),
		"chunked": func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(completionJSON); i += 100 {
				io.WriteString(w, completionJSON[i:min(i+100, len(completionJSON))])
				w.(http.Flusher).Flush()
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := serverWith(t, h, Options{Model: "m", MaxResponseBytes: 512})
			ctx := context.Background()
			_, err := c.Complete(ctx, req1)
			if !errors.Is(err, ErrBadResponse) || !Retryable(ctx, err) {
				t.Errorf("Complete: %v, want a retryable ErrBadResponse", err)
			}
		})
	}
	// The limit is inclusive.
	c, _ := serverWith(t, reply(200, completionJSON), Options{Model: "m", MaxResponseBytes: int64(len(completionJSON))})
	if _, err := c.Complete(context.Background(), req1); err != nil {
		t.Errorf("body of exactly MaxResponseBytes: %v", err)
	}
}

func TestRetryable(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"nil", live, nil, false},
		{"unavailable", live, ErrUnavailable, true},
		{"bad response", live, ErrBadResponse, true},
		{"wrapped", live, opError("complete", "http://h/v1/completions", ErrUnavailable), true},
		{"5xx", live, &APIError{Status: 500}, true},
		{"context length", live, &APIError{Status: 400, Message: "maximum context length is 8"}, false},
		{"other 4xx", live, &APIError{Status: 422}, false},
		{"plain error", live, errors.New("x"), false},
		{"caller done", done, ErrUnavailable, false},
		{"caller cancelled", live, context.Canceled, false},
	} {
		if got := Retryable(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: Retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
