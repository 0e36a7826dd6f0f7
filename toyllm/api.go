package toyllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// maxLogprobs is the most alternatives a request may ask for per position,
// vLLM's default --max-logprobs.
const maxLogprobs = 20

// errorType is the "type" of vLLM's error body for an HTTP status.
func errorType(status int) string {
	switch status {
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	}
	return "BadRequestError"
}

// errorBody is vLLM's error response.
type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// samplingRequest holds the request fields both generation endpoints share.
// Unknown fields are ignored, as vLLM ignores them.
type samplingRequest struct {
	Model                  string   `json:"model"`
	Temperature            *float64 `json:"temperature"`
	TopP                   *float64 `json:"top_p"`
	TopK                   *int     `json:"top_k"`
	MinP                   *float64 `json:"min_p"`
	Seed                   *int64   `json:"seed"`
	N                      *int     `json:"n"`
	Stop                   stopList `json:"stop"`
	StopTokenIDs           []int32  `json:"stop_token_ids"`
	IgnoreEOS              bool     `json:"ignore_eos"`
	SkipSpecialTokens      *bool    `json:"skip_special_tokens"`
	IncludeStopStrInOutput bool     `json:"include_stop_str_in_output"`
	// StructuredOutputs is vLLM's guided decoding object (see constrainedReply).
	StructuredOutputs      json.RawMessage `json:"structured_outputs"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs         bool            `json:"return_token_ids"`

	// Features the toy model lacks: a request asking for one is refused
	// rather than served without it.
	Stream            bool               `json:"stream"`
	Echo              bool               `json:"echo"`
	BestOf            *int               `json:"best_of"`
	UseBeamSearch     bool               `json:"use_beam_search"`
	MinTokens         int                `json:"min_tokens"`
	PresencePenalty   float64            `json:"presence_penalty"`
	FrequencyPenalty  float64            `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	PromptLogprobs    *int               `json:"prompt_logprobs"`
	Priority          int                `json:"priority"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingRequest
	Prompt    promptInput `json:"prompt"`
	MaxTokens *int        `json:"max_tokens"`
	Logprobs  *int        `json:"logprobs"`
	// AddSpecialTokens adds a real tokenizer's BOS to a text prompt;
	// default true, as vLLM.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingRequest
	chatTemplateFields
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Logprobs            bool `json:"logprobs"`
	TopLogprobs         *int `json:"top_logprobs"`
}

// chatTemplateFields are the fields a chat request and a tokenize request
// with messages share: what the chat template renders.
type chatTemplateFields struct {
	Messages             []chatMessage   `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	// Documents are retrieval documents for a real model's template; the
	// byte vocabulary's template has no use for them.
	Documents json.RawMessage `json:"documents"`
	// AddSpecialTokens adds a real tokenizer's BOS to the text (the byte
	// vocabulary has none): by default, as in vLLM, not to rendered
	// messages, which the template starts, but to a /tokenize prompt.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// render renders the messages with the byte vocabulary's chat template.
func (f *chatTemplateFields) render() (string, error) {
	return renderChat(chatInput{
		msgs: f.Messages, tools: f.Tools, kwargs: f.ChatTemplateKwargs,
		addGenerationPrompt: f.AddGenerationPrompt == nil || *f.AddGenerationPrompt, continueFinal: f.ContinueFinalMessage,
	})
}

// tokenizeRequest is the body of POST /tokenize, in either of vLLM's forms.
type tokenizeRequest struct {
	chatTemplateFields
	Model           string  `json:"model"`
	Prompt          *string `json:"prompt"`
	ReturnTokenStrs bool    `json:"return_token_strs"`
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

// The answers of the endpoints off the hot path have the shapes the gateway
// answers with too.
type (
	tokenizeResponse   = vllmapi.TokenizeResponse
	detokenizeResponse = vllmapi.DetokenizeResponse
	modelCard          = vllmapi.ModelCard
)

// promptInput is a completion prompt: a list of token ids or a string.
type promptInput struct {
	ids    []int32
	text   string
	isText bool
	set    bool
	// vocab is the vocabulary's size, which bounds the ids.
	vocab int
}

// UnmarshalJSON parses the prompt: a string, a list of token ids, or null
// (which, by the convention of encoding/json, changes nothing). A later
// "prompt" member replaces an earlier one, whatever their kinds.
func (p *promptInput) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case 'n':
		return nil
	case '"':
		p.set, p.isText, p.ids = true, true, p.ids[:0]
		return json.Unmarshal(b, &p.text)
	case '[':
		p.set, p.isText, p.text = true, false, ""
		return p.parseIDs(b)
	}
	return errors.New("prompt must be a string or a list of token ids")
}

