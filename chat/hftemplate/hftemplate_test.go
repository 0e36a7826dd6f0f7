package hftemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// render compiles src and renders it, failing the test on an error.
func render(t *testing.T, src string, opts Options, msgs []Message, r RenderOptions) string {
	t.Helper()
	tmpl, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(msgs, r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestToJSON holds tojson to Python's json.dumps (the want strings are
// json.dumps's output for the same value and options).
func TestToJSON(t *testing.T) {
	const value = `{"b": 1, "a": [1.0, 1e16, 1e-05, 0.1, 123456.789, -0.0, 2.5e-7], "s": "\u0001\u007f\b\f\u2028 é 😀 \"q\" \\", "e": {}, "l": [], "n": null, "t": true}`
	tests := []struct {
		name, filter, value, want string
	}{
		{"defaults", "tojson", value, "{\"b\": 1, \"a\": [1.0, 1e+16, 1e-05, 0.1, 123456.789, -0.0, 2.5e-07], \"s\": \"\\u0001\x7f\\b\\f\u2028 é 😀 \\\"q\\\" \\\\\", \"e\": {}, \"l\": [], \"n\": null, \"t\": true}"},
		{"indent", "tojson(indent=2)", value, "{\n  \"b\": 1,\n  \"a\": [\n    1.0,\n    1e+16,\n    1e-05,\n    0.1,\n    123456.789,\n    -0.0,\n    2.5e-07\n  ],\n  \"s\": \"\\u0001\x7f\\b\\f\u2028 é 😀 \\\"q\\\" \\\\\",\n  \"e\": {},\n  \"l\": [],\n  \"n\": null,\n  \"t\": true\n}"},
		{"ascii, sorted", "tojson(ensure_ascii=true, sort_keys=true)", value, "{\"a\": [1.0, 1e+16, 1e-05, 0.1, 123456.789, -0.0, 2.5e-07], \"b\": 1, \"e\": {}, \"l\": [], \"n\": null, \"s\": \"\\u0001\\u007f\\b\\f\\u2028 \\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\\", \"t\": true}"},
		{"separators", "tojson(separators=[',', ':'])", value, "{\"b\":1,\"a\":[1.0,1e+16,1e-05,0.1,123456.789,-0.0,2.5e-07],\"s\":\"\\u0001\x7f\\b\\f\u2028 é 😀 \\\"q\\\" \\\\\",\"e\":{},\"l\":[],\"n\":null,\"t\":true}"},
		{"indent 0", "tojson(indent=0)", `[1, {"x": [2]}]`, "[\n1,\n{\n\"x\": [\n2\n]\n}\n]"},
		{"indent string", "tojson(indent='\t')", `{"a": 1}`, "{\n\t\"a\": 1\n}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := render(t, "{{ x | "+tt.filter+" }}", Options{}, nil, RenderOptions{Kwargs: map[string]any{"x": json.RawMessage(tt.value)}})
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestStrftimeNow holds strftime_now to Python's time.strftime at
// Options.Now.
func TestStrftimeNow(t *testing.T) {
	tests := []struct {
		at           time.Time
		format, want string
	}{
		{time.Date(2026, 1, 5, 7, 3, 9, 0, time.UTC), "%d %b %Y", "05 Jan 2026"},
		{time.Date(2026, 1, 5, 7, 3, 9, 0, time.UTC), "%B %m %H:%M:%S", "January 01 07:03:09"},
		{time.Date(2026, 1, 5, 7, 3, 9, 0, time.UTC), "%a %A %y %j %I %p", "Mon Monday 26 005 07 AM"},
		{time.Date(2026, 1, 5, 7, 3, 9, 0, time.UTC), "%% %Q", "% %Q"},
		{time.Date(2026, 1, 5, 7, 3, 9, 0, time.UTC), "100%", "100%"},
		{time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC), "%I %p %j", "11 PM 365"},
	}
	for _, tt := range tests {
		got := render(t, `{{ strftime_now(f) }}`, Options{Now: tt.at}, nil, RenderOptions{Kwargs: map[string]any{"f": tt.format}})
		if got != tt.want {
			t.Errorf("%s at %v: got %q, want %q", tt.format, tt.at, got, tt.want)
		}
	}
}

func TestFromConfig(t *testing.T) {
	named := []any{
		map[string]any{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}"},
		map[string]any{"name": "tool_use", "template": "T{{ tools | length }}"},
	}
	tests := []struct {
		name    string
		cfg     map[string]any
		tools   []json.RawMessage
		want    string
		wantErr error
	}{
		{"string", map[string]any{"chat_template": "S{{ bos_token }}", "bos_token": "<s>"}, nil, "S<s>", nil},
		{"added token objects", map[string]any{"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": map[string]any{"__type": "AddedToken", "content": "<b>"}, "eos_token": map[string]any{"content": "<e>"}}, nil, "<b>|<e>", nil},
		{"named, no tools", map[string]any{"chat_template": named, "bos_token": "<s>", "eos_token": "</s>"}, nil, "D<s></s>", nil},
		{"named, tools", map[string]any{"chat_template": named}, []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{}`)}, "T2", nil},
		{"no template", map[string]any{"bos_token": "<s>"}, nil, "", ErrNoTemplate},
		{"named without default", map[string]any{"chat_template": named[1:]}, nil, "", ErrNoTemplate},
		{"template not a string", map[string]any{"chat_template": 3.0}, nil, "", ErrBadConfig},
		{"named entry not {name, template}", map[string]any{"chat_template": []any{"x"}}, nil, "", ErrBadConfig},
		{"token without content", map[string]any{"chat_template": "x", "eos_token": map[string]any{}}, nil, "", ErrBadConfig},
		{"does not parse", map[string]any{"chat_template": "{% if %}"}, nil, "", ErrParse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := FromConfig(tt.cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(nil, RenderOptions{Tools: tt.tools})
			if err != nil || got != tt.want {
				t.Errorf("Render = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestLoad reads a config, preferring a chat_template.jinja beside it,
// and names gpt-oss's template as missing when its config has none.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(cfg, []byte(`{"chat_template": "config {{ eos_token }}", "eos_token": "<e>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		tmpl, err := Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tmpl.Render(nil, RenderOptions{}); err != nil || got != want {
			t.Fatalf("Render = %q, %v; want %q", got, err, want)
		}
	}
	check("config <e>")
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("file {{ eos_token }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("file <e>")

	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing config: err = %v", err)
	}
	gptoss := filepath.Join(tokenizersDir(t), "gptoss", "tokenizer_config.json")
	if _, err := os.Stat(gptoss); err != nil {
		t.Skipf("%v: run scripts/fetch-tokenizers.sh", err)
	}
	if _, err := Load(gptoss); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("gpt-oss: err = %v, want ErrNoTemplate", err)
	}
}

// TestToolCallArguments: arguments reach the template as vLLM passes
// them, an object whatever form they came in, or as given with
// KeepArgumentStrings.
func TestToolCallArguments(t *testing.T) {
	const src = `{% for tc in messages[0].tool_calls %}{{ tc.function.arguments is mapping }} {{ tc.function.arguments | tojson }};{% endfor %}`
	msg := []Message{{Role: "assistant", ToolCalls: []ToolCall{
		{Function: FunctionCall{Name: "a", Arguments: json.RawMessage(`"{\"z\": 1, \"a\": [2]}"`)}},
		{Function: FunctionCall{Name: "b", Arguments: json.RawMessage(`{"z": 1, "a": [2]}`)}},
		{Function: FunctionCall{Name: "c"}},
		{Function: FunctionCall{Name: "d", Arguments: json.RawMessage(`""`)}},
	}}}
	tests := []struct {
		keep bool
		want string
	}{
		{false, `True {"z": 1, "a": [2]};True {"z": 1, "a": [2]};True {};True {};`},
		{true, `False "{\"z\": 1, \"a\": [2]}";True {"z": 1, "a": [2]};False "{}";False "";`},
	}
	for _, tt := range tests {
		if got := render(t, src, Options{KeepArgumentStrings: tt.keep}, msg, RenderOptions{}); got != tt.want {
			t.Errorf("keep=%v: got %q, want %q", tt.keep, got, tt.want)
		}
	}
}

// TestRenderErrors: bad input and a template's raise_exception are told
// apart by sentinel, and bad input names where it is.
func TestRenderErrors(t *testing.T) {
	call := func(args string) []Message {
		return []Message{{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(args)}}}}}
	}
	tests := []struct {
		name     string
		src      string
		msgs     []Message
		r        RenderOptions
		want     error
		wantText string
	}{
		{"raise_exception", `{{ raise_exception("roles must alternate") }}`, nil, RenderOptions{}, ErrRaised, "roles must alternate"},
		{"engine error", `{{ messages | nosuchfilter }}`, nil, RenderOptions{}, ErrRender, "nosuchfilter"},
		{"string plus list", `{{ "a" + messages }}`, nil, RenderOptions{}, ErrRender, `can only concatenate str (not "list") to str`},
		{"none plus string", `{{ messages[0].content + "a" }}`, []Message{{Role: "assistant"}}, RenderOptions{}, ErrRender, `(not "NoneType")`},
		{"arguments not JSON", `x`, call(`{"a": `), RenderOptions{}, ErrBadInput, "message 0: tool call 0: arguments"},
		{"arguments string not JSON", `x`, call(`"{\"a\": "`), RenderOptions{}, ErrBadInput, "arguments string"},
		{"content not UTF-8", `x`, []Message{{Role: "user", Content: Text("a\xffb")}}, RenderOptions{}, ErrBadInput, "message 0: bad chat template input: content is not valid UTF-8"},
		{"tool not JSON", `x`, nil, RenderOptions{Tools: []json.RawMessage{json.RawMessage(`{"a"}`)}}, ErrBadInput, "tool 0"},
		{"two tool values", `x`, nil, RenderOptions{Tools: []json.RawMessage{json.RawMessage(`{} {}`)}}, ErrBadInput, "after the JSON value"},
		{"reserved kwarg", `x`, nil, RenderOptions{Kwargs: map[string]any{"messages": 1}}, ErrBadInput, `"messages"`},
		{"kwarg not JSON", `x`, nil, RenderOptions{Kwargs: map[string]any{"f": func() {}}}, ErrBadInput, `"f"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := New(tt.src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.Render(tt.msgs, tt.r)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err = %v, want %v with %q", err, tt.want, tt.wantText)
			}
		})
	}
}

// TestMessageJSON reads messages as OpenAI's API writes them: content as
// a string, a list of parts or null, each back as it was.
func TestMessageJSON(t *testing.T) {
	const in = `[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"ok","tool_call_id":"c"},{"role":"assistant","content":"x","reasoning_content":"r"}]`
	var msgs []Message
	if err := json.Unmarshal([]byte(in), &msgs); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip:\n got %s\nwant %s", out, in)
	}
	got := render(t, `{% for m in messages %}{{ m.content is none }}{{ m.content is string }}{{ m.reasoning_content is defined }};{% endfor %}`, Options{}, msgs, RenderOptions{})
	if want := "FalseTrueFalse;FalseFalseFalse;TrueFalseFalse;FalseTrueFalse;FalseTrueTrue;"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var c Content
	if err := json.Unmarshal([]byte(`3`), &c); err == nil {
		t.Error("content 3 read without an error")
	}
}
