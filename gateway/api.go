package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// The request bodies of the HTTP API, with vLLM's field names and defaults. Unknown fields are
// ignored, as vLLM ignores them; fields of features the gateway cannot honour are refused with
// a 400 rather than silently dropped.

// MaxChoices bounds n, the number of samples of one call: each is a session of its own.
const MaxChoices = 128

// choices is the number of samples the call asks for.
func (f *samplingFields) choices() int {
	if f.N == nil {
		return 1
	}
	return int(*f.N)
}

// maxSessionIDLength bounds session ids, leaving room in episode ids for a segment suffix.
const maxSessionIDLength = 256

// samplingFields are the request fields both generation endpoints share.
type samplingFields struct {
	Model                  string   `json:"model"`
	Temperature            *float64 `json:"temperature"`
	TopP                   *float64 `json:"top_p"`
	TopK                   *int64   `json:"top_k"`
	MinP                   *float64 `json:"min_p"`
	Seed                   *int64   `json:"seed"`
	N                      *int64   `json:"n"`
	Stop                   stopList `json:"stop"`
	StopTokenIDs           []int64  `json:"stop_token_ids"`
	IgnoreEOS              bool     `json:"ignore_eos"`
	MinTokens              *int64   `json:"min_tokens"`
	PresencePenalty        *float64 `json:"presence_penalty"`
	FrequencyPenalty       *float64 `json:"frequency_penalty"`
	RepetitionPenalty      *float64 `json:"repetition_penalty"`
	SkipSpecialTokens      *bool    `json:"skip_special_tokens"`
	IncludeStopStrInOutput bool     `json:"include_stop_str_in_output"`
	ReturnTokensAsTokenIDs bool     `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs         bool     `json:"return_token_ids"`

	// SessionID names the session whose token trace the call extends; the X-Session-ID header
	// and extra_body.session_id are the other places it may come from.
	SessionID *string `json:"session_id"`
	// ExtraBody is read for session_id only: OpenAI clients merge their extra_body into the
	// body, so only hand-written clients send it as a member.
	ExtraBody *struct {
		SessionID *string `json:"session_id"`
	} `json:"extra_body"`

	// Stream asks for the answer as server-sent events (see streamChat).
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`

	// Features the gateway cannot honour: a request asking for one is refused.
	Echo              bool               `json:"echo"`
	BestOf            *int64             `json:"best_of"`
	UseBeamSearch     bool               `json:"use_beam_search"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	PromptLogprobs    *int64             `json:"prompt_logprobs"`
	Priority          int64              `json:"priority"`
	ResponseFormat    *responseFormat    `json:"response_format"`
	GuidedJSON        json.RawMessage    `json:"guided_json"`
	GuidedRegex       json.RawMessage    `json:"guided_regex"`
	GuidedChoice      json.RawMessage    `json:"guided_choice"`
	GuidedGrammar     json.RawMessage    `json:"guided_grammar"`
	StructuredOutputs json.RawMessage    `json:"structured_outputs"`
}

// responseFormat is the API's response_format (and, in Responses, text.format).
type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *jsonSchemaSpec `json:"json_schema"`
	// Schema is text.format's schema: the Responses API's format is flat.
	Schema json.RawMessage `json:"schema"`
}

// jsonSchemaSpec is response_format's json_schema member.
type jsonSchemaSpec struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages             []chatMessage   `json:"messages"`
	MaxTokens            *int64          `json:"max_tokens"`
	MaxCompletionTokens  *int64          `json:"max_completion_tokens"`
	Logprobs             bool            `json:"logprobs"`
	TopLogprobs          *int64          `json:"top_logprobs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	AddSpecialTokens     bool            `json:"add_special_tokens"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	ChatTemplate         *string         `json:"chat_template"`
	// Tools are rendered by the chat template; ToolChoice and ParallelToolCalls say what is
	// done with the tool calls the model writes.
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	// ReasoningEffort is passed to the chat template as the reasoning_effort variable.
	ReasoningEffort *string `json:"reasoning_effort"`
	// Metadata is the OpenAI request metadata: string values, kept on a session without an id
	// so that a finish can name it (see sessions).
	Metadata map[string]string `json:"metadata"`

	// toolsJSON is Tools checked and compacted; parseTools whether tool calls are read from
	// the reply. Set by checkTools.
	toolsJSON  []byte
	parseTools bool
	// forced is what a tool_choice forcing a call asks of guided decoding.
	forced guided
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt           promptInput `json:"prompt"`
	MaxTokens        *int64      `json:"max_tokens"`
	Logprobs         *int64      `json:"logprobs"`
	AddSpecialTokens *bool       `json:"add_special_tokens"`
	Suffix           *string     `json:"suffix"`
}

