package hftemplate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// referenceNow is the clock both renderers' strftime_now read.
var referenceNow = time.Date(2026, time.July, 26, 10, 30, 0, 0, time.UTC)

// parityModels are the tokenizer directories scripts/fetch-tokenizers.sh
// fetches whose configs hold a chat template (gpt-oss's holds none).
var parityModels = []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3"}

// keepsArgumentStrings are the models whose templates concatenate tool
// call arguments as text.
var keepsArgumentStrings = map[string]bool{"deepseek_v3": true}

// clockTemplate is no model's: it holds strftime_now and tojson's indent
// to the reference, which none of the four configs' templates call.
const clockTemplate = `{{- bos_token }}Today: {{ strftime_now("%d %b %Y") }} {{ strftime_now("%B %m %H:%M") }}
{%- if tools %}{% for t in tools %}
{{ t | tojson(indent=4) }}{% endfor %}{% endif %}
{%- for m in messages %}
[{{ m.role }}] {{ m.content }}{% if m.tool_calls %} {{ m.tool_calls | tojson }}{% endif %}
{%- endfor %}`

// pythonismsTemplate is no model's: it holds the Python methods, tests and
// loop variables chat templates use, beyond the four configs' templates,
// to the references.
const pythonismsTemplate = `{%- set ns = namespace(n=0) -%}
{%- for m in messages[::-1] -%}
{{ loop.index }}/{{ loop.length }}{{ ' first' if loop.first }}{{ ' last' if loop.last }} {{ m['role'].upper() }} {{ m.content | length }}
{%- if m.content is string %} {{ m.content.strip().split(' ')[0] }} {{ 'ends?' if m.content.endswith('?') }} {{ 'in' if 'ove' in m.content }} {{ m.content.replace('e', 'E') }}{% endif %}
{%- if m.tool_calls is defined %}{% for tc in m.tool_calls %} {{ tc.function.name }}({% for k, v in tc.function.arguments.items() %}{{ k }}={{ v if v is string else v | tojson }}{{ ',' if not loop.last }}{% endfor %}){{ ' mapping' if tc.function.arguments is mapping }}{% endfor %}{% endif %}
{%- set ns.n = ns.n + 1 %}
{% endfor -%}
{{ ns.n }} {{ tools | length if tools else 0 }} {{ (tools or [])[0].function.parameters.required | join('+') if tools }} {{ messages[0].get('name', 'anon') }} {{ messages | map(attribute='role') | join(',') }}`

// parityCase is one conversation rendered with every model.
type parityCase struct {
	name     string
	messages []Message
	r        RenderOptions
	template string   // replaces the model's template if set
	models   []string // the models whose templates take this input; all if nil
	// pythonOnly holds the case to Jinja2 alone, where transformers.js's
	// engine departs from Python.
	pythonOnly bool
}

func ptr(s string) *string { return &s }

func user(s string) Message      { return Message{Role: "user", Content: Text(s)} }
func assistant(s string) Message { return Message{Role: "assistant", Content: Text(s)} }
func system(s string) Message    { return Message{Role: "system", Content: Text(s)} }