// parseIDs parses b, a JSON list of token ids, strictly: it is the only
// check of the list's syntax when findPromptList took it out of the body.
// It runs once per token of every prompt, hence the hand-rolled loop.
func (p *promptInput) parseIDs(b []byte) error {
	ids := p.ids[:0]
	defer func() { p.ids = ids }()
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == ']' {
		return endOfList(b, i)
	}
	for i < len(b) {
		start := i
		c := b[i]
		if c == '-' {
			i++
			if i == len(b) {
				break
			}
			c = b[i]
		}
		if c < '0' || c > '9' {
			if c == '"' || c == '[' {
				return errors.New("batched prompts are not supported: send one prompt per request")
			}
			return errors.New("prompt must be a string or a list of token ids")
		}
		v := int(c - '0')
		i++
		if v == 0 && i < len(b) && b[i] >= '0' && b[i] <= '9' {
			return errors.New("prompt: invalid number in the list of token ids")
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if v < p.vocab {
				v = v*10 + int(b[i]-'0')
			}
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return errors.New("prompt token ids must be integers")
		}
		if v >= p.vocab || (b[start] == '-' && v != 0) {
			return fmt.Errorf("Token id %s is out of vocabulary", b[start:i])
		}
		ids = append(ids, int32(v))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		i = skipSpace(b, i)
		switch {
		case i >= len(b):
		case b[i] == ']':
			return endOfList(b, i)
		case b[i] != ',':
			return errors.New("prompt: invalid list of token ids")
		}
		i = skipSpace(b, i+1)
	}
	return errors.New("prompt: unterminated list")
}

// endOfList checks that the list's closing bracket at i ends b.
func endOfList(b []byte, i int) error {
	if i != len(b)-1 {
		return errors.New("prompt: invalid list of token ids")
	}
	return nil
}

// skipSpace returns the index of the first non-space byte of b from i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// findPromptList finds the span of a top-level "prompt" member whose value
// is a flat list: the token ids that make up most of a multi-turn request.
// Parsing that span by hand and leaving only the rest of the body to
// encoding/json makes a request several times cheaper. When the body has
// another form, ok is false and encoding/json decodes all of it; the scan
// only locates, so a body it misjudges is still decoded correctly.
func findPromptList(b []byte) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	for i++; ; i++ {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		keyEnd, ok := skipString(b, i)
		if !ok {
			return 0, 0, false
		}
		key := b[i+1 : keyEnd-1]
		i = skipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		if string(key) == "prompt" {
			if i >= len(b) || b[i] != '[' {
				return 0, 0, false
			}
			for j := i + 1; j < len(b); j++ {
				switch b[j] {
				case ']':
					return i, j + 1, true
				case '[', '{', '"':
					return 0, 0, false
				}
			}
			return 0, 0, false
		}
		if i, ok = skipValue(b, i); !ok {
			return 0, 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ',' {
			return 0, 0, false
		}
	}
}

// skipString returns the index after the JSON string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '[', '{':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '[', '{':
				depth++
			case ']', '}':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	}
	// A number or a literal runs to the next delimiter.
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, true
		}
	}
	return i, true
}

// stopList is vLLM's "stop": one string or a list of strings.
type stopList []string

// UnmarshalJSON accepts a string, a list of strings or null.
func (s *stopList) UnmarshalJSON(b []byte) error {
	if b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop must be a string or a list of strings: %w", err)
	}
	*s = many
	return nil
}

// chatMessage is a chat message whose content may also be a list of text
// parts, as OpenAI clients send it; the parts are joined with newlines, as
// vLLM does for string templates. An assistant message may carry its
// reasoning and tool calls, a tool message the id of the call it answers.
type chatMessage struct {
	chat.Message
	Reasoning  string
	ToolCallID string
	toolCalls  []toolCall
}