// tokenizeRequest is the body of POST /tokenize, in either of vLLM's forms.
type tokenizeRequest struct {
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             []chatMessage   `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

// finishRequest is the body of POST /v1/sessions/{id}/finish.
type finishRequest struct {
	// Reward is the session's outcome, required.
	Reward *float64 `json:"reward"`
	// Scores defaults to Reward.
	Scores    *float64           `json:"scores"`
	ExtraLogs map[string]float64 `json:"extra_logs"`
	Label     string             `json:"label"`
	// Env names the trajectory subject's env; default Options.Env.
	Env string `json:"env"`
	// GroupID, SampleIndex and GroupSize place the session in a group of samples of one
	// prompt; default the session id, 0 and 1.
	GroupID     string            `json:"group_id"`
	SampleIndex *int32            `json:"sample_index"`
	GroupSize   *int32            `json:"group_size"`
	Info        map[string]string `json:"info"`
}

// stopList is vLLM's "stop": one string or a list of strings.
type stopList []string

// UnmarshalJSON accepts a string, a list of strings or null.
func (s *stopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// chatMessage is a chat message whose content may be a string, null or a list of text parts,
// as OpenAI clients send it; the parts are joined with newlines, as vLLM does for string
// templates. An assistant message may carry reasoning (reasoning_content or reasoning) and
// tool calls, a tool message the id of the call it answers.
type chatMessage struct {
	messages.ChatMessage
}

// UnmarshalJSON accepts content as a string, null, or a list of text parts, and checks the
// tool calls.
func (m *chatMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
		ToolCallID       *string         `json:"tool_call_id"`
		Name             *string         `json:"name"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return errors.New("each message must be an object with a role and a content")
	}
	*m = chatMessage{messages.ChatMessage{Role: raw.Role}}
	switch {
	case raw.ReasoningContent != nil && raw.Reasoning != nil && *raw.ReasoningContent != *raw.Reasoning:
		return errors.New("reasoning_content and reasoning differ")
	case raw.ReasoningContent != nil:
		m.Reasoning = *raw.ReasoningContent
	case raw.Reasoning != nil:
		m.Reasoning = *raw.Reasoning
	}
	if raw.ToolCallID != nil {
		m.ToolCallID = *raw.ToolCallID
	}
	if raw.Name != nil {
		m.Name = *raw.Name
	}
	if tc := bytes.TrimSpace(raw.ToolCalls); len(tc) > 0 && string(tc) != "null" && string(tc) != "[]" {
		calls, err := checkToolCalls(tc)
		if err != nil {
			return err
		}
		m.ToolCalls = calls
	}
	text, err := contentText(raw.Content)
	if err != nil {
		return err
	}
	m.Content = text
	return nil
}

// contentText is a message content's text: a string, null, or text parts joined with newlines.
func contentText(raw json.RawMessage) (string, error) {
	content := bytes.TrimSpace(raw)
	if len(content) == 0 || string(content) == "null" {
		return "", nil
	}
	if content[0] == '"' {
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return "", fmt.Errorf("message content: %w", err)
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(content, &parts); err != nil {
		return "", errors.New("message content must be a string or a list of text parts")
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
		default:
			return "", fmt.Errorf("message content part of type %.32q is not supported", p.Type)
		}
		texts[i] = p.Text
	}
	return strings.Join(texts, "\n"), nil
}

