package toyllm

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestConstrainedReply builds the smallest instance of each kind of schema:
// what the stand-in answers under guided decoding.
func TestConstrainedReply(t *testing.T) {
	for _, tc := range []struct {
		name, so, want string
	}{
		{"object with required fields", `{"json": {"type": "object", "properties": {"city": {"type": "string"},
			"days": {"type": "integer", "minimum": 1}, "note": {"type": "string"}}, "required": ["city", "days"]}}`,
			`{"city": "", "days": 1}`},
		{"schema as a string", `{"json": "{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"minItems\": 2}"}`, `[false, false]`},
		{"enum, const and nullable", `{"json": {"type": "object", "required": ["a", "b", "c"], "properties": {
			"a": {"enum": ["x", "y"]}, "b": {"const": {"k": [1, 2]}}, "c": {"type": ["null", "string"]}}}}`,
			`{"a": "x", "b": {"k":[1,2]}, "c": null}`},
		{"refs and anyOf", `{"json": {"$defs": {"P": {"type": "object", "required": ["n"], "properties": {"n": {"type": "number", "exclusiveMinimum": 0.5}}}},
			"anyOf": [{"$ref": "#/$defs/P"}, {"type": "string"}]}}`, `{"n": 1.5}`},
		{"string length and escapes", `{"json": {"type": "object", "required": ["q\"k"], "properties": {"q\"k": {"type": "string", "minLength": 3}}}}`,
			`{"q\"k": "aaa"}`},
		{"json_object", `{"json_object": true}`, `{}`},
		{"choice", `{"choice": ["positive", "negative"]}`, `positive`},
		{"none", ``, ``},
	} {
		got, err := constrainedReply(json.RawMessage(tc.so))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.name, got, err, tc.want)
		}
		if strings.HasPrefix(tc.so, `{"json"`) && !json.Valid(got) {
			t.Errorf("%s: %s is not JSON", tc.name, got)
		}
	}
	for _, so := range []string{
		`{"regex": "\\d+"}`, `{"grammar": "root ::= x"}`, `{"json": {"type": "tuple"}}`, `{"json": false}`,
		`{"json": {"$ref": "#/nowhere"}}`, `{"json": {"$ref": "#"}}`, `{"choice": []}`, `[1]`,
	} {
		if _, err := constrainedReply(json.RawMessage(so)); err == nil {
			t.Errorf("%s: accepted", so)
		}
	}
}

// TestStructuredCompletion asks for a schema's instance: the reply is
// exactly it, every token sampled with probability 1 under the grammar,
// and the turn ends as usual.
func TestStructuredCompletion(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	schema := `{"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}`
	r := c.complete(map[string]any{
		"prompt": gamePrompt(), "max_tokens": 64, "seed": 3, "logprobs": 2, "return_token_ids": true,
		"structured_outputs": map[string]any{"json": json.RawMessage(schema)},
	})
	ch := r.Choices[0]
	if ch.Text != `{"answer": 0}` || ch.FinishReason != "stop" {
		t.Fatalf("reply %q (%s), want the schema's instance", ch.Text, ch.FinishReason)
	}
	for i, l := range ch.Logprobs.TokenLogprobs {
		if l != 0 {
			t.Fatalf("token %d: logprob %v under a grammar that leaves one token", i, l)
		}
	}
	status, body := c.post("/v1/completions", map[string]any{"prompt": gamePrompt(), "max_tokens": 8,
		"structured_outputs": map[string]any{"regex": "[0-9]+"}})
	if status != http.StatusBadRequest || !strings.Contains(string(body), "regex is not supported") {
		t.Fatalf("regex: status %d %s", status, body)
	}
}

// FuzzConstrainedReply holds the schema reader to an answer or an error on
// any input, never a panic, and a "json" answer to valid JSON.
func FuzzConstrainedReply(f *testing.F) {
	for _, s := range []string{
		`{"json": {"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#/properties/a"}}}}`,
		`{"json": {"type": "array", "minItems": 3, "items": {"enum": [1]}}}`, `{"choice": ["a"]}`, `{"json": "{}"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, so string) {
		got, err := constrainedReply(json.RawMessage(so))
		if err == nil && strings.HasPrefix(strings.TrimSpace(so), `{"json"`) && got != nil && !json.Valid(got) {
			t.Fatalf("%s gave %s", so, got)
		}
	})
}
