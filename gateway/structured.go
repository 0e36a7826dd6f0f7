package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// Structured output and forced tools are passed to the model server's guided decoding, as vLLM's
// OpenAI server does: response_format json_schema and json_object, the guided_* and
// structured_outputs extensions become vLLM's structured_outputs object; tool_choice naming a
// function constrains the reply to that function's parameters schema, and "required" to a JSON
// list of {"name", "parameters"} objects, one of the offered tools each; the reply is then read
// as those tool calls instead of by the tool-call parser.

// guided is what a chat request asks of guided decoding and how its reply is read.
type guided struct {
	// outputs is vLLM's structured_outputs object; nil when the reply is free.
	outputs json.RawMessage
	// tool is the function a named tool_choice forces: the reply is its arguments.
	tool string
	// anyTool is tool_choice "required": the reply is a JSON list of calls.
	anyTool bool
}

// structuredOutputs is the structured_outputs object the request's response_format or vLLM's
// extensions ask for, or nil; asking in two ways is refused.
func structuredOutputs(f *samplingFields) (json.RawMessage, error) {
	var found []json.RawMessage
	add := func(key string, v json.RawMessage) {
		if v = bytes.TrimSpace(v); len(v) > 0 && string(v) != "null" {
			found = append(found, json.RawMessage(fmt.Sprintf(`{%q:%s}`, key, v)))
		}
	}
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			add("json_object", json.RawMessage("true"))
		case "json_schema":
			schema := rf.Schema
			if rf.JSONSchema != nil {
				schema = rf.JSONSchema.Schema
			}
			if len(bytes.TrimSpace(schema)) == 0 {
				return nil, vllmapi.BadRequest("response_format json_schema needs a schema")
			}
			add("json", schema)
		default:
			return nil, vllmapi.BadRequest("response_format type must be text, json_object or json_schema, got %.32q", rf.Type)
		}
	}
	add("json", f.GuidedJSON)
	add("regex", f.GuidedRegex)
	add("choice", f.GuidedChoice)
	add("grammar", f.GuidedGrammar)
	if so := bytes.TrimSpace(f.StructuredOutputs); len(so) > 0 && string(so) != "null" {
		found = append(found, so)
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(found[0], &m); err != nil || m == nil {
			return nil, vllmapi.BadRequest("structured_outputs must be a JSON object")
		}
		return found[0], nil
	}
	return nil, vllmapi.BadRequest("ask for one structured output at a time (response_format, structured_outputs or a guided_* field)")
}

// forcedTools reads a tool_choice that forces a call: a named function (the OpenAI shape
// {"type":"function","function":{"name"}} or the Responses shape {"type":"function","name"})
// or "required". It reports false for "auto", "none" and an absent choice.
func forcedTools(tools []byte, choice json.RawMessage) (guided, bool, error) {
	choice = bytes.TrimSpace(choice)
	if len(choice) == 0 || string(choice) == "null" {
		return guided{}, false, nil
	}
	var defs []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if len(tools) > 0 {
		if err := json.Unmarshal(tools, &defs); err != nil {
			return guided{}, false, vllmapi.BadRequest("tools: %v", err)
		}
	}
	params := func(p json.RawMessage) json.RawMessage {
		if p = bytes.TrimSpace(p); len(p) == 0 || string(p) == "null" {
			return json.RawMessage(`{"type":"object","properties":{}}`)
		}
		return p
	}
	var word string
	if json.Unmarshal(choice, &word) == nil {
		if word != "required" {
			return guided{}, false, nil
		}
		if len(defs) == 0 {
			return guided{}, false, vllmapi.BadRequest("tool_choice \"required\" needs tools")
		}
		var alts []json.RawMessage
		for _, d := range defs {
			name, _ := json.Marshal(d.Function.Name)
			alts = append(alts, json.RawMessage(fmt.Sprintf(
				`{"type":"object","properties":{"name":{"type":"string","enum":[%s]},"parameters":%s},"required":["name","parameters"]}`,
				name, params(d.Function.Parameters))))
		}
		anyOf, _ := json.Marshal(alts)
		return guided{outputs: json.RawMessage(fmt.Sprintf(`{"json":{"type":"array","minItems":1,"items":{"anyOf":%s}}}`, anyOf)), anyTool: true}, true, nil
	}
	var named struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(choice, &named); err != nil || named.Type != "function" {
		return guided{}, false, vllmapi.BadRequest("tool_choice must be \"auto\", \"none\", \"required\" or a function")
	}
	name := named.Function.Name
	if name == "" {
		name = named.Name
	}
	for _, d := range defs {
		if d.Function.Name == name {
			return guided{outputs: json.RawMessage(fmt.Sprintf(`{"json":%s}`, params(d.Function.Parameters))), tool: name}, true, nil
		}
	}
	return guided{}, false, vllmapi.BadRequest("tool_choice names the function %.64q, which is not among the tools", name)
}

// forcedCall is one tool call read out of a reply guided decoding produced.
type forcedCall struct {
	name, arguments string
}

// calls reads a forced reply as tool calls: the arguments of the named function, or the list
// of {"name", "parameters"} that "required" asks for.
func (g guided) calls(text string) ([]forcedCall, error) {
	switch {
	case g.tool != "":
		if !json.Valid([]byte(text)) {
			return nil, fmt.Errorf("the reply to a forced call of %s is not JSON", g.tool)
		}
		return []forcedCall{{g.tool, text}}, nil
	case g.anyTool:
		var list []struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(text), &list); err != nil || len(list) == 0 {
			return nil, fmt.Errorf("the reply to tool_choice \"required\" is not a list of calls")
		}
		out := make([]forcedCall, len(list))
		for i, c := range list {
			out[i] = forcedCall{c.Name, string(c.Parameters)}
		}
		return out, nil
	}
	return nil, nil
}
