package vllm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/rollfleet/rollfleet/vllm"
)

// One model turn: build the first prompt with the server's chat template,
// generate from its token ids, and tell a truncated episode from a failed
// server. A canned stand-in answers for vLLM so that the example runs.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			io.WriteString(w, `{"count":5,"max_model_len":40960,"tokens":[151644,872,198,6023,151645]}`)
		case "/v1/completions":
			io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","model":"Qwen/Qwen3-0.6B","choices":[{"index":0,
				"text":"\\boxed{50}<|im_end|>","logprobs":{"tokens":["token_id:59","token_id:90","token_id:151645"],
				"token_logprobs":[-0.25,-0.001953125,-9999.0]},"finish_reason":"stop","stop_reason":null,
				"token_ids":[59,90,151645]}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
		}
	}))
	defer srv.Close()

	ctx := context.Background()
	c, err := vllm.New(srv.URL, vllm.Options{Model: "Qwen/Qwen3-0.6B"})
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := c.Tokenize(ctx, vllm.TokenizeRequest{
		Messages:            []vllm.Message{{Role: "user", Content: "Guess a number between 1 and 100."}},
		AddGenerationPrompt: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	out, err := c.Complete(ctx, vllm.CompletionRequest{Prompt: prompt, MaxTokens: 1024, Temperature: 1})
	switch {
	case errors.Is(err, vllm.ErrContextLength):
		fmt.Println("out of token budget: the episode is truncated")
	case vllm.Retryable(ctx, err):
		fmt.Println("server failed: retry on another endpoint")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(out.TokenIDs, out.Logprobs, out.FinishReason)
	}
	// Output: [59 90 151645] [-0.25 -0.001953125 -9999] stop
}
