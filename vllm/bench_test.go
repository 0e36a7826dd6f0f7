package vllm

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// cannedCompletion builds a vLLM-shaped response with n generated tokens.
func cannedCompletion(n int) string {
	ids := make([]string, n)
	toks := make([]string, n)
	lps := make([]string, n)
	tops := make([]string, n)
	offs := make([]string, n)
	for i := range n {
		id := strconv.Itoa(1000 + i*37%150000)
		lp := strconv.FormatFloat(float64(float32(-0.0123456789*float64(i%97))), 'g', -1, 64)
		ids[i], toks[i], lps[i] = id, `"token_id:`+id+`"`, lp
		tops[i] = `{"token_id:` + id + `":` + lp + `}`
		offs[i] = strconv.Itoa(i * 4)
	}
	return fmt.Sprintf(`{"id":"cmpl-b","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":%q,`+
		`"logprobs":{"text_offset":[%s],"token_logprobs":[%s],"tokens":[%s],"top_logprobs":[%s]},`+
		`"finish_reason":"length","stop_reason":null,"token_ids":[%s],"prompt_token_ids":null}],`+
		`"usage":{"prompt_tokens":1024,"total_tokens":%d,"completion_tokens":%d}}`,
		strings.Repeat("abcd", n), strings.Join(offs, ","), strings.Join(lps, ","), strings.Join(toks, ","),
		strings.Join(tops, ","), strings.Join(ids, ","), 1024+n, n)
}

// BenchmarkComplete measures one Complete round trip over loopback HTTP:
// a 1024-token prompt, 256 generated tokens.
func BenchmarkComplete(b *testing.B) {
	body := []byte(cannedCompletion(256))
	c, _ := server(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	prompt := make([]int32, 1024)
	for i := range prompt {
		prompt[i] = int32(i * 131 % 151000)
	}
	req := CompletionRequest{Prompt: prompt, MaxTokens: 256, Temperature: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		comp, err := c.Complete(ctx, req)
		if err != nil || len(comp.TokenIDs) != 256 {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCompletion isolates response parsing (256 tokens).
func BenchmarkDecodeCompletion(b *testing.B) {
	body := []byte(cannedCompletion(256))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeCompletion(body); err != nil {
			b.Fatal(err)
		}
	}
}