// apiToolCall is a tool call in the OpenAI chat API.
type apiToolCall struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Function apiToolFunction `json:"function"`
}

// apiToolFunction is the function a tool call calls; Arguments is the arguments' JSON text.
type apiToolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// checkToolCalls checks an assistant message's tool calls and returns them compacted.
func checkToolCalls(raw []byte) (json.RawMessage, error) {
	var calls []struct {
		Type     string `json:"type"`
		Function *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, errors.New("tool_calls must be a list of tool calls")
	}
	for i, c := range calls {
		switch {
		case c.Type != "" && c.Type != "function":
			return nil, fmt.Errorf("tool_calls[%d]: type %.32q is not supported", i, c.Type)
		case c.Function == nil || c.Function.Name == "":
			return nil, fmt.Errorf("tool_calls[%d]: a function with a name is required", i)
		}
	}
	return compactJSON(raw)
}

// compactJSON returns raw without insignificant whitespace.
func compactJSON(raw []byte) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// promptInput is a completion prompt: a string or a list of token ids. A batch of one prompt
// is accepted as that prompt.
type promptInput struct {
	ids    []int32
	text   string
	isText bool
	set    bool
}

// UnmarshalJSON parses the prompt.
func (p *promptInput) UnmarshalJSON(b []byte) error { return p.parse(b, true) }

// parse parses a prompt, or with batch a batch of one prompt.
func (p *promptInput) parse(b []byte, batch bool) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	if b[0] == '"' {
		p.set, p.isText, p.ids = true, true, nil
		return json.Unmarshal(b, &p.text)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("prompt must be a string or a list of token ids")
	}
	if len(list) > 0 {
		if first := bytes.TrimSpace(list[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
			if len(list) != 1 || !batch {
				return errors.New("batched prompts are not supported: send one prompt per request")
			}
			return p.parse(first, false)
		}
	}
	ids, err := parseTokenIDs("prompt", b)
	if err != nil {
		return err
	}
	p.set, p.isText, p.text, p.ids = true, false, "", ids
	return nil
}

// parseTokenIDs parses a JSON list of token ids in [0, MaxInt32].
func parseTokenIDs(field string, b []byte) ([]int32, error) {
	var raw []int64
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s must be a list of integer token ids", field)
	}
	return tokenIDs(field, raw)
}

// tokenIDs converts token ids, checking that each is in [0, MaxInt32].
func tokenIDs(field string, raw []int64) ([]int32, error) {
	ids := make([]int32, len(raw))
	for i, id := range raw {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("%s[%d]: token id %d is out of range", field, i, id)
		}
		ids[i] = int32(id)
	}
	return ids, nil
}

// decodeJSON parses a JSON request body into v, phrasing errors for the client: in JSON's
// terms, with the path of the field at fault, never Go's.
func decodeJSON(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return vllmapi.BadRequest("invalid JSON body at byte %d: %w", syntax.Offset, err)
	case errors.As(err, &typ):
		got := gotJSON(typ.Value)
		path, ok := valuePath(body, typ.Offset)
		if !ok && typ.Field != "" {
			// The last name of Go's dotted path is always a JSON member's; those before it
			// may be Go's names of embedded structs.
			path = typ.Field[strings.LastIndexByte(typ.Field, '.')+1:]
		}
		if path == "" {
			return vllmapi.BadRequest("the request body must be a JSON object, got %s", got)
		}
		return vllmapi.BadRequest("%w", &fieldError{path: path, err: fmt.Errorf("expected %s, got %s", jsonType(typ.Type, false), got)})
	}
	return vllmapi.BadRequest("%w", err)
}

