package toyllm

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// weatherTool is a tool definition in the OpenAI shape.
const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather of a city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`

func TestChatTemplateToolsAndReasoning(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	tools := json.RawMessage("[" + weatherTool + "]")
	toolsTurn := "<|im_start|>system\nBe brief.\n\n" + toolsHeader + "\n" + weatherTool + toolsFooter + "<|im_end|>\n"
	call := map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}
	tests := []struct {
		name string
		body map[string]any
		want string
	}{
		{
			name: "tools in the system turn",
			body: map[string]any{"messages": []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"}}, "tools": tools},
			want: toolsTurn + "<|im_start|>user\nParis?<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "tool calls and tool results",
			body: map[string]any{"tools": tools, "messages": []map[string]any{
				{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"},
				{"role": "assistant", "content": nil, "tool_calls": []any{call, call}},
				{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, {"role": "tool", "tool_call_id": "call_1", "content": "warm"},
			}},
			want: toolsTurn + "<|im_start|>user\nParis?<|im_end|>\n<|im_start|>assistant\n" +
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "reasoning and thinking",
			body: map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": true}, "messages": []map[string]any{
				{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nHello", "reasoning_content": "\nGreet.\n"},
				{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye", "reasoning": "Part."},
			}},
			want: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet.\n</think>\n\nHello<|im_end|>\n" +
				"<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\nPart.\n</think>\n\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n",
		},
		{
			name: "reasoning left in the content",
			body: map[string]any{"messages": []map[string]any{
				{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Greet.\n</think>\n\nHello"},
				{"role": "assistant", "content": "<think>\nA\n</think>\n\nB</think>C"},
			}, "add_generation_prompt": false},
			want: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet.\n</think>\n\nHello<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nA\n</think>\n\nC<|im_end|>\n",
		},
	}
	for _, tc := range tests {
		status, body := c.post("/tokenize", tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.name, status, body)
		}
		var r tokenizeResponse
		decodeStrict(t, body, &r)
		if got := (Tokenizer{}).Decode(r.Tokens); got != tc.want {
			t.Errorf("%s: rendered\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
	for _, bad := range []map[string]any{
		{"messages": []map[string]any{{"role": "user", "content": "x"}}, "tools": []any{map[string]any{"type": "function"}}},
		{"messages": []map[string]any{{"role": "assistant", "content": "x", "tool_calls": []any{map[string]any{"function": map[string]any{}}}}}},
	} {
		if status, body := c.post("/tokenize", bad); status != http.StatusBadRequest {
			t.Errorf("%v: status %d: %s", bad, status, body)
		}
	}
}

// TestToolEpisode plays a tool-using conversation with the stand-in: it calls the offered tool
// with the user's question, then answers with the tool's result, reasoning first when asked.
func TestToolEpisode(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	for _, thinking := range []bool{false, true} {
		msgs := []map[string]any{{"role": "user", "content": "Weather in Paris?"}}
		chatOnce := func() string {
			status, body := c.post("/v1/chat/completions", map[string]any{
				"messages": msgs, "tools": json.RawMessage("[" + weatherTool + "]"), "temperature": 0,
				"chat_template_kwargs": map[string]any{"enable_thinking": thinking},
			})
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			var r chatResponse
			decodeStrict(t, body, &r)
			return r.Choices[0].Message.Content
		}
		prefix := ""
		if thinking {
			prefix = "I call a tool first.\n</think>\n\n"
		}
		wantCall := prefix + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Weather in Paris?\"}}\n</tool_call>"
		if got := chatOnce(); got != wantCall {
			t.Fatalf("thinking=%v: first reply %q, want %q", thinking, got, wantCall)
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Weather in Paris?"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"})
		want := "The tool returned: sunny, 21C"
		if thinking {
			want = "I have the tool result.\n</think>\n\n" + want
		}
		if got := chatOnce(); !strings.HasPrefix(got, want) {
			t.Errorf("thinking=%v: answer %q, want %q", thinking, got, want)
		}
	}
}
