package gateway

import (
	"net/http"
	"testing"
)

// TestTopLogprobs asks for the most likely tokens at each position: chat's top_logprobs and
// completions' logprobs N come from the model server through the LLM workers, most likely first.
func TestTopLogprobs(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var chat struct {
		Choices []struct {
			Logprobs struct {
				Content []struct {
					Token       string  `json:"token"`
					Logprob     float32 `json:"logprob"`
					TopLogprobs []struct {
						Token   string  `json:"token"`
						Logprob float32 `json:"logprob"`
						Bytes   []int   `json:"bytes"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "Guess a number between 1 and 20."}}, "max_tokens": 12,
		"seed": 5, "logprobs": true, "top_logprobs": 2,
	})
	if err := r.decode(&chat); err != nil {
		t.Fatal(err)
	}
	content := chat.Choices[0].Logprobs.Content
	if len(content) == 0 {
		t.Fatal("no logprobs")
	}
	for i, c := range content {
		tops := c.TopLogprobs
		if len(tops) != 2 || tops[0].Logprob < tops[1].Logprob || len(tops[0].Bytes) == 0 {
			t.Fatalf("token %d: top_logprobs %+v, want the two most likely, most likely first", i, tops)
		}
		if c.Logprob > tops[0].Logprob {
			t.Errorf("token %d: sampled %q at %v is likelier than the most likely %+v", i, c.Token, c.Logprob, tops[0])
		}
	}
	var comp struct {
		Choices []struct {
			Logprobs struct {
				Tokens      []string             `json:"tokens"`
				TopLogprobs []map[string]float32 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	r = f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", nil, map[string]any{"prompt": "hi", "max_tokens": 8, "logprobs": 3, "seed": 1})
	if err := r.decode(&comp); err != nil {
		t.Fatal(err)
	}
	lp := comp.Choices[0].Logprobs
	for i, m := range lp.TopLogprobs {
		if _, ok := m[lp.Tokens[i]]; !ok || len(m) < 3 || len(m) > 4 {
			t.Errorf("position %d: top_logprobs %v, want the 3 most likely and the sampled %q", i, m, lp.Tokens[i])
		}
	}
}
