package hftemplate

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzTemplate calls the string methods and filters chat templates use on
// message contents.
const fuzzTemplate = `{%- for m in messages -%}
{{ m.role }}:{{ m.content | tojson }}
{{ m.content.split('</think>')[-1].lstrip('\n') }}|{{ m.content.strip('\n') }}|{{ m.content | trim }}|{{ m.content.startswith('<') }}|{{ m.content[::-1] }}|{{ m.content | length }}
{%- if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson(indent=2) }}{% endif %}{{ '\n' }}
{% endfor -%}`

// FuzzRender: any message contents render without a panic, the same way
// twice, and tojson writes JSON that reads back as the content.
func FuzzRender(f *testing.F) {
	f.Add("Hello", "<think>\nhm\n</think>\n\nok", "why", `{"a": 1}`)
	f.Add("", "", "", "")
	f.Add("quotes \" \\ \n\t\b\f\u2028 😀", "</think>", "<think>", `"{\"x\": [1, 2.5]}"`)
	f.Add("{{ x }}{% if %}", "a\x00b", "\xff", `[`)
	templates := map[string]*Template{}
	fuzz, err := New(fuzzTemplate, Options{})
	if err != nil {
		f.Fatal(err)
	}
	templates["fuzz"] = fuzz
	dir := tokenizersDir(f)
	for _, m := range parityModels {
		if tmpl, err := Load(filepath.Join(dir, m, "tokenizer_config.json")); err == nil {
			templates[m] = tmpl.WithOptions(Options{Now: referenceNow, SpecialTokens: tmpl.Options().SpecialTokens, KeepArgumentStrings: keepsArgumentStrings[m]})
		}
	}
	f.Fuzz(func(t *testing.T, userText, assistantText, reasoning, args string) {
		msgs := []Message{
			system("Be brief."),
			user(userText),
			{Role: "assistant", Content: Text(assistantText), ReasoningContent: &reasoning,
				ToolCalls: []ToolCall{{ID: "c", Function: FunctionCall{Name: "f", Arguments: json.RawMessage(args)}}}},
			{Role: "tool", ToolCallID: "c", Content: Text(userText)},
			user(assistantText),
		}
		r := RenderOptions{AddGenerationPrompt: true, Tools: weatherTools}
		for name, tmpl := range templates {
			first, err1 := tmpl.Render(msgs, r)
			second, err2 := tmpl.Render(msgs, r)
			if first != second || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%s: two renderings differ: %q (%v), %q (%v)", name, first, err1, second, err2)
			}
			if name != "fuzz" || err1 != nil || !utf8.ValidString(userText) {
				continue
			}
			line, _, _ := strings.Cut(strings.TrimPrefix(first, "system:"), "\n")
			var back string
			if err := json.Unmarshal([]byte(line), &back); err != nil || back != "Be brief." {
				t.Fatalf("tojson wrote %q: %v", line, err)
			}
			line, _, _ = strings.Cut(first[strings.Index(first, "\nuser:")+len("\nuser:"):], "\n")
			if err := json.Unmarshal([]byte(line), &back); err != nil || back != userText {
				t.Fatalf("tojson of %q wrote %q, reads back %q: %v", userText, line, back, err)
			}
		}
	})
}
