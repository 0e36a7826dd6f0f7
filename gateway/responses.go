package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// POST /v1/responses, the OpenAI Responses API that NeMo Gym agents speak to their model
// servers, is served by the chat path: the input items become chat messages the way NeMo Gym's
// vllm_model converts them (consecutive reasoning, assistant text and function calls form one
// assistant message; a function call's output a tool message), the reply becomes output items
// (a reasoning item, a message, one function_call per tool call), and the last output item
// carries the call's token information as vllm_model returns it: prompt_token_ids,
// generation_token_ids, generation_log_probs. A call is stored (unless "store" is false) for
// Options.ResponseTTL, so that a request naming it as previous_response_id continues its
// conversation (see responseStore); the training fields are not stored, and when clients echo
// them back in input items they are ignored (see echoFactor).

// echoFactor bounds a Responses body with the token fields its input items echo: clients such
// as the OpenAI Agents SDK send every earlier output item back whole, with the training fields
// the gateway put on it, which can be most of the body. Those fields are ignored and do not
// count against Options.MaxBodyBytes, up to echoFactor times it in all.
const echoFactor = 8

// echoedFields are the output items' training fields, ignored when they come back as input.
var echoedFields = []string{"prompt_token_ids", "generation_token_ids", "generation_log_probs"}

// echoedBytes is how many bytes of a Responses body are echoed training fields of its input
// items, on items of the kinds the gateway outputs (0 when the body is not one that has them).
func echoedBytes(body []byte) int64 {
	var r struct {
		Input []map[string]json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &r) != nil {
		return 0
	}
	var n int64
	for _, it := range r.Input {
		if !isOutputItem(it) {
			continue
		}
		for _, k := range echoedFields {
			if v, ok := it[k]; ok {
				n += int64(len(k) + len(v) + 4) // the key, its quotes, the colon and a comma
			}
		}
	}
	return n
}

// isOutputItem reports whether an input item is of a kind the gateway outputs: a reasoning
// item, a function call or an assistant message.
func isOutputItem(it map[string]json.RawMessage) bool {
	var typ, role string
	_ = json.Unmarshal(it["type"], &typ)
	_ = json.Unmarshal(it["role"], &role)
	return typ == "reasoning" || typ == "function_call" || role == "assistant"
}

// withoutEchoes is an input item without the training fields it echoes, as it is stored.
func withoutEchoes(item json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(item, &m) != nil {
		return item
	}
	n := len(m)
	for _, k := range echoedFields {
		delete(m, k)
	}
	if len(m) == n {
		return item
	}
	b, err := json.Marshal(m)
	if err != nil {
		return item
	}
	return b
}

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	samplingFields
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              json.RawMessage   `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Metadata           map[string]string `json:"metadata"`
	PreviousResponseID *string           `json:"previous_response_id"`
	// Store keeps the call for a later previous_response_id (nil means true, as OpenAI).
	Store *bool `json:"store"`
	// own is the request's own input items, before a previous response's were put first.
	own       []json.RawMessage
	Reasoning *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Text *struct {
		Format *responseFormat `json:"format"`
	} `json:"text"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// inputItem is one item of a Responses API input.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// responsesTool is a function tool in the Responses API's flat shape.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// decodeResponses decodes a Responses API request into the chat request it amounts to; a
// previous_response_id's conversation, which conversation returns, comes before its input.
func decodeResponses(body []byte, conversation func(id string) ([]json.RawMessage, error)) (*chatRequest, *responsesRequest, messages.SamplingParams, error) {
	var rr responsesRequest
	if err := decodeJSON(body, &rr); err != nil {
		return nil, nil, messages.SamplingParams{}, err
	}
	own, err := inputItems(rr.Input)
	if err != nil {
		return nil, nil, messages.SamplingParams{}, vllmapi.BadRequest("input must be a string or a list of items")
	}
	rr.own = own
	if id := rr.PreviousResponseID; id != nil && *id != "" {
		prev, err := conversation(*id)
		if err != nil {
			return nil, nil, messages.SamplingParams{}, err
		}
		if rr.Input, err = json.Marshal(append(prev, own...)); err != nil {
			return nil, nil, messages.SamplingParams{}, err
		}
	}
	if rr.N != nil && *rr.N != 1 {
		return nil, nil, messages.SamplingParams{}, vllmapi.BadRequest("n is not a parameter of the Responses API: use /v1/chat/completions for n > 1")
	}
	if rr.Text != nil && rr.Text.Format != nil {
		// The Responses API's text.format is chat's response_format, flattened.
		rr.ResponseFormat = rr.Text.Format
	}
	sp, err := rr.sampling()
	if err != nil {
		return nil, nil, sp, err
	}
	req := &chatRequest{
		samplingFields: rr.samplingFields, MaxTokens: rr.MaxOutputTokens, ChatTemplateKwargs: rr.ChatTemplateKwargs,
		ToolChoice: rr.ToolChoice, ParallelToolCalls: rr.ParallelToolCalls, Metadata: rr.Metadata,
	}
	if rr.Reasoning != nil {
		req.ReasoningEffort = rr.Reasoning.Effort
	}
	if rr.Instructions != nil && *rr.Instructions != "" {
		req.Messages = append(req.Messages, chatMessage{messages.ChatMessage{Role: "system", Content: *rr.Instructions}})
	}
	msgs, err := inputMessages(rr.Input)
	if err != nil {
		return nil, nil, sp, vllmapi.BadRequest("input: %w", err)
	}
	req.Messages = append(req.Messages, msgs...)
	if req.Tools, err = chatTools(rr.Tools); err != nil {
		return nil, nil, sp, vllmapi.BadRequest("tools: %w", err)
	}
	if err := req.checkTemplate(); err != nil {
		return nil, nil, sp, err
	}
	return req, &rr, sp, nil
}

