package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The messages of this file serve the OpenAI-compatible gateway, which answers HTTP clients with
// what the LLM workers return: model information, detokenization and chat tokenization with the
// chat template's optional settings.

// ModelInfoRequest asks an LLM worker which model it serves.
type ModelInfoRequest struct {
	V uint8 `msgpack:"v"`
	// Deadline is as in GenerateRequest.
	Deadline int64 `msgpack:"dl,omitempty"`
}

// ModelInfo describes one served model as GET /v1/models lists it.
type ModelInfo struct {
	ID string `msgpack:"id" json:"id"`
	// MaxModelLen is the context window in tokens; 0 when the server does not report it.
	MaxModelLen int32 `msgpack:"ml" json:"max_model_len"`
}

// ModelInfoReply answers a ModelInfoRequest: the model the worker sends its requests to, first.
type ModelInfoReply struct {
	V      uint8       `msgpack:"v"`
	Models []ModelInfo `msgpack:"ms"`
	Error  string      `msgpack:"err,omitempty"`
	Code   string      `msgpack:"c,omitempty"`
}

// DetokenizeRequest asks an LLM worker for the text of token ids.
type DetokenizeRequest struct {
	V         uint8  `msgpack:"v"`
	EpisodeID string `msgpack:"id,omitempty"` // for endpoint stickiness
	Tokens    Tokens `msgpack:"tk"`
	// Pieces asks, besides the text, for each token's own text, as logprobs show tokens.
	Pieces bool `msgpack:"pc,omitempty"`
	// Deadline is as in GenerateRequest.
	Deadline int64 `msgpack:"dl,omitempty"`
}

// DetokenizeReply answers a DetokenizeRequest: the text of the tokens and, when asked for, one
// piece per token.
type DetokenizeReply struct {
	V      uint8    `msgpack:"v"`
	Text   string   `msgpack:"tx"`
	Pieces []string `msgpack:"pc,omitempty"`
	Error  string   `msgpack:"err,omitempty"`
	Code   string   `msgpack:"c,omitempty"`
}

// ChatTokenizeRequest asks an LLM worker to render chat messages with the model's chat template
// and tokenize them, with the template settings a plain TokenizeRequest lacks. It is answered
// with a TokenizeReply.
type ChatTokenizeRequest struct {
	V                   uint8         `msgpack:"v"`
	EpisodeID           string        `msgpack:"id,omitempty"` // for endpoint stickiness
	Messages            []ChatMessage `msgpack:"ms"`
	AddGenerationPrompt bool          `msgpack:"ag,omitempty"`
	// ContinueFinalMessage leaves the last message open, so the model continues it; it excludes
	// AddGenerationPrompt.
	ContinueFinalMessage bool `msgpack:"cf,omitempty"`
	AddSpecialTokens     bool `msgpack:"as,omitempty"`
	// ChatTemplateKwargs is a JSON object of extra template variables (such as
	// {"enable_thinking": false}), or empty.
	ChatTemplateKwargs []byte `msgpack:"kw,omitempty"`
	// Tools is the JSON array of tool definitions the template renders into the prompt (the
	// API's "tools"), or empty.
	Tools []byte `msgpack:"tl,omitempty"`
	// AfterAssistant asks for the tokens the template puts after an assistant turn that these
	// messages follow, rather than for the whole rendering: from the end-of-turn token closing
	// the assistant turn through the messages (and the generation prompt when asked for). They
	// are the same whatever the assistant wrote, so a client continuing a conversation whose
	// tokens it holds appends them to those tokens.
	AfterAssistant bool `msgpack:"aa,omitempty"`
	// Deadline is as in GenerateRequest.
	Deadline int64 `msgpack:"dl,omitempty"`
}

// Validate checks a model-info request: V == Version.
func (r *ModelInfoRequest) Validate() error { return asError(r.validate().in("ModelInfoRequest")) }

func (r *ModelInfoRequest) validate() *ValidationError { return checkVersion(r.V) }

// Validate checks a model-info reply: V == Version; a failed reply has a code; a successful one
// lists at least one model, each with a non-empty id of at most MaxIDLength bytes and
// max_model_len ≥ 0.
func (r *ModelInfoReply) Validate() error { return asError(r.validate().in("ModelInfoReply")) }

func (r *ModelInfoReply) validate() *ValidationError {
	if e := first(checkVersion(r.V), checkReplyError(r.Error, r.Code)); e != nil || r.Error != "" {
		return e
	}
	if len(r.Models) == 0 {
		return invalid("models", "must not be empty")
	}
	for i, m := range r.Models {
		field := fmt.Sprintf("models[%d]", i)
		if e := first(checkID("id", m.ID), checkNonNegative("max_model_len", m.MaxModelLen)); e != nil {
			return e.in(field)
		}
	}
	return nil
}

// Validate checks a detokenize request: V == Version; episode_id at most MaxIDLength bytes;
// token ids ≥ 0.
func (r *DetokenizeRequest) Validate() error { return asError(r.validate().in("DetokenizeRequest")) }

func (r *DetokenizeRequest) validate() *ValidationError {
	if e := first(checkVersion(r.V), checkOptionalID("episode_id", r.EpisodeID)); e != nil {
		return e
	}
	return checkTokenIDs("tokens", r.Tokens)
}

// Validate checks a detokenize reply: V == Version; a failed reply has a code.
func (r *DetokenizeReply) Validate() error { return asError(r.validate().in("DetokenizeReply")) }

func (r *DetokenizeReply) validate() *ValidationError {
	return first(checkVersion(r.V), checkReplyError(r.Error, r.Code))
}

// Validate checks a chat tokenize request: V == Version; episode_id at most MaxIDLength bytes;
// messages non-empty, each with a role; not both add_generation_prompt and
// continue_final_message; chat_template_kwargs empty or a JSON object; tools and each message's
// tool_calls empty or a JSON array.
func (r *ChatTokenizeRequest) Validate() error {
	return asError(r.validate().in("ChatTokenizeRequest"))
}

func (r *ChatTokenizeRequest) validate() *ValidationError {
	if e := first(checkVersion(r.V), checkOptionalID("episode_id", r.EpisodeID)); e != nil {
		return e
	}
	switch {
	case len(r.Messages) == 0:
		return invalid("messages", "must not be empty")
	case r.AddGenerationPrompt && r.ContinueFinalMessage:
		return invalid("continue_final_message", "must be false when add_generation_prompt is set")
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return invalid(fmt.Sprintf("messages[%d].role", i), "must not be empty")
		}
		if e := checkJSONArray(fmt.Sprintf("messages[%d].tool_calls", i), m.ToolCalls); e != nil {
			return e
		}
	}
	if e := checkJSONObject("chat_template_kwargs", r.ChatTemplateKwargs); e != nil {
		return e
	}
	return checkJSONArray("tools", r.Tools)
}

// checkJSONArray checks that b is empty or a JSON array.
func checkJSONArray(field string, b []byte) *ValidationError {
	if len(b) > 0 && (!json.Valid(b) || bytes.TrimLeft(b, " \t\r\n")[0] != '[') {
		return invalid(field, "must be empty or a JSON array, got %.64q", b)
	}
	return nil
}

// checkTokenIDs checks that every token id is ≥ 0.
func checkTokenIDs(field string, ids Tokens) *ValidationError {
	for i, id := range ids {
		if id < 0 {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "must be >= 0, got %d", id)
		}
	}
	return nil
}
