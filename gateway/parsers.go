package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The parsers of model output, as vLLM's --tool-call-parser and --reasoning-parser run them on
// a chat completion: reasoning is split off first, then tool calls are read from the rest.

// Tool-call parsers (Options.ToolCallParser).
const (
	// ToolParserHermes reads Hermes/Qwen tool calls: <tool_call>{"name", "arguments"}</tool_call>.
	ToolParserHermes = "hermes"
	// ToolParserNone leaves tool-call text in the content; requests offering tools with
	// tool_choice "auto" are refused, as vLLM refuses them without --enable-auto-tool-choice.
	ToolParserNone = "none"
)

// Reasoning parsers (Options.ReasoningParser).
const (
	// ReasoningParserQwen3 splits a <think>…</think> block off the start of the output.
	ReasoningParserQwen3 = "qwen3"
	// ReasoningParserNone leaves reasoning in the content.
	ReasoningParserNone = "none"
)

const (
	toolCallStart = "<tool_call>"
	toolCallEnd   = "</tool_call>"
	thinkStart    = "<think>"
	thinkEnd      = "</think>"
)

// parsedCall is one tool call read from the model's text.
type parsedCall struct {
	name string
	// arguments is the arguments' JSON text exactly as the model wrote it, so that a client
	// sending it back has the template render the same bytes.
	arguments string
}

// parseHermesToolCalls reads Hermes-style tool calls from text. The content is the text before
// the first call, without the one newline a Qwen template puts between content and calls, and
// empty when only whitespace. ok is false when text has no call or a call is not a JSON object
// with a name: then vLLM's parser returns the whole text as content, and so does this.
func parseHermesToolCalls(text string) (content string, calls []parsedCall, ok bool) {
	first := strings.Index(text, toolCallStart)
	if first < 0 {
		return text, nil, false
	}
	for rest := text[first:]; ; {
		i := strings.Index(rest, toolCallStart)
		if i < 0 {
			break
		}
		rest = rest[i+len(toolCallStart):]
		body := rest
		if j := strings.Index(rest, toolCallEnd); j >= 0 {
			body, rest = rest[:j], rest[j+len(toolCallEnd):]
		} else {
			rest = ""
		}
		c, err := decodeToolCall(body)
		if err != nil {
			return text, nil, false
		}
		calls = append(calls, c)
	}
	content = strings.TrimSuffix(text[:first], "\n")
	if strings.TrimSpace(content) == "" {
		content = ""
	}
	return content, calls, true
}

// decodeToolCall decodes the JSON object of one tool call: {"name": …, "arguments": {…}}.
func decodeToolCall(body string) (parsedCall, error) {
	var raw struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return parsedCall{}, fmt.Errorf("tool call: %w", err)
	}
	if dec.More() || raw.Name == nil || *raw.Name == "" {
		return parsedCall{}, fmt.Errorf("tool call: not one object with a name")
	}
	args := string(bytes.TrimSpace(raw.Arguments))
	switch {
	case args == "" || args == "null":
		args = "{}"
	case args[0] == '"':
		// Arguments given as a JSON string hold the arguments' text.
		var s string
		if err := json.Unmarshal(raw.Arguments, &s); err != nil {
			return parsedCall{}, fmt.Errorf("tool call arguments: %w", err)
		}
		args = s
	}
	return parsedCall{name: *raw.Name, arguments: args}, nil
}

// splitQwen3Reasoning splits reasoning off text as vLLM's qwen3 reasoning parser does: an
// optional leading <think>, the reasoning up to </think>, and the content after it (possibly
// empty). Without </think> there is no reasoning and the whole text is content.
func splitQwen3Reasoning(text string) (reasoning, content string, ok bool) {
	body := text
	if _, after, found := strings.Cut(text, thinkStart); found {
		body = after
	}
	reasoning, content, found := strings.Cut(body, thinkEnd)
	if !found {
		return "", text, false
	}
	return reasoning, content, true
}