var weatherTools = []json.RawMessage{
	json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather \"now\" in a city — °C", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City, e.g. Zürich"}, "when": {"type": "object", "properties": {"day": {"type": "string", "enum": ["today", "tomorrow"]}, "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}}}, "required": ["day"]}}, "required": ["city"]}}}`),
	json.RawMessage(`{"type": "function", "function": {"name": "move", "description": "Move a piece on the board", "parameters": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}, "promote": {"type": ["string", "null"], "default": null}, "weight": {"type": "number", "default": 0.5}}, "required": ["from", "to"]}}}`),
}

func toolCall(id, name, args string) ToolCall {
	raw, _ := json.Marshal(args) // OpenAI's form: the arguments as a JSON string
	return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: raw}}
}

func parityCases() []parityCase {
	var long []Message
	for i := range 6 {
		long = append(long, user(fmt.Sprintf("Turn %d: your move?", i)), assistant(fmt.Sprintf("I play e%d.", i+2)))
	}
	toolTurns := []Message{
		system("You are a helpful assistant."),
		user("What's the weather in Zürich, and move e2 to e4."),
		{Role: "assistant", Content: Text(""), ToolCalls: []ToolCall{
			toolCall("call_1", "get_weather", `{"city": "Zürich", "when": {"day": "today", "hours": [9, 12]}}`),
			toolCall("call_2", "move", `{"from": "e2", "to": "e4", "weight": 0.25}`),
		}},
		{Role: "tool", ToolCallID: "call_1", Content: Text(`{"temp": 21, "sky": "clear"}`)},
		{Role: "tool", ToolCallID: "call_2", Content: Text("ok")},
		assistant("It is 21 °C and clear; e4 is played."),
		user("Thanks!"),
	}
	partsTurns := []Message{
		{Role: "system", Content: Parts(Part{Type: "text", Text: "Rules first."})},
		{Role: "user", Content: Parts(Part{Type: "text", Text: "  Look:  "}, Part{Type: "image"}, Part{Type: "text", Text: "what is it?"})},
	}
	thinking := []Message{
		user("What is 2+2?"),
		{Role: "assistant", Content: Text("4"), ReasoningContent: ptr("2 plus 2 is 4.")},
		user("And 3+3?"),
		assistant("<think>\n3 plus 3 is 6.\n</think>\n\n6"),
		user("And 4+4?"),
	}
	return []parityCase{
		{name: "one turn", messages: []Message{user("Hello!")}},
		{name: "one turn, generation prompt", messages: []Message{user("Hello!")}, r: RenderOptions{AddGenerationPrompt: true}},
		{name: "system", messages: []Message{system("Be brief."), user("Hi"), assistant("Hello."), user("Bye")}, r: RenderOptions{AddGenerationPrompt: true}},
		{name: "many turns", messages: append([]Message{system("You play chess.")}, long...)},
		{name: "many turns, generation prompt", messages: append(append([]Message{}, long...), user("Final move?")), r: RenderOptions{AddGenerationPrompt: true}},
		{name: "tools and tool calls", messages: toolTurns, r: RenderOptions{Tools: weatherTools, AddGenerationPrompt: true}},
		{name: "tools, no system", messages: toolTurns[1:2], r: RenderOptions{Tools: weatherTools, AddGenerationPrompt: true}},
		{name: "tool call with content", messages: []Message{
			user("Move!"),
			{Role: "assistant", Content: Text("Moving now."), ToolCalls: []ToolCall{toolCall("c", "move", `{"from": "g1", "to": "f3"}`)}},
			{Role: "tool", ToolCallID: "c", Content: Text("done")},
		}, r: RenderOptions{Tools: weatherTools}},
		{name: "reasoning", messages: thinking, r: RenderOptions{AddGenerationPrompt: true}},
		{name: "reasoning, last turn", messages: append(append([]Message{}, thinking...), Message{Role: "assistant", Content: Text("8"), ReasoningContent: ptr("\n4 plus 4 is 8.\n")})},
		{name: "thinking off", messages: thinking, r: RenderOptions{AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}}},
		{name: "thinking on", messages: thinking, r: RenderOptions{AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": true}}},
		{name: "escaping", messages: []Message{
			system("Quotes \" ' and backslash \\ and tab\t."),
			user("  Unicode: naïve café 日本語 🎲🏳️‍🌈, line\nbreaks\r\n, {{ not jinja }} {% raw %}  "),
			{Role: "assistant", Content: Text("ok"), ToolCalls: []ToolCall{toolCall("e", "get_weather", `{"city": "Köln \"quoted\"\n\tnew\\line \b\f \u2028\u2029 \u0001 😀", "when": {"day": "today"}}`)}},
			{Role: "tool", ToolCallID: "e", Content: Text("<tool_response>x</tool_response>")},
		}, r: RenderOptions{Tools: weatherTools}},
		{name: "content parts", messages: partsTurns, r: RenderOptions{AddGenerationPrompt: true}, models: []string{"gemma3"}},
		// Templates written for text: Qwen3's and DeepSeek V3's add the list
		// to a string, a TypeError in Python; Llama 3.1's trims its repr.
		// transformers.js's engine has no such errors and trims no list.
		{name: "content parts, text templates", messages: partsTurns, r: RenderOptions{AddGenerationPrompt: true},
			models: []string{"qwen3", "llama3_1", "deepseek_v3"}, pythonOnly: true},
		{name: "python methods", template: pythonismsTemplate, messages: toolTurns, r: RenderOptions{Tools: weatherTools}},
		// transformers.js prints JavaScript's true and false.
		{name: "printed booleans", template: `{{ true }} {{ messages[0].content is string }} {{ add_generation_prompt }}`,
			messages: toolTurns[:1], models: []string{"qwen3"}, pythonOnly: true},
		{name: "clock and indent", template: clockTemplate, messages: toolTurns[:3], r: RenderOptions{Tools: weatherTools}},
	}
}

func (c parityCase) modelList() []string {
	if c.models != nil {
		return c.models
	}
	return parityModels
}

// tokenizersDir is where scripts/fetch-tokenizers.sh puts its downloads.
func tokenizersDir(t testing.TB) string {
	if d := os.Getenv("ROLLFLEET_TOKENIZERS"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(t), ".cache", "tokenizers")
}

func repoRoot(t testing.TB) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// referenceCase is a case as testdata/reference.cjs reads it.
type referenceCase struct {
	Model               string            `json:"model"`
	Messages            json.RawMessage   `json:"messages"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Tools               []json.RawMessage `json:"tools,omitempty"`
	Documents           []json.RawMessage `json:"documents,omitempty"`
	Kwargs              map[string]any    `json:"kwargs,omitempty"`
	ChatTemplate        string            `json:"chat_template,omitempty"`
}

