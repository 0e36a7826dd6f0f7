// Package hftemplate renders Hugging Face chat templates (the Jinja
// chat_template of a model's tokenizer_config.json) as transformers'
// apply_chat_template(..., tokenize=False) does, byte for byte, so that a
// prompt built here tokenizes to the ids vLLM builds from the same messages.
//
// The template context is what transformers passes: messages,
// add_generation_prompt, tools, documents, the tokenizer's special tokens
// (bos_token, eos_token, ...), the chat_template_kwargs, and the globals
// raise_exception and strftime_now. Mappings keep their keys' order, as
// Python dicts do, so tojson writes tools in the order they were given.
//
// # Engine
//
// The Jinja engine is a copy of github.com/ardanlabs/jinja v1.8.0 in
// internal/jinja. Of the Go Jinja implementations it is the one that
// renders the Qwen3, Llama 3.1, Gemma 3 and DeepSeek V3 templates: pongo2
// (v6) fails to lex all four (no "\n" escapes or newlines inside string
// literals), gonja (v2.9) fails to parse Gemma 3's and writes tojson
// without Python's spaces. ardanlabs/jinja renders all four byte-equal to
// the references except for two things, which the copy changes (its
// filters are fixed when the package loads, out of an API's reach; NOTICE
// lists the changes): its tojson followed Go's encoding/json (\b, \f,
// U+2028 and U+2029 escaped, indent in Go's map order and spacing), now
// Python's json.dumps (internal/jinja/pyjson.go); and it concatenated a
// string and a list where Python raises a TypeError.
//
// The tests hold renderings to two references: transformers.js
// (@lenml/tokenizers' apply_chat_template with @huggingface/jinja) and
// Python's Jinja2 in the environment transformers sets up, which is what
// vLLM runs.
package hftemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/chat/hftemplate/internal/jinja"
)

var (
	// ErrNoTemplate means a tokenizer config has no chat template.
	ErrNoTemplate = errors.New("no chat template")
	// ErrBadConfig means a tokenizer config's chat_template or a special
	// token has a shape Hugging Face does not write.
	ErrBadConfig = errors.New("bad tokenizer config")
	// ErrParse means the template is not Jinja this package can compile.
	ErrParse = errors.New("template does not parse")
	// ErrRaised means the template rejected the conversation through
	// raise_exception (for example Gemma 3's "roles must alternate").
	ErrRaised = errors.New("template raised an exception")
	// ErrRender means rendering failed for another reason.
	ErrRender = errors.New("template render failed")
	// ErrBadInput means a message, tool, document or kwarg cannot be given
	// to a template: invalid JSON or UTF-8, or a kwarg that names one of
	// the template's own variables.
	ErrBadInput = errors.New("bad chat template input")
)

// Options are what a template reads besides the conversation.
type Options struct {
	// SpecialTokens are the tokenizer's special token strings by
	// tokenizer_config.json key: bos_token, eos_token, unk_token,
	// pad_token, sep_token, cls_token, mask_token.
	SpecialTokens map[string]string
	// AdditionalSpecialTokens is additional_special_tokens.
	AdditionalSpecialTokens []string
	// Now is the time strftime_now formats (Llama 3.1's template writes
	// today's date); the zero Now means the clock at each Render.
	Now time.Time
	// KeepArgumentStrings passes tool calls' arguments to the template as
	// given. By default arguments written as a JSON string are parsed into
	// a mapping first, as vLLM does before rendering, which templates such
	// as Qwen3's expect (they apply tojson); DeepSeek V3's template
	// concatenates them as text and needs this set.
	KeepArgumentStrings bool
}

// specialTokenKeys are the special tokens transformers puts in a chat
// template's context.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	main    *jinja.Template
	toolUse *jinja.Template // the "tool_use" template of a named set, if any
	opts    Options
}

// New compiles a chat template's source.
func New(source string, opts Options) (*Template, error) {
	t, err := compile(source)
	if err != nil {
		return nil, err
	}
	return &Template{main: t, opts: opts}, nil
}

func compile(source string) (*jinja.Template, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	return t, nil
}

// Load reads a tokenizer directory's tokenizer_config.json (the path of
// the file) as FromConfig does. A chat_template.jinja beside it, where
// transformers saves templates now, takes the place of the config's
// chat_template.
func Load(configPath string) (*Template, error) {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("hftemplate: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("hftemplate: %s: %w: %w", configPath, ErrBadConfig, err)
	}
	jinjaFile := filepath.Join(filepath.Dir(configPath), "chat_template.jinja")
	if src, err := os.ReadFile(jinjaFile); err == nil {
		cfg["chat_template"] = string(src)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("hftemplate: %w", err)
	}
	t, err := FromConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hftemplate: %s: %w", configPath, err)
	}
	return t, nil
}

