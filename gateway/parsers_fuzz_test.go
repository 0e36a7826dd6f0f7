package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// FuzzHermesToolCalls parses arbitrary model text: the parser never panics, a text without
// calls is all content, and calls written back the way the template writes them parse to the
// same calls.
func FuzzHermesToolCalls(f *testing.F) {
	for _, seed := range []string{
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
		"Sure.\n<tool_call>{\"name\":\"a\",\"arguments\":\"{}\"}</tool_call><tool_call>{\"name\":\"b\"}",
		"<tool_call>{\"name\": 1}</tool_call>", "<tool_call>not json</tool_call>", "plain text", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		content, calls, ok := parseHermesToolCalls(text)
		if !ok {
			if content != text || calls != nil {
				t.Fatalf("no calls: content %q, calls %v; want the text as content", content, calls)
			}
			return
		}
		if len(calls) == 0 || !strings.HasPrefix(text, content) {
			t.Fatalf("calls %v content %q from %q", calls, content, text)
		}
		var b strings.Builder
		for _, c := range calls {
			if c.name == "" {
				t.Fatal("a call without a name")
			}
			if !json.Valid([]byte(c.arguments)) {
				return // arguments given as a string holding other text: nothing to write back
			}
			b.WriteString("\n<tool_call>\n{\"name\": " + strconv.Quote(c.name) + ", \"arguments\": " + c.arguments + "}\n</tool_call>")
		}
		if !utf8Clean(calls) {
			return
		}
		_, again, ok := parseHermesToolCalls(b.String())
		if !ok || len(again) != len(calls) {
			t.Fatalf("written back as %q: %v %v", b.String(), again, ok)
		}
		for i := range calls {
			if again[i] != calls[i] {
				t.Fatalf("call %d: %+v written back parses as %+v", i, calls[i], again[i])
			}
		}
	})
}

// utf8Clean reports whether every name survives strconv.Quote as JSON would read it.
func utf8Clean(calls []parsedCall) bool {
	for _, c := range calls {
		var back string
		if json.Unmarshal([]byte(strconv.Quote(c.name)), &back) != nil || back != c.name {
			return false
		}
	}
	return true
}

// FuzzQwen3Reasoning splits arbitrary text: reasoning and content are the text's parts around
// the first </think>, and without one the whole text is content.
func FuzzQwen3Reasoning(f *testing.F) {
	for _, seed := range []string{"<think>\nR\n</think>\n\nC", "R</think>C", "<think>open", "x<think>y</think>", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		reasoning, content, ok := splitQwen3Reasoning(text)
		switch {
		case !ok && (content != text || reasoning != ""):
			t.Fatalf("no reasoning: %q %q from %q", reasoning, content, text)
		case ok && (!strings.HasSuffix(text, thinkEnd+content) || strings.Contains(reasoning, thinkEnd) || !strings.Contains(text, reasoning+thinkEnd)):
			t.Fatalf("reasoning %q content %q from %q", reasoning, content, text)
		}
	})
}

// FuzzResponsesRequest decodes arbitrary Responses API bodies: every refusal is a 400, and an
// accepted request is a chat request the LLM workers accept.
func FuzzResponsesRequest(f *testing.F) {
	for _, seed := range []string{
		`{"input":"hi","max_output_tokens":8}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}]},` +
			`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],` +
			`"tools":[{"type":"function","name":"f","parameters":{},"strict":true}],"reasoning":{"effort":"low"}}`,
		`{"input":[{"type":"function_call","call_id":"","name":"f"}]}`, `{"input":[{"type":"web_search_call"}]}`,
		`{"input":"x","previous_response_id":"r"}`, `{"input":"x","tools":[{"type":"web_search"}]}`, `{"input":[]}`, `{}`, `[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, sp, err := decodeResponses(body, func(string) ([]json.RawMessage, error) {
			return []json.RawMessage{json.RawMessage(`{"role":"user","content":"earlier"}`)}, nil
		})
		if err != nil {
			var ae *vllmapi.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
				t.Fatalf("refusal %v is not a 400", err)
			}
			return
		}
		if err := sp.Validate(); err != nil {
			t.Fatalf("accepted invalid sampling: %v", err)
		}
		if req.checkTools(ToolParserHermes) != nil {
			return
		}
		kw, err := req.templateKwargsWithEffort()
		if err != nil {
			return
		}
		treq := messages.ChatTokenizeRequest{V: messages.Version, Messages: plainMessages(req.Messages), AddGenerationPrompt: true,
			ChatTemplateKwargs: kw, Tools: req.toolsJSON}
		if err := treq.Validate(); err != nil {
			t.Fatalf("accepted a request the LLM workers refuse: %v", err)
		}
	})
}

// FuzzVerifyResult decodes arbitrary verify results: every refusal is a 400, and an accepted
// one names a non-empty token trace, a reward and bounded, finite extras.
func FuzzVerifyResult(f *testing.F) {
	for _, seed := range []string{
		`{"reward":1,"library_reward":1,"expected_answer":"7","response":{"output":[{"type":"message","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}]}}`,
		`{"reward":1,"response":{"output":[{"prompt_token_ids":[1],"generation_token_ids":[-1]}]}}`,
		`{"reward":"1","response":{}}`, `{"reward":0,"response":{"output":[]}}`, `{"reward":1e999}`, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodeVerify(body)
		if err != nil {
			var ae *vllmapi.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
				t.Fatalf("refusal %v is not a 400", err)
			}
			return
		}
		if len(v.trace) == 0 || v.finish.Reward == nil || len(v.finish.ExtraLogs)+len(v.finish.Info) > maxVerifyFields {
			t.Fatalf("accepted %+v", v)
		}
		for k, x := range v.finish.ExtraLogs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("extra_logs[%q] = %v", k, x)
			}
		}
		for _, id := range v.trace {
			if id < 0 {
				t.Fatalf("token id %d", id)
			}
		}
	})
}