// valuePath returns the path, such as messages[2].role, of the value of body that a
// json.UnmarshalTypeError's offset points at: the offset is the end of a string, number,
// boolean or null, or just past the opening of an object or array, so either way the end of
// the value's first token. It returns false when no token ends there.
func valuePath(body []byte, offset int64) (string, bool) {
	type level struct {
		array bool
		key   string // the member being read, in an object
		index int    // the element being read, in an array
		atKey bool   // the next token is a member name
	}
	var stack []level
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		if n := len(stack); n > 0 && stack[n-1].atKey {
			if key, isKey := tok.(string); isKey {
				stack[n-1].key, stack[n-1].atKey = key, false
				continue
			}
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
		} else if dec.InputOffset() == offset {
			var b strings.Builder
			for i, l := range stack {
				switch {
				case l.array:
					fmt.Fprintf(&b, "[%d]", l.index)
				case i > 0:
					b.WriteString("." + l.key)
				default:
					b.WriteString(l.key)
				}
			}
			return b.String(), true
		} else if isDelim {
			stack = append(stack, level{array: d == '[', atKey: d == '{'})
			continue
		}
		// A value ended: the next token is the next element or member name.
		if n := len(stack); n > 0 {
			stack[n-1].index++
			stack[n-1].atKey = !stack[n-1].array
		}
	}
}

// gotJSON names a JSON value as json.UnmarshalTypeError's Value gives it ("string",
// "number 1.5", "array", ...) for a message.
func gotJSON(v string) string {
	switch kind, literal, _ := strings.Cut(v, " "); kind {
	case "number":
		if literal != "" {
			return fmt.Sprintf("the number %.32s", literal)
		}
		return "a number"
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + kind
	default:
		return "a " + kind
	}
}

// jsonType names the JSON a Go type is decoded from, such as "an array of objects"; plural
// gives the plural without an article ("objects").
func jsonType(t reflect.Type, plural bool) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := [2]string{"a JSON value", "JSON values"}
	switch t.Kind() {
	case reflect.String:
		name = [2]string{"a string", "strings"}
	case reflect.Bool:
		name = [2]string{"a boolean", "booleans"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		name = [2]string{"an integer", "integers"}
	case reflect.Float32, reflect.Float64:
		name = [2]string{"a number", "numbers"}
	case reflect.Map, reflect.Struct:
		name = [2]string{"an object", "objects"}
	case reflect.Slice, reflect.Array:
		if plural {
			return "arrays"
		}
		return "an array of " + jsonType(t.Elem(), true)
	}
	if plural {
		return name[1]
	}
	return name[0]
}

// refused checks the request for features the gateway does not honour.
func (f *samplingFields) refused() error {
	if err := f.checkStream(); err != nil {
		return err
	}
	switch {
	case f.Echo:
		return vllmapi.BadRequest("echo is not supported by the gateway")
	case f.BestOf != nil && *f.BestOf != 1:
		return vllmapi.BadRequest("best_of is not supported by the gateway")
	case f.UseBeamSearch:
		return vllmapi.BadRequest("use_beam_search is not supported by the gateway")
	case len(f.LogitBias) > 0:
		return vllmapi.BadRequest("logit_bias is not supported by the gateway")
	case f.PromptLogprobs != nil:
		return vllmapi.BadRequest("prompt_logprobs is not supported by the gateway")
	case f.Priority != 0:
		return vllmapi.BadRequest("priority is not supported by the gateway")
	case f.N != nil && *f.N < 1:
		return vllmapi.BadRequest("n must be at least 1, got %d", *f.N)
	case f.N != nil && *f.N > MaxChoices:
		return vllmapi.BadRequest("n must be at most %d, got %d", MaxChoices, *f.N)
	}
	return nil
}

