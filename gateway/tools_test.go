package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseHermesToolCalls(t *testing.T) {
	tests := []struct {
		text, content string
		calls         []parsedCall
		ok            bool
	}{
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", "", []parsedCall{{"f", `{"x": 1}`}}, true},
		{"Let me look.\n<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":\"{\\\"a\\\": 2}\"}</tool_call>",
			"Let me look.", []parsedCall{{"f", "{}"}, {"g", `{"a": 2}`}}, true},
		{"\n\n<tool_call>{\"name\":\"f\"}", "", []parsedCall{{"f", "{}"}}, true}, // unterminated last call, as vLLM's regex allows
		{"<tool_call>{\"name\":\"f\"} trailing</tool_call>", "<tool_call>{\"name\":\"f\"} trailing</tool_call>", nil, false},
		{"<tool_call>{\"arguments\":{}}</tool_call>", "<tool_call>{\"arguments\":{}}</tool_call>", nil, false},
		{"no calls", "no calls", nil, false},
	}
	for _, tc := range tests {
		content, calls, ok := parseHermesToolCalls(tc.text)
		if content != tc.content || ok != tc.ok || !slices.Equal(calls, tc.calls) {
			t.Errorf("%q: %q %v %v, want %q %v %v", tc.text, content, calls, ok, tc.content, tc.calls, tc.ok)
		}
	}
}

func TestSplitQwen3Reasoning(t *testing.T) {
	tests := []struct{ text, reasoning, content string }{
		{"<think>\nR\n</think>\n\nC", "\nR\n", "\n\nC"},
		{"R\n</think>\n\nC", "R\n", "\n\nC"}, // the prompt opened the block
		{"<think>R</think>", "R", ""},
		{"no block", "", "no block"},
		{"<think>unfinished", "", "<think>unfinished"},
	}
	for _, tc := range tests {
		r, c, _ := splitQwen3Reasoning(tc.text)
		if r != tc.reasoning || c != tc.content {
			t.Errorf("%q: %q %q, want %q %q", tc.text, r, c, tc.reasoning, tc.content)
		}
	}
}