// referenceMessages is what vLLM gives the template: tool call arguments
// parsed into objects unless the template keeps strings.
func referenceMessages(t *testing.T, msgs []Message, keepStrings bool) json.RawMessage {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		if keepStrings || m.ToolCalls == nil {
			continue
		}
		out[i].ToolCalls = make([]ToolCall, len(m.ToolCalls))
		for j, tc := range m.ToolCalls {
			var s string
			if err := json.Unmarshal(tc.Function.Arguments, &s); err != nil {
				t.Fatal(err)
			}
			tc.Function.Arguments = json.RawMessage(s)
			out[i].ToolCalls[j] = tc
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type rendered struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// referenceImpl is an implementation the renderings are held to.
type referenceImpl struct {
	name   string
	script string // in testdata/, reading cases on stdin, writing renderings
	// command runs the script, or tells why it cannot run here.
	command func(ctx context.Context, dir, script string) (*exec.Cmd, error)
}

var references = []referenceImpl{
	{name: "transformers.js", script: "reference.cjs", command: func(ctx context.Context, dir, script string) (*exec.Cmd, error) {
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, err
		}
		nodeDir := filepath.Join(dir, "node")
		if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@huggingface", "jinja")); err != nil {
			return nil, err
		}
		return exec.CommandContext(ctx, node, script, nodeDir), nil
	}},
	{name: "jinja2", script: "reference_jinja2.py", command: func(ctx context.Context, dir, script string) (*exec.Cmd, error) {
		python, err := exec.LookPath("python3")
		if err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, python, "-c", "import jinja2").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("python3 has no jinja2 (Debian: apt-get install python3-jinja2): %v: %s", err, out)
		}
		return exec.CommandContext(ctx, python, script), nil
	}},
}

