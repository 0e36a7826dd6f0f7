package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestStructuredOutputs(t *testing.T) {
	for _, tc := range []struct {
		name, body, want, err string
	}{
		{"none", `{}`, ``, ``},
		{"text", `{"response_format": {"type": "text"}}`, ``, ``},
		{"json_object", `{"response_format": {"type": "json_object"}}`, `{"json_object":true}`, ``},
		{"json_schema", `{"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}}`,
			`{"json":{"type": "object"}}`, ``},
		{"text.format", `{"response_format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}}`, `{"json":{"type": "object"}}`, ``},
		{"guided_choice", `{"guided_choice": ["a", "b"]}`, `{"choice":["a", "b"]}`, ``},
		{"structured_outputs", `{"structured_outputs": {"regex": "[0-9]+"}}`, `{"regex": "[0-9]+"}`, ``},
		{"two ways", `{"guided_json": {}, "response_format": {"type": "json_object"}}`, ``, `one structured output at a time`},
		{"no schema", `{"response_format": {"type": "json_schema", "json_schema": {"name": "w"}}}`, ``, `needs a schema`},
		{"unknown type", `{"response_format": {"type": "yaml"}}`, ``, `json_schema, got "yaml"`},
	} {
		var f samplingFields
		if err := json.Unmarshal([]byte(tc.body), &f); err != nil {
			t.Fatal(err)
		}
		got, err := structuredOutputs(&f)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestForcedTools(t *testing.T) {
	tools := []byte(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
		{"type":"function","function":{"name":"now"}}]`)
	g, ok, err := forcedTools(tools, json.RawMessage(`{"type":"function","function":{"name":"get_weather"}}`))
	if err != nil || !ok || g.tool != "get_weather" || !strings.Contains(string(g.outputs), `"required":["city"]`) {
		t.Fatalf("named: %+v %v %v", g, ok, err)
	}
	calls, err := g.calls(`{"city": "Paris"}`)
	if err != nil || len(calls) != 1 || calls[0] != (forcedCall{"get_weather", `{"city": "Paris"}`}) {
		t.Fatalf("named calls %+v %v", calls, err)
	}
	if g, _, _ := forcedTools(tools, json.RawMessage(`{"type":"function","name":"now"}`)); g.tool != "now" ||
		!strings.Contains(string(g.outputs), `"properties":{}`) {
		t.Fatalf("Responses-shaped named choice: %+v", g)
	}
	g, ok, err = forcedTools(tools, json.RawMessage(`"required"`))
	if err != nil || !ok || !g.anyTool || !json.Valid(g.outputs) {
		t.Fatalf("required: %+v %v %v", g, ok, err)
	}
	calls, err = g.calls(`[{"name": "now", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}]`)
	if err != nil || len(calls) != 2 || calls[1] != (forcedCall{"get_weather", `{"city": "Oslo"}`}) {
		t.Fatalf("required calls %+v %v", calls, err)
	}
	for _, choice := range []string{`"auto"`, `"none"`, ``} {
		if _, ok, err := forcedTools(tools, json.RawMessage(choice)); ok || err != nil {
			t.Errorf("%s: forced %v, %v", choice, ok, err)
		}
	}
	for _, choice := range []string{`{"type":"function","function":{"name":"fly"}}`, `{"type":"x"}`} {
		if _, _, err := forcedTools(tools, json.RawMessage(choice)); err == nil {
			t.Errorf("%s: accepted", choice)
		}
	}
	if _, _, err := forcedTools(nil, json.RawMessage(`"required"`)); err == nil {
		t.Error("required without tools: accepted")
	}
}

// TestGuidedDecoding asks for structured output and forced tool calls through the gateway: the
// stand-in's guided decoding answers with the schema's smallest instance, which the gateway
// returns as content or reads as the forced tool calls.
func TestGuidedDecoding(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	tools := []any{jsonValue(t, weatherTool)}
	user := []map[string]any{{"role": "user", "content": "Weather in Paris?"}}
	schema := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}}
	for _, tc := range []struct {
		name          string
		body          map[string]any
		content, call string
		finish        string
	}{
		{"json_schema", map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": schema}}},
			`{"ok": false}`, "", "stop"},
		{"json_object", map[string]any{"response_format": map[string]any{"type": "json_object"}}, `{}`, "", "stop"},
		{"guided_choice", map[string]any{"guided_choice": []string{"yes", "no"}}, "yes", "", "stop"},
		{"named tool", map[string]any{"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}},
			"", "get_weather", "tool_calls"},
		{"required", map[string]any{"tools": tools, "tool_choice": "required"}, "", "get_weather", "tool_calls"},
	} {
		body := map[string]any{"messages": user, "max_tokens": 100}
		for k, v := range tc.body {
			body[k] = v
		}
		r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, body)
		var out struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := r.decode(&out); err != nil {
			t.Fatal(err)
		}
		ch := out.Choices[0]
		if ch.FinishReason != tc.finish {
			t.Errorf("%s: finish %q, want %q", tc.name, ch.FinishReason, tc.finish)
		}
		if tc.call == "" {
			if ch.Message.Content == nil || *ch.Message.Content != tc.content {
				t.Errorf("%s: content %v, want %q", tc.name, ch.Message.Content, tc.content)
			}
			continue
		}
		if len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != tc.call ||
			!json.Valid([]byte(ch.Message.ToolCalls[0].Function.Arguments)) {
			t.Errorf("%s: tool calls %+v, want one call of %s with JSON arguments", tc.name, ch.Message.ToolCalls, tc.call)
		}
	}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/responses", nil, map[string]any{
		"input": "Weather in Paris?", "max_output_tokens": 100,
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "r", "schema": schema}},
	})
	if !strings.Contains(string(r.body), `"text":"{\"ok\": false}"`) {
		t.Errorf("Responses text.format json_schema: %s", r.body)
	}
}