// inputMessages converts Responses API input (a string, or a list of items) to chat messages.
func inputMessages(raw json.RawMessage) ([]chatMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("input is required")
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		return []chatMessage{{messages.ChatMessage{Role: "user", Content: text}}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("input must be a string or a list of items")
	}
	var out []chatMessage
	var pending *messages.ChatMessage // the assistant message being gathered
	var calls []apiToolCall
	flush := func() error {
		if pending == nil {
			return nil
		}
		if len(calls) > 0 {
			b, err := json.Marshal(calls)
			if err != nil {
				return err
			}
			pending.ToolCalls = b
		}
		out = append(out, chatMessage{*pending})
		pending, calls = nil, nil
		return nil
	}
	assistant := func() *messages.ChatMessage {
		if pending == nil {
			pending = &messages.ChatMessage{Role: "assistant"}
		}
		return pending
	}
	for i, it := range items {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			text, err := contentText(it.Content)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			switch it.Role {
			case "assistant":
				assistant().Content += text
			case "user", "system", "developer":
				if err := flush(); err != nil {
					return nil, err
				}
				out = append(out, chatMessage{messages.ChatMessage{Role: it.Role, Content: text}})
			default:
				return nil, fmt.Errorf("[%d]: role %.32q is not supported", i, it.Role)
			}
		case "reasoning":
			for _, s := range it.Summary {
				assistant().Reasoning += s.Text
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, fmt.Errorf("[%d]: a function_call needs a call_id and a name", i)
			}
			assistant()
			calls = append(calls, apiToolCall{ID: it.CallID, Type: "function", Function: apiToolFunction{Name: it.Name, Arguments: it.Arguments}})
		case "function_call_output":
			if err := flush(); err != nil {
				return nil, err
			}
			text, err := contentText(it.Output)
			if err != nil {
				return nil, fmt.Errorf("[%d]: output: %w", i, err)
			}
			out = append(out, chatMessage{messages.ChatMessage{Role: "tool", Content: text, ToolCallID: it.CallID}})
		default:
			return nil, fmt.Errorf("[%d]: item type %.32q is not supported", i, typ)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no messages")
	}
	return out, nil
}

