package hftemplate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/chat/hftemplate/internal/jinja"
)

// Message is one chat message as OpenAI's chat API writes it, with the
// reasoning_content vLLM adds.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string `json:"role"`
	// Content is the message's text or parts; none for an assistant
	// message that only calls tools.
	Content Content `json:"content"`
	// Name is the optional participant name.
	Name string `json:"name,omitempty"`
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ReasoningContent is an assistant message's reasoning; nil leaves it
	// undefined to the template (Qwen3's then looks for <think> in Content).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// Content is a message's content: text, a list of parts, or none (the
// zero Content, JSON null), which templates test with "is none".
type Content struct {
	text  string
	parts []Part
	kind  contentKind
}

type contentKind uint8

const (
	contentNone contentKind = iota
	contentText
	contentParts
)

// Text is text content.
func Text(s string) Content { return Content{text: s, kind: contentText} }

// Parts is content made of parts.
func Parts(parts ...Part) Content { return Content{parts: parts, kind: contentParts} }

// IsNone reports whether the content is none.
func (c Content) IsNone() bool { return c.kind == contentNone }

// MarshalJSON writes a string, a list of parts or null.
func (c Content) MarshalJSON() ([]byte, error) {
	switch c.kind {
	case contentText:
		return json.Marshal(c.text)
	case contentParts:
		return json.Marshal(c.parts)
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads a string, a list of parts or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	switch b = bytes.TrimSpace(b); {
	case bytes.Equal(b, []byte("null")):
		*c = Content{}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Text(s)
		return nil
	}
	var parts []Part
	if err := json.Unmarshal(b, &parts); err != nil {
		return fmt.Errorf("content is neither a string nor a list of parts: %w", err)
	}
	*c = Parts(parts...)
	return nil
}

// Part is one part of a message's content.
type Part struct {
	// Type is "text", "image", ...
	Type string `json:"type"`
	// Text is a text part's text.
	Text string `json:"text,omitempty"`
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	// ID is the id a tool message's ToolCallID answers.
	ID string `json:"id,omitempty"`
	// Type is "function" if empty.
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function called and its arguments.
type FunctionCall struct {
	// Name is the function's name.
	Name string `json:"name"`
	// Arguments are a JSON object, or a JSON string holding one (OpenAI's
	// form); empty means {}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// value is the message as the template sees it, keys in OpenAI's order.
func (m Message) value(keepArgumentStrings bool) (jinja.Value, error) {
	d := newDict()
	d.str("role", m.Role)
	content, err := m.Content.value()
	if err != nil {
		return content, err
	}
	d.set("content", content)
	if m.Name != "" {
		d.str("name", m.Name)
	}
	if m.ToolCalls != nil {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			if calls[i], err = tc.value(keepArgumentStrings); err != nil {
				return calls[i], fmt.Errorf("tool call %d: %w", i, err)
			}
		}
		d.set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.str("tool_call_id", m.ToolCallID)
	}
	if m.ReasoningContent != nil {
		d.str("reasoning_content", *m.ReasoningContent)
	}
	return d.v, d.err
}

func (c Content) value() (jinja.Value, error) {
	switch c.kind {
	case contentText:
		return str("content", c.text)
	case contentParts:
		parts := make([]jinja.Value, len(c.parts))
		for i, p := range c.parts {
			d := newDict()
			d.str("type", p.Type)
			if p.Text != "" || p.Type == "text" {
				d.str("text", p.Text)
			}
			if d.err != nil {
				return d.v, fmt.Errorf("part %d: %w", i, d.err)
			}
			parts[i] = d.v
		}
		return jinja.NewList(parts), nil
	}
	return jinja.None(), nil
}

func (tc ToolCall) value(keepArgumentStrings bool) (jinja.Value, error) {
	d := newDict()
	if tc.ID != "" {
		d.str("id", tc.ID)
	}
	typ := tc.Type
	if typ == "" {
		typ = "function"
	}
	d.str("type", typ)
	fn := newDict()
	fn.str("name", tc.Function.Name)
	args, err := arguments(tc.Function.Arguments, keepArgumentStrings)
	if err != nil {
		return args, err
	}
	fn.set("arguments", args)
	if fn.err != nil {
		return fn.v, fmt.Errorf("function: %w", fn.err)
	}
	d.set("function", fn.v)
	return d.v, d.err
}

// dict builds a template mapping, keeping the first error of its strings.
type dict struct {
	v   jinja.Value
	err error
}

func newDict() *dict { return &dict{v: jinja.NewDict()} }

func (d *dict) set(key string, v jinja.Value) { d.v.AsDict().Set(key, v) }

// str sets a string, which must be UTF-8 as Python's strings are.
func (d *dict) str(key, s string) {
	v, err := str(key, s)
	if err != nil {
		d.err = cmp.Or(d.err, err)
		return
	}
	d.set(key, v)
}

// arguments follows vLLM: empty arguments are {}, and a JSON string is
// parsed into the object it holds unless the template wants text.
func arguments(raw json.RawMessage, keepString bool) (jinja.Value, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		if keepString {
			return jinja.NewString("{}"), nil
		}
		return jinja.NewDict(), nil
	}
	v, err := fromJSON(raw)
	if err != nil {
		return v, fmt.Errorf("arguments: %w", err)
	}
	if !v.IsString() || keepString {
		return v, nil
	}
	if v.AsString() == "" {
		return jinja.NewDict(), nil
	}
	parsed, err := fromJSON([]byte(v.AsString()))
	if err != nil {
		return v, fmt.Errorf("arguments string: %w", err)
	}
	return parsed, nil
}

func str(what, s string) (jinja.Value, error) {
	if !utf8.ValidString(s) {
		return jinja.Value{}, fmt.Errorf("%w: %s is not valid UTF-8", ErrBadInput, what)
	}
	return jinja.NewString(s), nil
}

// fromJSON decodes one JSON value into a template value whose mappings
// keep their keys' order and whose numbers stay integers when written as
// integers, as Python's json module reads them.
func fromJSON(b []byte) (jinja.Value, error) {
	if !utf8.Valid(b) {
		return jinja.Value{}, fmt.Errorf("%w: JSON is not valid UTF-8", ErrBadInput)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return v, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return v, fmt.Errorf("%w: data after the JSON value", ErrBadInput)
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			var items []jinja.Value
			for dec.More() {
				item, err := decodeValue(dec)
				if err != nil {
					return item, err
				}
				items = append(items, item)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		v := jinja.NewDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return v, err
			}
			item, err := decodeValue(dec)
			if err != nil {
				return v, err
			}
			v.AsDict().Set(k.(string), item)
		}
		_, err := dec.Token()
		return v, err
	default:
		return jinja.FromGoValue(t), nil
	}
}