// sampling checks the request's sampling fields and returns them as the LLM workers carry
// them. Unset fields take vLLM's defaults: temperature 1, top_p 1, top_k off, min_p 0, no
// penalties, special tokens skipped in the text.
func (f *samplingFields) sampling() (messages.SamplingParams, error) {
	if err := f.refused(); err != nil {
		return messages.SamplingParams{}, err
	}
	sp := messages.SamplingParams{Temperature: 1, SkipSpecialTokens: true}
	so, err := structuredOutputs(f)
	if err != nil {
		return sp, err
	}
	sp.StructuredOutputs = so
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	if t := f.Temperature; t != nil {
		if *t < 0 || !finite(*t) {
			return sp, vllmapi.BadRequest("temperature must be non-negative, got %g.", *t)
		}
		sp.Temperature = *t
	}
	if p := f.TopP; p != nil {
		if !(*p > 0 && *p <= 1) {
			return sp, vllmapi.BadRequest("top_p must be in (0, 1], got %g.", *p)
		}
		sp.TopP = *p
	}
	if k := f.TopK; k != nil {
		if *k < -1 || *k > math.MaxInt32 {
			return sp, vllmapi.BadRequest("top_k must be -1 or 0 (disable), or at least 1, got %d.", *k)
		}
		sp.TopK = int32(*k)
	}
	if p := f.MinP; p != nil {
		if !(*p >= 0 && *p <= 1) {
			return sp, vllmapi.BadRequest("min_p must be in [0, 1], got %g.", *p)
		}
		sp.MinP = *p
	}
	if p := f.PresencePenalty; p != nil {
		if !(*p >= -2 && *p <= 2) {
			return sp, vllmapi.BadRequest("presence_penalty must be in [-2, 2], got %g.", *p)
		}
		sp.PresencePenalty = *p
	}
	if p := f.FrequencyPenalty; p != nil {
		if !(*p >= -2 && *p <= 2) {
			return sp, vllmapi.BadRequest("frequency_penalty must be in [-2, 2], got %g.", *p)
		}
		sp.FrequencyPenalty = *p
	}
	if p := f.RepetitionPenalty; p != nil {
		if !(*p > 0) || !finite(*p) {
			return sp, vllmapi.BadRequest("repetition_penalty must be greater than zero, got %g.", *p)
		}
		sp.RepetitionPenalty = *p
	}
	if n := f.MinTokens; n != nil {
		if *n < 0 || *n > math.MaxInt32 {
			return sp, vllmapi.BadRequest("min_tokens must be greater than or equal to 0, got %d.", *n)
		}
		sp.MinTokens = int32(*n)
	}
	sp.Seed = f.Seed
	for _, s := range f.Stop {
		if s == "" {
			return sp, vllmapi.BadRequest("stop cannot contain an empty string.")
		}
	}
	sp.Stop = f.Stop
	if len(f.StopTokenIDs) > 0 {
		ids, err := tokenIDs("stop_token_ids", f.StopTokenIDs)
		if err != nil {
			return sp, vllmapi.BadRequest("%w", err)
		}
		sp.StopTokenIDs = ids
	}
	sp.IgnoreEOS = f.IgnoreEOS
	if f.SkipSpecialTokens != nil {
		sp.SkipSpecialTokens = *f.SkipSpecialTokens
	}
	sp.IncludeStopStrInOutput = f.IncludeStopStrInOutput
	if err := sp.Validate(); err != nil {
		return sp, vllmapi.BadRequest("%w", err)
	}
	return sp, nil
}

// sessionFromBody returns the session id the body names: session_id, or extra_body.session_id.
// Both must agree when both are given.
func (f *samplingFields) sessionFromBody() (string, error) {
	var id string
	if f.SessionID != nil {
		id = *f.SessionID
	}
	if f.ExtraBody != nil && f.ExtraBody.SessionID != nil {
		if id != "" && id != *f.ExtraBody.SessionID {
			return "", vllmapi.BadRequest("session_id %.64q and extra_body.session_id %.64q differ", id, *f.ExtraBody.SessionID)
		}
		id = *f.ExtraBody.SessionID
	}
	return id, nil
}

// checkSessionID checks a session id: 1 to 256 bytes of printable ASCII or UTF-8 without
// '/', so that segment episode ids "<session>/seg<k>" are unambiguous.
func checkSessionID(id string) error {
	if id == "" || len(id) > maxSessionIDLength {
		return vllmapi.BadRequest("session id must be 1 to %d bytes, got %d", maxSessionIDLength, len(id))
	}
	for _, c := range id {
		if c < 0x20 || c == 0x7f || c == '/' || c == ' ' || c == '\uFFFD' {
			return vllmapi.BadRequest("session id %.64q: character %q not allowed (no '/', spaces or control characters)", id, c)
		}
	}
	return nil
}

