package toyllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// The stand-in's chat template is ChatML with the tool and reasoning parts of Qwen3's template
// (a Hermes-style tool format):
//
//   - tools render into a system turn (the first message's system text, a blank line, then
//     "# Tools" and one JSON line per tool between <tools> and </tools>);
//   - an assistant turn with reasoning renders "<think>\n" + reasoning + "\n</think>\n\n"
//     before its content (newlines around both trimmed, as Qwen3's template does; reasoning
//     left in the content before a </think> is read out of it, as Qwen3's template does), and each
//     tool call as "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>", after a newline
//     unless it opens an empty turn;
//   - consecutive "tool" messages render as one user turn of <tool_response> blocks;
//   - with chat_template_kwargs {"enable_thinking": true} the generation prompt ends with
//     "<think>\n", so the model reasons first (as Qwen3 thinking models do). The stand-in does
//     not think by default.
//
// Without tools, tool messages or reasoning the text is exactly chat.Render's.

// toolsHeader and toolsFooter frame the tool definitions in the system turn.
const (
	toolsHeader = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	toolsFooter = "\n</tools>\n\nFor each function call, return a json object with function name and arguments " +
		"within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
	thinkStart = "<think>"
	thinkEnd   = "</think>"
	thinkOpen  = thinkStart + "\n"
	thinkClose = "\n" + thinkEnd + "\n\n"
)

// toolCall is one tool call of an assistant message.
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a JSON string holding the arguments' JSON text, or (as some
		// clients send it) the arguments object itself.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// argumentsText is the call's arguments as the template writes them: a string's text as it is,
// an object as its JSON.
func (c *toolCall) argumentsText() (string, error) {
	a := bytes.TrimSpace(c.Function.Arguments)
	switch {
	case len(a) == 0 || string(a) == "null":
		return "{}", nil
	case a[0] == '"':
		var s string
		if err := json.Unmarshal(a, &s); err != nil {
			return "", fmt.Errorf("tool call arguments: %w", err)
		}
		return s, nil
	}
	return string(a), nil
}

// templateKwargs are the chat_template_kwargs the stand-in's template reads.
type templateKwargs struct {
	EnableThinking bool `json:"enable_thinking"`
}

// chatInput is what the template renders: the messages, the tools and the template settings.
type chatInput struct {
	msgs                []chatMessage
	tools               json.RawMessage
	kwargs              json.RawMessage
	addGenerationPrompt bool
	continueFinal       bool
}

// renderChat renders a conversation with the stand-in's chat template. With continueFinal the
// last message is left open, so the model continues it.
func renderChat(in chatInput) (string, error) {
	msgs := in.msgs
	switch {
	case len(msgs) == 0:
		return "", vllmapi.BadRequest("messages must not be empty")
	case in.addGenerationPrompt && in.continueFinal:
		return "", vllmapi.BadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	var kw templateKwargs
	if k := bytes.TrimSpace(in.kwargs); len(k) > 0 && string(k) != "null" {
		if err := json.Unmarshal(k, &kw); err != nil {
			return "", vllmapi.BadRequest("chat_template_kwargs: %v", err)
		}
	}
	tools, err := toolLines(in.tools)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString(chat.ImStart + "system\n")
		if msgs[0].Role == "system" {
			b.WriteString(msgs[0].Content + "\n\n")
			msgs = msgs[1:]
		}
		b.WriteString(toolsHeader)
		for _, t := range tools {
			b.WriteString("\n" + t)
		}
		b.WriteString(toolsFooter + chat.ImEnd + "\n")
	}
	for i, m := range msgs {
		if m.Role == "" {
			return "", vllmapi.BadRequest("messages[%d]: role is required", i)
		}
		switch m.Role {
		case "assistant":
			if err := renderAssistant(&b, &m); err != nil {
				return "", vllmapi.BadRequest("messages[%d]: %v", i, err)
			}
		case "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString(chat.ImStart + "user")
			}
			b.WriteString("\n<tool_response>\n")
			b.WriteString(m.Content)
			b.WriteString("\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.WriteString(chat.ImEnd + "\n")
			}
		default:
			b.WriteString(chat.ImStart)
			b.WriteString(m.Role)
			b.WriteByte('\n')
			b.WriteString(m.Content)
			b.WriteString(chat.ImEnd + "\n")
		}
	}
	if in.addGenerationPrompt {
		b.WriteString(chat.ImStart + "assistant\n")
		if kw.EnableThinking {
			b.WriteString(thinkOpen)
		}
	}
	text := b.String()
	if in.continueFinal {
		text = strings.TrimSuffix(text, chat.ImEnd+"\n")
	}
	return text, nil
}

// renderAssistant renders an assistant turn with its reasoning and tool calls.
func renderAssistant(b *strings.Builder, m *chatMessage) error {
	content, reasoning := m.Content, m.Reasoning
	think := reasoning != ""
	if !think && strings.Contains(content, thinkEnd) {
		// Reasoning left in the content, as Qwen3's template reads it: the text before the
		// first </think> (after any <think>), and the content after the last one.
		first, _, _ := strings.Cut(content, thinkEnd)
		reasoning = strings.TrimLeft(lastPart(strings.TrimRight(first, "\n"), thinkStart), "\n")
		content = lastPart(content, thinkEnd)
		think = true
	}
	b.WriteString(chat.ImStart + "assistant\n")
	if think {
		content = strings.TrimLeft(content, "\n")
		b.WriteString(thinkOpen + strings.Trim(reasoning, "\n") + thinkClose)
	}
	b.WriteString(content)
	for i := range m.toolCalls {
		c := &m.toolCalls[i]
		if c.Function.Name == "" {
			return errors.New("tool call without a function name")
		}
		args, err := c.argumentsText()
		if err != nil {
			return err
		}
		if i > 0 || content != "" {
			b.WriteByte('\n')
		}
		name, _ := json.Marshal(c.Function.Name)
		b.WriteString("<tool_call>\n{\"name\": " + string(name) + ", \"arguments\": " + args + "}\n</tool_call>")
	}
	b.WriteString(chat.ImEnd + "\n")
	return nil
}

// lastPart is s after the last sep, or s without one.
func lastPart(s, sep string) string {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[i+len(sep):]
	}
	return s
}

// toolLines returns each tool definition as one line of compact JSON.
func toolLines(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, vllmapi.BadRequest("tools must be a list of tool definitions")
	}
	lines := make([]string, len(tools))
	for i, t := range tools {
		var def struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &def); err != nil || def.Function == nil || def.Function.Name == "" {
			return nil, vllmapi.BadRequest("tools[%d]: a tool must be an object with a function and its name", i)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, t); err != nil {
			return nil, vllmapi.BadRequest("tools[%d]: %v", i, err)
		}
		lines[i] = c.String()
	}
	return lines, nil
}