// render renders the cases with the reference, or reads the renderings of
// the same cases, templates and script from .cache/.
func (ref referenceImpl) render(t *testing.T, dir string, cases []referenceCase) []rendered {
	models := map[string]string{}
	h := sha256.New()
	script := filepath.Join("testdata", ref.script)
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	h.Write(src)
	for _, m := range parityModels {
		models[m] = filepath.Join(dir, m)
		cfg, err := os.ReadFile(filepath.Join(dir, m, "tokenizer_config.json"))
		if err != nil {
			t.Skipf("%v: run scripts/fetch-tokenizers.sh", err)
		}
		h.Write(cfg)
	}
	input, err := json.Marshal(map[string]any{"now": referenceNow.Format(time.RFC3339), "models": models, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	h.Write(input)
	cache := filepath.Join(repoRoot(t), ".cache", "hftemplate", ref.name+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".json")
	out, err := os.ReadFile(cache)
	if err != nil {
		cmd, err := ref.command(t.Context(), dir, script)
		if err != nil {
			t.Skipf("no cached renderings of %s and it cannot run (%v): run scripts/fetch-tokenizers.sh", ref.name, err)
		}
		cmd.Env = append(os.Environ(), "TZ=UTC")
		cmd.Stdin = bytes.NewReader(input)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if out, err = cmd.Output(); err != nil {
			t.Fatalf("%s: %v\n%s", ref.name, err, stderr.String())
		}
		if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
			t.Fatal(err)
		}
		// Renderings of earlier cases or templates are not read again.
		stale, _ := filepath.Glob(filepath.Join(filepath.Dir(cache), ref.name+"-*.json"))
		for _, f := range stale {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(cache, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var res []rendered
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s output: %v", ref.name, err)
	}
	if len(res) != len(cases) {
		t.Fatalf("%s rendered %d cases, want %d", ref.name, len(res), len(cases))
	}
	return res
}

// TestParity renders every case with every model's own template and
// holds each rendering to each reference's, byte for byte: transformers.js
// (what the issue names) and Python's Jinja2 set up as transformers sets it
// up (what vLLM runs). Where a reference's template raises, Render must
// fail too.
func TestParity(t *testing.T) {
	dir := tokenizersDir(t)
	templates := map[string]*Template{}
	for _, m := range parityModels {
		tmpl, err := Load(filepath.Join(dir, m, "tokenizer_config.json"))
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("%v: run scripts/fetch-tokenizers.sh", err)
		}
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		opts := tmpl.Options()
		opts.Now = referenceNow
		opts.KeepArgumentStrings = keepsArgumentStrings[m]
		templates[m] = tmpl.WithOptions(opts)
	}
	cases := parityCases()
	var refCases []referenceCase
	type rendering struct {
		model, name string
		text        string
		err         error
		pythonOnly  bool
	}
	var got []rendering
	for _, c := range cases {
		for _, m := range c.modelList() {
			refCases = append(refCases, referenceCase{
				Model: m, Messages: referenceMessages(t, c.messages, keepsArgumentStrings[m]),
				AddGenerationPrompt: c.r.AddGenerationPrompt, Tools: c.r.Tools, Documents: c.r.Documents,
				Kwargs: c.r.Kwargs, ChatTemplate: c.template,
			})
			tmpl := templates[m]
			if c.template != "" {
				var err error
				if tmpl, err = New(c.template, tmpl.Options()); err != nil {
					t.Fatal(err)
				}
			}
			text, err := tmpl.Render(c.messages, c.r)
			got = append(got, rendering{m, c.name, text, err, c.pythonOnly})
		}
	}
	for _, ref := range references {
		t.Run(ref.name, func(t *testing.T) {
			want := ref.render(t, dir, refCases)
			var texts, failing, mismatches, skipped int
			for i, g := range got {
				w := want[i]
				switch {
				case g.pythonOnly && ref.name != "jinja2":
					skipped++
				case w.Text == nil && g.err != nil:
					failing++
					t.Logf("%s/%s: fails in both: %v; %s", g.model, g.name, g.err, w.Error)
				case w.Text == nil:
					mismatches++
					t.Errorf("%s/%s: the reference fails (%s), Render gives %q", g.model, g.name, w.Error, g.text)
				case g.err != nil:
					mismatches++
					t.Errorf("%s/%s: %v; the reference gives %q", g.model, g.name, g.err, *w.Text)
				case g.text != *w.Text:
					mismatches++
					t.Errorf("%s/%s: differs at byte %d\n got %q\nwant %q", g.model, g.name, firstDiff(g.text, *w.Text), g.text, *w.Text)
				default:
					texts++
				}
			}
			t.Logf("%d models, %d cases: %d renderings: %d byte-equal texts, %d failing in both, %d not held to this reference, %d mismatches",
				len(parityModels), len(cases), len(got), texts, failing, skipped, mismatches)
		})
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