// chatTools converts Responses API function tools to chat completion tools.
func chatTools(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []responsesTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, errors.New("must be a list of function tools")
	}
	type function struct {
		Name        string          `json:"name"`
		Description *string         `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type chatTool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return nil, fmt.Errorf("[%d]: tool type %.32q is not supported (function tools only)", i, t.Type)
		}
		// "strict" is left out, as vllm_model strips it: templates may render unknown keys.
		out[i] = chatTool{Type: "function", Function: function{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
	}
	return json.Marshal(out)
}

// responseObject is the Responses API answer.
type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	IncompleteDetails *incomplete       `json:"incomplete_details"`
	Error             *any              `json:"error"`
	Model             string            `json:"model"`
	Output            []outputItem      `json:"output"`
	Instructions      *string           `json:"instructions"`
	Tools             json.RawMessage   `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	Temperature       *float64          `json:"temperature"`
	TopP              *float64          `json:"top_p"`
	MaxOutputTokens   *int64            `json:"max_output_tokens"`
	Metadata          map[string]string `json:"metadata"`
	Usage             responsesUsage    `json:"usage"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// outputItem is one output item: a reasoning item, a message or a function call, the last one
// with the call's token information.
type outputItem struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"`
	Status  string        `json:"status"`
	Role    string        `json:"role,omitempty"`
	Content []outputText  `json:"content,omitempty"`
	Summary []summaryText `json:"summary,omitempty"`
	CallID  string        `json:"call_id,omitempty"`
	Name    string        `json:"name,omitempty"`
	// Arguments is set on function calls only (an empty object's text at least).
	Arguments *string `json:"arguments,omitempty"`

	PromptTokenIDs     []int32   `json:"prompt_token_ids,omitempty"`
	GenerationTokenIDs []int32   `json:"generation_token_ids,omitempty"`
	GenerationLogProbs []float32 `json:"generation_log_probs,omitempty"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type summaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (g *Gateway) handleResponses(w http.ResponseWriter, r *http.Request) error {
	var rr *responsesRequest
	decode := func(body []byte) (*chatRequest, messages.SamplingParams, error) {
		if n := int64(len(body)) - echoedBytes(body); n > g.opts.MaxBodyBytes {
			return nil, messages.SamplingParams{}, vllmapi.StatusError(http.StatusRequestEntityTooLarge,
				"request body exceeds %d bytes (not counting token fields echoed back in input items)", g.opts.MaxBodyBytes)
		}
		req, x, sp, err := decodeResponses(body, func(id string) ([]json.RawMessage, error) {
			return g.responses.conversation(id, sessionScope(r), time.Now())
		})
		rr = x
		return req, sp, err
	}
	req, c, model, err := beginGeneration(g, w, r, decode, echoFactor*g.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer c.end()
	outs, err := g.chatTurn(r.Context(), c, req, model)
	if err != nil {
		return err
	}
	out := outs[0] // the Responses API has no n
	var items []outputItem
	if m := out.message.ReasoningContent; m != nil {
		items = append(items, outputItem{ID: g.nextID("rs_"), Type: "reasoning", Status: "completed",
			Summary: []summaryText{{Type: "summary_text", Text: *m}}})
	}
	if content := out.message.Content; (content != nil && *content != "") || len(items)+len(out.message.ToolCalls) == 0 {
		text := ""
		if content != nil {
			text = *content
		}
		items = append(items, outputItem{ID: g.nextID("msg_"), Type: "message", Status: "completed", Role: "assistant",
			Content: []outputText{{Type: "output_text", Text: text, Annotations: []any{}}}})
	}
	for _, tc := range out.message.ToolCalls {
		items = append(items, outputItem{ID: tc.ID, Type: "function_call", Status: "completed", CallID: tc.ID, Name: tc.Function.Name,
			Arguments: &tc.Function.Arguments})
	}
	last := &items[len(items)-1]
	last.PromptTokenIDs, last.GenerationTokenIDs, last.GenerationLogProbs = nonNil(c.prompt), nonNil(c.reply.Tokens), c.reply.Logprobs
	resp := responseObject{
		ID: responseID(), Object: "response", CreatedAt: time.Now().Unix(), Status: "completed", Model: model.ID,
		Output: items, Instructions: rr.Instructions, Tools: nonNullJSON(rr.Tools, "[]"), ToolChoice: nonNullJSON(rr.ToolChoice, `"auto"`),
		ParallelToolCalls: rr.ParallelToolCalls == nil || *rr.ParallelToolCalls, Temperature: rr.Temperature, TopP: rr.TopP,
		MaxOutputTokens: rr.MaxOutputTokens, Metadata: rr.Metadata,
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if c.reply.FinishReason == "length" {
		resp.Status, resp.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	}
	u := c.usage()
	resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.Usage.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
	if rr.Store == nil || *rr.Store {
		g.storeResponse(rr, resp.ID, sessionScope(r), items)
	}
	g.respond(w, c, resp, rr.Stream, func() { g.streamResponse(w, c, &resp) })
	return nil
}

// nonNullJSON is raw, or def when raw is absent or null.
func nonNullJSON(raw json.RawMessage, def string) json.RawMessage {
	if r := bytes.TrimSpace(raw); len(r) > 0 && string(r) != "null" {
		return r
	}
	return json.RawMessage(def)
}

// storeResponse keeps what the call added to its conversation, its own input and its output
// items without the training fields, for previous_response_id.
func (g *Gateway) storeResponse(rr *responsesRequest, id, scope string, output []outputItem) {
	items := make([]json.RawMessage, 0, len(rr.own)+len(output))
	for _, it := range rr.own {
		items = append(items, withoutEchoes(it))
	}
	for _, it := range output {
		it.PromptTokenIDs, it.GenerationTokenIDs, it.GenerationLogProbs = nil, nil, nil
		b, err := json.Marshal(it)
		if err != nil {
			g.log.Warn("response not stored", "response", id, "err", err)
			return
		}
		items = append(items, b)
	}
	prev := ""
	if rr.PreviousResponseID != nil {
		prev = *rr.PreviousResponseID
	}
	if !g.responses.put(id, prev, scope, items, time.Now()) {
		g.log.Warn("response too large to store", "response", id)
	}
}

// responseID is a fresh response id: "resp_" and 128 random bits, so that nobody continues a
// response by guessing its id.
func responseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}
