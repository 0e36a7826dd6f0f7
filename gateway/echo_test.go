package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestEchoedTokenFields sends Responses input items that echo the gateway's token fields, as
// the Agents SDK and LangChain do: they are ignored and do not count against the body limit,
// while a body too large without them still gets a 413.
func TestEchoedTokenFields(t *testing.T) {
	const limit = 64 << 10
	f := newFixture(t, fixtureOptions{gateway: Options{MaxBodyBytes: limit}})
	ids := make([]int, 3*limit/8) // well over the limit once written out
	echoed := map[string]any{"type": "message", "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": "Hi."}},
		"prompt_token_ids": ids, "generation_token_ids": ids, "generation_log_probs": ids}
	input := []any{map[string]any{"role": "user", "content": "Hello"}, echoed, map[string]any{"role": "user", "content": "Again?"}}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/responses", nil, map[string]any{"input": input, "max_output_tokens": 16})

	input = append(input, map[string]any{"role": "user", "content": strings.Repeat("x", limit)})
	r := f.must(t, http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/responses", nil, map[string]any{"input": input, "max_output_tokens": 16})
	if !strings.Contains(r.errorMessage(), "not counting token fields") {
		t.Errorf("413 message %q", r.errorMessage())
	}
}