// decodeChat decodes and checks the body of a chat completion request.
func decodeChat(body []byte) (*chatRequest, messages.SamplingParams, error) {
	var req chatRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, messages.SamplingParams{}, err
	}
	sp, err := req.sampling()
	if err != nil {
		return nil, sp, err
	}
	if err := req.checkTemplate(); err != nil {
		return nil, sp, err
	}
	switch {
	case req.TopLogprobs != nil && *req.TopLogprobs > 0 && !req.Logprobs:
		return nil, sp, vllmapi.BadRequest("when using `top_logprobs`, `logprobs` must be set to true.")
	case req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > messages.MaxTopLogprobs):
		return nil, sp, vllmapi.BadRequest("top_logprobs must be in [0, %d], got %d", messages.MaxTopLogprobs, *req.TopLogprobs)
	}
	return &req, sp, nil
}

// addGenerationPrompt is the request's add_generation_prompt, true by default.
func (r *chatRequest) addGenerationPrompt() bool {
	return r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
}

// checkTemplate checks the chat template settings.
func (r *chatRequest) checkTemplate() error {
	return checkTemplate(r.Messages, r.addGenerationPrompt(), r.ContinueFinalMessage, r.ChatTemplateKwargs, r.ChatTemplate != nil)
}

func checkTemplate(msgs []chatMessage, addGenerationPrompt, continueFinal bool, kwargs json.RawMessage, customTemplate bool) error {
	switch {
	case len(msgs) == 0:
		return vllmapi.BadRequest("messages must not be empty")
	case addGenerationPrompt && continueFinal:
		return vllmapi.BadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	case customTemplate:
		return vllmapi.BadRequest("chat_template is not supported by the gateway: the model's own template applies")
	}
	for i, m := range msgs {
		if m.Role == "" {
			return vllmapi.BadRequest("messages[%d]: role is required", i)
		}
	}
	if kw := bytes.TrimSpace(kwargs); len(kw) > 0 && string(kw) != "null" && kw[0] != '{' {
		return vllmapi.BadRequest("chat_template_kwargs must be a JSON object")
	}
	return nil
}

// templateKwargs returns the chat_template_kwargs worth sending: nil for absent, null or {}.
func templateKwargs(kwargs json.RawMessage) []byte {
	kw := bytes.TrimSpace(kwargs)
	if len(kw) == 0 || string(kw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(kw, &m) == nil && len(m) == 0 {
		return nil
	}
	return kw
}

// decodeCompletion decodes and checks the body of a completion request.
func decodeCompletion(body []byte) (*completionRequest, messages.SamplingParams, error) {
	var req completionRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, messages.SamplingParams{}, err
	}
	sp, err := req.sampling()
	if err != nil {
		return nil, sp, err
	}
	switch {
	case req.Suffix != nil && *req.Suffix != "":
		return nil, sp, vllmapi.BadRequest("suffix is not supported by the gateway")
	case !req.Prompt.set:
		return nil, sp, vllmapi.BadRequest("prompt is required")
	case req.Prompt.isText && req.Prompt.text == "", !req.Prompt.isText && len(req.Prompt.ids) == 0:
		return nil, sp, vllmapi.BadRequest("prompt must not be empty")
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > messages.MaxTopLogprobs):
		return nil, sp, vllmapi.BadRequest("logprobs must be in [0, %d], got %d", messages.MaxTopLogprobs, *req.Logprobs)
	}
	return &req, sp, nil
}

