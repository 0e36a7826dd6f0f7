package toyllm

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/rollfleet/rollfleet/chat"
)

// The stand-in's tool use, read from the rendered prompt (see template.go): when the system
// turn offers tools and the conversation's last turn is the user's, it calls the first tool
// once, with arguments derived from that user message; after a tool result it answers in text,
// quoting the result. Both are deterministic, so a tool-using episode can be tested end to end.
// When the generation prompt opens a <think> block, every reply reasons first; with
// Options.Reasoning, so does a reply that opens the block itself.

var (
	toolsOpen     = []byte("\n<tools>\n")
	toolsClose    = []byte("\n</tools>")
	toolResponse  = []byte("<tool_response>\n")
	toolRespClose = []byte("\n</tool_response>")
	replyStart    = []byte(chat.ImStart + "assistant\n")
	thinkingStart = []byte(chat.ImStart + "assistant\n" + thinkOpen)
)

// maxArgumentBytes bounds the text the stand-in copies into a tool call's argument or its answer.
const maxArgumentBytes = 64

// appendReasoning appends a plan as a reply to a prompt that opened a reasoning block: the
// reasoning's text, the close of the block, then the plan.
func appendReasoning(dst, text, plan []byte) []byte {
	thought := "I answer the question."
	switch {
	case bytes.HasPrefix(plan, []byte("<tool_call>")):
		thought = "I call a tool first."
	case bytes.Contains(text, toolResponse):
		thought = "I have the tool result."
	}
	dst = append(dst, thought...)
	dst = append(dst, thinkClose...)
	return append(dst, plan...)
}

// appendToolPlan appends a tool-using reply, or reports false when the prompt offers no tools.
func appendToolPlan(dst, text []byte) ([]byte, bool) {
	i := bytes.Index(text, toolsOpen)
	if i < 0 {
		return dst, false
	}
	j := bytes.Index(text[i:], toolsClose)
	if j < 0 {
		return dst, false
	}
	defs := text[i+len(toolsOpen) : i+j]
	lastUser := bytes.LastIndex(text, userTurn)
	if lastUser < 0 {
		return dst, false
	}
	turn := turnAt(text, lastUser)
	if k := bytes.LastIndex(turn, toolResponse); k >= 0 {
		result := turn[k+len(toolResponse):]
		if e := bytes.Index(result, toolRespClose); e >= 0 {
			result = result[:e]
		}
		dst = append(dst, "The tool returned: "...)
		return append(dst, clip(firstLine(result))...), true
	}
	line := defs
	if n := bytes.IndexByte(defs, '\n'); n >= 0 {
		line = defs[:n]
	}
	name, param, numeric, ok := firstTool(line)
	if !ok {
		return dst, false
	}
	question := clip(firstLine(turn))
	dst = append(dst, "<tool_call>\n{\"name\": "...)
	dst = strconv.AppendQuote(dst, name)
	dst = append(dst, ", \"arguments\": {"...)
	if param != "" {
		dst = append(strconv.AppendQuote(dst, param), ": "...)
		if numeric {
			v, _ := parseNum(question[firstDigit(question):])
			dst = strconv.AppendInt(dst, int64(v), 10)
		} else {
			q, _ := json.Marshal(string(question))
			dst = append(dst, q...)
		}
	}
	return append(dst, "}}\n</tool_call>"...), true
}

// firstTool reads a tool definition line: the function's name and its first parameter (the
// first required one, else the first in name order) and whether that is a number.
func firstTool(line []byte) (name, param string, numeric, ok bool) {
	var def struct {
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
				Required []string `json:"required"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if json.Unmarshal(line, &def) != nil || def.Function.Name == "" {
		return "", "", false, false
	}
	props := def.Function.Parameters.Properties
	for _, r := range def.Function.Parameters.Required {
		if _, ok := props[r]; ok {
			param = r
			break
		}
	}
	if param == "" && len(props) > 0 {
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		param = keys[0]
	}
	t := props[param].Type
	return def.Function.Name, param, t == "integer" || t == "number", true
}

// firstLine is b up to its first newline.
func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// clip bounds b to maxArgumentBytes without splitting a UTF-8 sequence.
func clip(b []byte) []byte {
	if len(b) <= maxArgumentBytes {
		return b
	}
	n := maxArgumentBytes
	for n > 0 && b[n]&0xC0 == 0x80 {
		n--
	}
	return b[:n]
}

// firstDigit is the index of b's first ASCII digit, or len(b).
func firstDigit(b []byte) int {
	for i, c := range b {
		if c >= '0' && c <= '9' {
			return i
		}
	}
	return len(b)
}