// UnmarshalJSON accepts content as a string, null, or a list of text parts.
func (m *chatMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
		ToolCalls        []toolCall      `json:"tool_calls"`
		ToolCallID       string          `json:"tool_call_id"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("message: %w", err)
	}
	*m = chatMessage{Message: chat.Message{Role: raw.Role}, ToolCallID: raw.ToolCallID, toolCalls: raw.ToolCalls}
	switch {
	case raw.ReasoningContent != nil:
		m.Reasoning = *raw.ReasoningContent
	case raw.Reasoning != nil:
		m.Reasoning = *raw.Reasoning
	}
	if len(raw.Content) == 0 || raw.Content[0] == 'n' {
		return nil
	}
	if raw.Content[0] == '"' {
		return json.Unmarshal(raw.Content, &m.Content)
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw.Content, &parts); err != nil {
		return fmt.Errorf("message content must be a string or a list of text parts: %w", err)
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("message content part of type %q is not supported", p.Type)
		}
		texts[i] = p.Text
	}
	m.Content = strings.Join(texts, "\n")
	return nil
}

// genParams checks the shared sampling fields and returns the generation
// settings they ask for; max_tokens and the logprob count are set by the
// endpoint.
func (r *samplingRequest) genParams() (genParams, error) {
	switch {
	case r.Stream:
		return genParams{}, vllmapi.BadRequest("stream is not supported by toyllm")
	case r.Echo:
		return genParams{}, vllmapi.BadRequest("echo is not supported by toyllm")
	case r.BestOf != nil && *r.BestOf != 1:
		return genParams{}, vllmapi.BadRequest("best_of is not supported by toyllm")
	case r.UseBeamSearch:
		return genParams{}, vllmapi.BadRequest("use_beam_search is not supported by toyllm")
	case r.MinTokens != 0:
		return genParams{}, vllmapi.BadRequest("min_tokens is not supported by toyllm")
	case r.PresencePenalty != 0, r.FrequencyPenalty != 0, r.RepetitionPenalty != nil && *r.RepetitionPenalty != 1:
		return genParams{}, vllmapi.BadRequest("presence, frequency and repetition penalties are not supported by toyllm")
	case len(r.LogitBias) > 0:
		return genParams{}, vllmapi.BadRequest("logit_bias is not supported by toyllm")
	case r.PromptLogprobs != nil:
		return genParams{}, vllmapi.BadRequest("prompt_logprobs is not supported by toyllm")
	case r.Priority != 0:
		return genParams{}, vllmapi.BadRequest("priority scheduling is not enabled on toyllm")
	case r.N != nil && *r.N != 1:
		return genParams{}, vllmapi.BadRequest("n must be 1 (toyllm generates one sequence per request), got %d", *r.N)
	}
	gp := genParams{
		sampling:    samplingParams{temperature: 1, topP: 1},
		stop:        r.Stop,
		stopIDs:     r.StopTokenIDs,
		ignoreEOS:   r.IgnoreEOS,
		skipSpecial: r.SkipSpecialTokens == nil || *r.SkipSpecialTokens,
		includeStop: r.IncludeStopStrInOutput,
	}
	var err error
	if gp.constrained, err = constrainedReply(r.StructuredOutputs); err != nil {
		return genParams{}, err
	}
	if t := r.Temperature; t != nil {
		if *t < 0 {
			return genParams{}, vllmapi.BadRequest("temperature must be non-negative, got %g.", *t)
		}
		gp.sampling.temperature = *t
	}
	if p := r.TopP; p != nil {
		if *p <= 0 || *p > 1 {
			return genParams{}, vllmapi.BadRequest("top_p must be in (0, 1], got %g.", *p)
		}
		gp.sampling.topP = *p
	}
	if k := r.TopK; k != nil {
		if *k < -1 {
			return genParams{}, vllmapi.BadRequest("top_k must be -1 or 0 (disable), or at least 1, got %d.", *k)
		}
		gp.sampling.topK = max(*k, 0)
	}
	if p := r.MinP; p != nil {
		if *p < 0 || *p > 1 {
			return genParams{}, vllmapi.BadRequest("min_p must be in [0, 1], got %g.", *p)
		}
		gp.sampling.minP = *p
	}
	if r.Seed != nil {
		gp.seed, gp.seeded = uint64(*r.Seed), true
	}
	for _, s := range r.Stop {
		if s == "" {
			return genParams{}, vllmapi.BadRequest("stop cannot contain an empty string.")
		}
	}
	return gp, nil
}

// checkMaxTokens validates max_tokens against the context window.
func checkMaxTokens(maxTokens, promptLen, maxModelLen int) error {
	if maxTokens < 1 {
		return vllmapi.BadRequest("max_tokens must be at least 1, got %d.", maxTokens)
	}
	if promptLen+maxTokens > maxModelLen {
		return vllmapi.BadRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxModelLen, promptLen+maxTokens, promptLen, maxTokens)
	}
	return nil
}