// maxTokens resolves a request's max_tokens for a prompt of promptLen tokens and a context
// window of maxLen (0 = unknown), checking it as vLLM does. fallback is the default when the
// request sets none and the window does not give one.
func maxTokens(requested *int64, promptLen, maxLen int, fallback int64, fillWindow bool) (int32, error) {
	var n int64
	switch {
	case requested != nil:
		n = *requested
	case fillWindow && maxLen > 0:
		if promptLen >= maxLen {
			return 0, vllmapi.BadRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
				"Please reduce the length of the input messages.", maxLen, promptLen)
		}
		n = int64(maxLen - promptLen)
	default:
		n = fallback
	}
	if n < 1 {
		return 0, vllmapi.BadRequest("max_tokens must be at least 1, got %d.", n)
	}
	if maxLen > 0 && int64(promptLen)+n > int64(maxLen) {
		return 0, vllmapi.BadRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, int64(promptLen)+n, promptLen, n)
	}
	return int32(min(n, math.MaxInt32)), nil
}

// reasoningEfforts are the reasoning_effort values passed to the chat template.
var reasoningEfforts = []string{"low", "medium", "high"}

// checkTools checks the request's tools and tool_choice against the gateway's tool-call
// parser, as vLLM does: tool calls are parsed for tool_choice "auto" (the default with tools),
// not for "none"; "required" and a named function are forced by guided decoding (see
// forcedTools).
func (r *chatRequest) checkTools(parser string) error {
	tools, err := checkToolDefs(r.Tools)
	if err != nil || tools == nil {
		return err
	}
	r.toolsJSON = tools
	forced, ok, err := forcedTools(tools, r.ToolChoice)
	if err != nil || ok {
		r.forced = forced
		return err
	}
	choice := "auto"
	if tc := bytes.TrimSpace(r.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		if err := json.Unmarshal(tc, &choice); err != nil {
			return vllmapi.BadRequest("tool_choice must be \"auto\", \"none\", \"required\" or a function")
		}
	}
	switch choice {
	case "none":
	case "auto":
		if parser == ToolParserNone {
			return vllmapi.BadRequest("\"auto\" tool choice requires a tool-call parser: start the gateway with --tool-call-parser %s", ToolParserHermes)
		}
		r.parseTools = true
	default:
		return vllmapi.BadRequest("tool_choice must be \"auto\", \"none\" or \"required\", got %.32q", choice)
	}
	return nil
}

// checkToolDefs checks a request's tools, OpenAI function tools, and returns them compacted;
// nil for none.
func checkToolDefs(raw json.RawMessage) ([]byte, error) {
	tools := bytes.TrimSpace(raw)
	if len(tools) == 0 || string(tools) == "null" || string(tools) == "[]" {
		return nil, nil
	}
	var defs []struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(tools, &defs); err != nil {
		return nil, vllmapi.BadRequest("tools must be a list of tool definitions")
	}
	for i, d := range defs {
		switch {
		case d.Type != "function":
			return nil, vllmapi.BadRequest("tools[%d]: type must be \"function\", got %.32q", i, d.Type)
		case d.Function == nil || d.Function.Name == "":
			return nil, vllmapi.BadRequest("tools[%d]: a function with a name is required", i)
		}
	}
	compact, err := compactJSON(tools)
	if err != nil {
		return nil, vllmapi.BadRequest("tools: %w", err)
	}
	return compact, nil
}

// templateKwargsWithEffort returns the request's chat_template_kwargs, with reasoning_effort
// added as the template variable of that name (as vLLM passes it) unless the kwargs set it.
func (r *chatRequest) templateKwargsWithEffort() ([]byte, error) {
	kw := templateKwargs(r.ChatTemplateKwargs)
	if r.ReasoningEffort == nil {
		return kw, nil
	}
	if !slices.Contains(reasoningEfforts, *r.ReasoningEffort) {
		return nil, vllmapi.BadRequest("reasoning_effort must be one of %q, got %.32q", reasoningEfforts, *r.ReasoningEffort)
	}
	m := map[string]json.RawMessage{}
	if len(kw) > 0 {
		if err := json.Unmarshal(kw, &m); err != nil {
			return nil, vllmapi.BadRequest("chat_template_kwargs: %w", err)
		}
	}
	if _, set := m["reasoning_effort"]; !set {
		m["reasoning_effort"], _ = json.Marshal(*r.ReasoningEffort)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("gateway: chat_template_kwargs: %w", err)
	}
	return out, nil
}