// TestToolAndReasoningRequests checks what the gateway refuses and what it passes on.
func TestToolAndReasoningRequests(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	none := newFixture(t, fixtureOptions{gateway: Options{ToolCallParser: ToolParserNone}})
	tools := []any{jsonValue(t, weatherTool)}
	user := []map[string]any{{"role": "user", "content": "Paris"}}
	tests := []struct {
		name   string
		f      *fixture
		body   map[string]any
		status int
		want   string // in the error message, or in the content
	}{
		{"tool_choice naming no tool", f, map[string]any{"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "fly"}}}, 400, "not among the tools"},
		{"forced tool and a format", f, map[string]any{"tools": tools, "tool_choice": "required", "response_format": map[string]any{"type": "json_object"}}, 400, "at once"},
		{"bad tool", f, map[string]any{"tools": []any{map[string]any{"type": "function"}}}, 400, "tools[0]"},
		{"bad tool_calls", f, map[string]any{"messages": []map[string]any{{"role": "assistant", "content": "x", "tool_calls": []any{map[string]any{"type": "function"}}}}}, 400, "tool_calls[0]"},
		{"reasoning fields differ", f, map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning": "a", "reasoning_content": "b"}}}, 400, "differ"},
		{"unknown reasoning_effort", f, map[string]any{"reasoning_effort": "extreme"}, 400, "reasoning_effort"},
		{"reasoning_effort accepted", f, map[string]any{"reasoning_effort": "low"}, 200, ""},
		{"auto without a parser", none, map[string]any{"tools": tools}, 400, "tool-call parser"},
		{"tool_choice none without a parser", none, map[string]any{"tools": tools, "tool_choice": "none"}, 200, "<tool_call>"},
		{"tool_choice none with a parser", f, map[string]any{"tools": tools, "tool_choice": "none"}, 200, "<tool_call>"},
	}
	for _, tc := range tests {
		body := map[string]any{"messages": user, "max_tokens": 100, "temperature": 0}
		for k, v := range tc.body {
			body[k] = v
		}
		r := tc.f.must(t, tc.status, http.MethodPost, "/v1/chat/completions", nil, body)
		if tc.status != http.StatusOK {
			if !strings.Contains(r.errorMessage(), tc.want) {
				t.Errorf("%s: %q, want it to mention %q", tc.name, r.errorMessage(), tc.want)
			}
			continue
		}
		var out struct {
			Choices []struct {
				Message struct {
					Content   string `json:"content"`
					ToolCalls []any  `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := r.decode(&out); err != nil {
			t.Fatal(err)
		}
		if m := out.Choices[0].Message; !strings.Contains(m.Content, tc.want) || len(m.ToolCalls) != 0 {
			t.Errorf("%s: content %q, tool calls %v", tc.name, m.Content, m.ToolCalls)
		}
	}
}

// TestTemplateKwargsWithEffort checks that reasoning_effort reaches the chat template as
// its variable, unless chat_template_kwargs sets it.
func TestTemplateKwargsWithEffort(t *testing.T) {
	low := "low"
	for _, tc := range []struct {
		name   string
		kwargs string
		effort *string
		want   string
	}{
		{"no effort", `{"enable_thinking":false}`, nil, `{"enable_thinking":false}`},
		{"effort added", "", &low, `{"reasoning_effort":"low"}`},
		{"effort beside kwargs", `{"enable_thinking":true}`, &low, `{"enable_thinking":true,"reasoning_effort":"low"}`},
		{"kwargs win", `{"reasoning_effort":"high"}`, &low, `{"reasoning_effort":"high"}`},
	} {
		r := chatRequest{ChatTemplateKwargs: json.RawMessage(tc.kwargs), ReasoningEffort: tc.effort}
		got, err := r.templateKwargsWithEffort()
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

// TestResponsesToolEpisode points a NeMo Gym-style agent straight at POST /v1/responses: the
// output items go back into the next input as they came (token information included), each
// function call is answered with its output, until the model answers in text. The rollout is
// one trajectory whose tokens extend exactly, call after call.
func TestResponsesToolEpisode(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{ReasoningParser: ReasoningParserQwen3}})
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": true,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}}
	input := []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Paris"}}}}
	var calls []*nemoCall
	for turn := 0; turn < 4; turn++ {
		r := f.must(t, http.StatusOK, http.MethodPost, "/v1/responses", nil, map[string]any{
			"model": "", "input": input, "tools": tools, "instructions": "Use the tools.", "seed": 43, "temperature": 1.0,
			"max_output_tokens": 200, "chat_template_kwargs": map[string]any{"enable_thinking": true}, "metadata": map[string]any{"task": "w"},
		})
		resp := jsonValue(t, string(r.body)).(map[string]any)
		output := asList(resp["output"])
		if resp["object"] != "response" || resp["status"] != "completed" || len(output) == 0 {
			t.Fatalf("turn %d: %s", turn, r.body)
		}
		if first := output[0].(map[string]any); first["type"] != "reasoning" {
			t.Errorf("turn %d: first output item %v, want the reasoning", turn, first)
		}
		last := output[len(output)-1].(map[string]any)
		c := &nemoCall{session: r.header.Get(HeaderSessionID), prompt: ids(t, last["prompt_token_ids"]), gen: ids(t, last["generation_token_ids"])}
		for _, x := range asList(last["generation_log_probs"]) {
			lp, err := parseFloat32(string(x.(json.Number)))
			if err != nil {
				t.Fatal(err)
			}
			c.logprobs = append(c.logprobs, lp)
		}
		usage := resp["usage"].(map[string]any)
		if len(c.gen) != len(c.logprobs) || len(c.prompt) == 0 ||
			usage["input_tokens"] != json.Number(strconv.Itoa(len(c.prompt))) || usage["output_tokens"] != json.Number(strconv.Itoa(len(c.gen))) {
			t.Fatalf("turn %d: token information %d/%d/%d, usage %v", turn, len(c.prompt), len(c.gen), len(c.logprobs), usage)
		}
		calls = append(calls, c)
		called := false
		for _, o := range output {
			it := o.(map[string]any)
			input = append(input, it)
			if it["type"] == "function_call" {
				called = true
				if it["name"] != "get_weather" || it["arguments"] != `{"city": "Paris"}` || it["call_id"] == "" {
					t.Errorf("turn %d: function call %v", turn, it)
				}
				input = append(input, map[string]any{"type": "function_call_output", "call_id": it["call_id"], "output": "sunny, 21C"})
			}
		}
		if !called {
			msg := last
			text := asList(msg["content"])[0].(map[string]any)["text"]
			if msg["type"] != "message" || !strings.Contains(text.(string), "The tool returned: sunny, 21C") {
				t.Errorf("answer %v", msg)
			}
			break
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d calls, want a tool call and an answer", len(calls))
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"metadata": map[string]any{"task": "w"}, "reward": 1})
	tr := f.trajectories(t, DefaultEnv)[calls[0].session]
	if tr == nil || calls[1].session != calls[0].session {
		t.Fatalf("sessions %q %q, no trajectory", calls[0].session, calls[1].session)
	}
	checkNemoTrajectory(t, f, tr, calls, 43, 1)
}

// TestIdlessSessionBounds checks that sessions without ids keep the bounds: MaxSessions
// counts them, and ended ones leave the prefix index.
func TestIdlessSessionBounds(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{MaxSessions: 2}})
	callAs := func(key, q string, status int) *response {
		return f.must(t, status, http.MethodPost, "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key},
			map[string]any{"messages": []map[string]any{{"role": "user", "content": q}}, "max_tokens": 16, "metadata": map[string]any{"q": q}})
	}
	call := func(q string, status int) *response { return callAs("k1", q, status) }
	a, b := call("one", 200), call("two", 200)
	call("three", http.StatusTooManyRequests)
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"metadata": map[string]any{"q": "one"}, "reward": 0})
	f.must(t, http.StatusOK, http.MethodDelete, "/v1/sessions/"+b.header.Get(HeaderSessionID), nil, nil)
	if a.header.Get(HeaderSessionID) == b.header.Get(HeaderSessionID) {
		t.Fatal("two conversations share a session")
	}
	st := f.gw.sessions
	st.mu.Lock()
	n, scopes := len(st.sessions), len(st.scopes)
	st.mu.Unlock()
	if n != 0 || scopes != 0 {
		t.Errorf("%d sessions and %d scopes left after both ended", n, scopes)
	}
	// Another API key is another scope: the same prompt opens a session of
	// its own beside the first key's.
	k1, k2 := callAs("k1", "one", 200), callAs("k2", "one", 200)
	if id1, id2 := k1.header.Get(HeaderSessionID), k2.header.Get(HeaderSessionID); id1 == "" || id1 == id2 {
		t.Fatalf("the same prompt under two keys: sessions %q and %q, want two", id1, id2)
	}
	for _, r := range []*response{k1, k2} {
		f.must(t, http.StatusOK, http.MethodDelete, "/v1/sessions/"+r.header.Get(HeaderSessionID), nil, nil)
	}
	// An idle session without an id expires as a failure, like any other.
	c := call("four", 200)
	f.gw.expireIdle(t.Context(), time.Now().Add(2*DefaultSessionTTL))
	found := false
	for _, fl := range f.failures(t) {
		found = found || (fl.EpisodeID == c.header.Get(HeaderSessionID) && strings.Contains(fl.Reason, "abandoned"))
	}
	if !found {
		t.Error("no failure record for the idle session")
	}
}

// TestNoIdlessSessions serves calls without a session id unrecorded when asked to.
func TestNoIdlessSessions(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{NoIdlessSessions: true}})
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil,
		map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "max_tokens": 4})
	if got := r.header.Get(HeaderSessionID); got != "" || f.gw.Stats().OpenSessions != 0 {
		t.Errorf("session %q, %d open: want the call unrecorded", got, f.gw.Stats().OpenSessions)
	}
}

func TestKeptMetadata(t *testing.T) {
	long := strings.Repeat("v", maxMetadataValueLength+1)
	many := map[string]string{}
	for i := range maxMetadataPairs + 4 {
		many[string(rune('a'+i))] = "x"
	}
	tests := []struct {
		in   map[string]string
		want int
	}{
		{nil, 0},
		{map[string]string{"task": "1", "big": long, strings.Repeat("k", maxMetadataKeyLength+1): "v"}, 1},
		{many, maxMetadataPairs},
	}
	for _, tc := range tests {
		got := keptMetadata(tc.in)
		if len(got) != tc.want {
			t.Errorf("%d pairs kept of %d, want %d", len(got), len(tc.in), tc.want)
		}
		for k, v := range got {
			if tc.in[k] != v {
				t.Errorf("kept %q=%q, not in the request", k, v)
			}
		}
	}
	if got := keptMetadata(many); got["a"] != "x" || got[string(rune('a'+maxMetadataPairs))] != "" {
		t.Errorf("kept %v: want the smallest keys", got)
	}
}