// FromConfig builds a template from a decoded tokenizer_config.json: its
// chat_template (a string, or a list of {name, template} whose "default"
// is used and whose "tool_use", if present, renders conversations given
// tools, as transformers chooses) and its special tokens (strings or
// {"content": ...} objects). Now and KeepArgumentStrings are left zero.
func FromConfig(cfg map[string]any) (*Template, error) {
	var opts Options
	for _, k := range specialTokenKeys {
		switch v := cfg[k].(type) {
		case nil:
		case string:
			opts.SpecialTokens = setToken(opts.SpecialTokens, k, v)
		case map[string]any:
			s, ok := v["content"].(string)
			if !ok {
				return nil, fmt.Errorf("%w: %s has no content string", ErrBadConfig, k)
			}
			opts.SpecialTokens = setToken(opts.SpecialTokens, k, s)
		default:
			return nil, fmt.Errorf("%w: %s is a %T", ErrBadConfig, k, v)
		}
	}
	if extra, ok := cfg["additional_special_tokens"].([]any); ok {
		for _, e := range extra {
			if s, ok := e.(string); ok {
				opts.AdditionalSpecialTokens = append(opts.AdditionalSpecialTokens, s)
			}
		}
	}
	switch ct := cfg["chat_template"].(type) {
	case nil:
		return nil, ErrNoTemplate
	case string:
		return New(ct, opts)
	case []any:
		named := make(map[string]string, len(ct))
		for i, e := range ct {
			m, _ := e.(map[string]any)
			name, ok1 := m["name"].(string)
			src, ok2 := m["template"].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: chat_template[%d] is not {name, template}", ErrBadConfig, i)
			}
			named[name] = src
		}
		src, ok := named["default"]
		if !ok {
			return nil, fmt.Errorf("%w: the named templates (%v) have no default", ErrNoTemplate, slices.Sorted(maps.Keys(named)))
		}
		t, err := New(src, opts)
		if err != nil {
			return nil, fmt.Errorf("default: %w", err)
		}
		if src, ok := named["tool_use"]; ok {
			if t.toolUse, err = compile(src); err != nil {
				return nil, fmt.Errorf("tool_use: %w", err)
			}
		}
		return t, nil
	default:
		return nil, fmt.Errorf("%w: chat_template is a %T", ErrBadConfig, ct)
	}
}

func setToken(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = make(map[string]string)
	}
	m[k] = v
	return m
}

// WithOptions returns the template with other options, sharing the
// compiled template.
func (t *Template) WithOptions(opts Options) *Template {
	c := *t
	c.opts = opts
	return &c
}

// Options returns the template's options.
func (t *Template) Options() Options { return t.opts }

// HasToolUse reports whether the config named a separate "tool_use"
// template, which Render uses when tools are given.
func (t *Template) HasToolUse() bool { return t.toolUse != nil }

// RenderOptions are one rendering's inputs besides the messages.
type RenderOptions struct {
	// AddGenerationPrompt ends the prompt with the assistant's turn header.
	AddGenerationPrompt bool
	// Tools are OpenAI function tools ({"type": "function", "function":
	// {...}}) as JSON; nil gives the template none.
	Tools []json.RawMessage
	// Documents are retrieval documents as JSON objects; nil gives none.
	Documents []json.RawMessage
	// Kwargs are the request's chat_template_kwargs (enable_thinking, ...);
	// each value is anything encoding/json can write.
	Kwargs map[string]any
}

// reserved are the context variables that kwargs may not replace
// (transformers refuses them as duplicate arguments).
var reserved = []string{"messages", "tools", "documents", "add_generation_prompt"}

// Render renders a conversation.
func (t *Template) Render(messages []Message, r RenderOptions) (string, error) {
	ctx, err := t.context(messages, r)
	if err != nil {
		return "", fmt.Errorf("hftemplate: %w", err)
	}
	tmpl := t.main
	if r.Tools != nil && t.toolUse != nil {
		tmpl = t.toolUse
	}
	out, err := tmpl.RenderValues(ctx)
	if err != nil {
		var raised raisedError
		if errors.As(err, &raised) {
			return "", fmt.Errorf("hftemplate: %w: %s", ErrRaised, raised.msg)
		}
		return "", fmt.Errorf("hftemplate: %w: %w", ErrRender, err)
	}
	return out, nil
}

func (t *Template) context(messages []Message, r RenderOptions) (map[string]jinja.Value, error) {
	ctx := make(map[string]jinja.Value, 8+len(t.opts.SpecialTokens)+len(r.Kwargs))
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := m.value(t.opts.KeepArgumentStrings)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		msgs[i] = v
	}
	ctx["messages"] = jinja.NewList(msgs)
	ctx["add_generation_prompt"] = jinja.NewBool(r.AddGenerationPrompt)
	var err error
	if ctx["tools"], err = rawList("tool", r.Tools); err != nil {
		return nil, err
	}
	if ctx["documents"], err = rawList("document", r.Documents); err != nil {
		return nil, err
	}
	for k, v := range t.opts.SpecialTokens {
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("%w: %s is not UTF-8", ErrBadInput, k)
		}
		ctx[k] = jinja.NewString(v)
	}
	if t.opts.AdditionalSpecialTokens != nil {
		extra := make([]jinja.Value, len(t.opts.AdditionalSpecialTokens))
		for i, s := range t.opts.AdditionalSpecialTokens {
			extra[i] = jinja.NewString(s)
		}
		ctx["additional_special_tokens"] = jinja.NewList(extra)
	}
	ctx["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	now := t.opts.Now
	ctx["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		at := now
		if at.IsZero() {
			at = time.Now()
		}
		return jinja.NewString(strftime(at, args[0].AsString())), nil
	})
	for k, v := range r.Kwargs {
		if slices.Contains(reserved, k) {
			return nil, fmt.Errorf("%w: chat_template_kwargs may not set %q", ErrBadInput, k)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: chat_template_kwargs %q: %w", ErrBadInput, k, err)
		}
		if ctx[k], err = fromJSON(b); err != nil {
			return nil, fmt.Errorf("chat_template_kwargs %q: %w", k, err)
		}
	}
	return ctx, nil
}

func rawList(what string, raws []json.RawMessage) (jinja.Value, error) {
	if raws == nil {
		return jinja.None(), nil
	}
	items := make([]jinja.Value, len(raws))
	for i, raw := range raws {
		v, err := fromJSON(raw)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("%s %d: %w", what, i, err)
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

// raisedError is raise_exception's error, told apart from the engine's.
type raisedError struct{ msg string }

func (e raisedError) Error() string { return e.msg }

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 && args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Undefined(), raisedError{msg}
}
