package vllm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rollfleet/rollfleet/internal/jsonw"
)

// Message is one chat message, for tokenizing with the server's chat
// template. The optional fields are sent only when set.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Reasoning is an assistant turn's reasoning; it is sent as both
	// "reasoning_content" and "reasoning", as vLLM hands it to templates.
	Reasoning string
	// ToolCalls is an assistant turn's tool calls, a JSON array.
	ToolCalls json.RawMessage
	// ToolCallID is the call a "tool" message answers; Name its author.
	ToolCallID, Name string
}

// TokenizeRequest is text, or chat messages, to turn into token ids. Both
// flags are always sent, so the zero value adds no special tokens (the
// server's own default for plain text would add them).
type TokenizeRequest struct {
	Prompt              string    // the text; used when Messages is empty
	Messages            []Message // rendered with the server's chat template
	AddGenerationPrompt bool      // with Messages: end with the assistant turn's opening
	AddSpecialTokens    bool      // let the tokenizer add its special tokens (e.g. BOS)
	// ContinueFinalMessage, with Messages, leaves the last message open so
	// that the model continues it; it excludes AddGenerationPrompt.
	ContinueFinalMessage bool
	// ChatTemplateKwargs, with Messages, is a JSON object of extra chat
	// template variables such as {"enable_thinking": false}; nil omits it.
	ChatTemplateKwargs json.RawMessage
	// Tools, with Messages, is the JSON array of tool definitions the
	// template renders; nil omits it.
	Tools json.RawMessage
}

// Tokenize returns the token ids of the request's text, or of its messages
// rendered with the model's own chat template (the way to build a first
// prompt for any model), via POST /tokenize.
func (c *Client) Tokenize(ctx context.Context, req TokenizeRequest) (_ []int32, err error) {
	if c.obs != nil {
		defer func(start time.Time) { c.obs.Tokenized(time.Since(start), err) }(time.Now())
	}
	if kw := req.ChatTemplateKwargs; len(kw) > 0 && !json.Valid(kw) {
		return nil, fmt.Errorf("vllm: tokenize: invalid request: ChatTemplateKwargs is not valid JSON")
	}
	if len(req.Tools) > 0 && !json.Valid(req.Tools) {
		return nil, fmt.Errorf("vllm: tokenize: invalid request: Tools is not valid JSON")
	}
	for i, m := range req.Messages {
		if len(m.ToolCalls) > 0 && !json.Valid(m.ToolCalls) {
			return nil, fmt.Errorf("vllm: tokenize: invalid request: Messages[%d].ToolCalls is not valid JSON", i)
		}
	}
	model, err := c.modelName(ctx)
	if err != nil {
		return nil, err
	}
	body := encode(func(b []byte) []byte { return appendTokenizeRequest(b, model, &req) })
	var r struct {
		Count  *int        `json:"count"`
		Tokens tokenIDList `json:"tokens"`
	}
	if err := c.call(ctx, c.tokenizeURL, body, &r); err != nil {
		return nil, opError("tokenize", c.tokenizeURL, err)
	}
	switch {
	case !r.Tokens.set:
		err = fmt.Errorf("%w: no tokens", ErrBadResponse)
	case r.Count != nil && *r.Count != len(r.Tokens.ids):
		err = fmt.Errorf("%w: count %d but %d tokens", ErrBadResponse, *r.Count, len(r.Tokens.ids))
	}
	if err != nil {
		return nil, opError("tokenize", c.tokenizeURL, err)
	}
	return r.Tokens.ids, nil
}

func appendTokenizeRequest(b []byte, model string, r *TokenizeRequest) []byte {
	b = append(b, `{"model":`...)
	b = jsonw.AppendString(b, model)
	if len(r.Messages) > 0 {
		b = append(b, `,"messages":[`...)
		for i, m := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"role":`...)
			b = jsonw.AppendString(b, m.Role)
			b = append(b, `,"content":`...)
			b = jsonw.AppendString(b, m.Content)
			b = appendMessageExtras(b, &m)
			b = append(b, '}')
		}
		b = append(b, `],"add_generation_prompt":`...)
		b = strconv.AppendBool(b, r.AddGenerationPrompt)
		if r.ContinueFinalMessage {
			b = append(b, `,"continue_final_message":true`...)
		}
		if len(r.ChatTemplateKwargs) > 0 {
			b = append(b, `,"chat_template_kwargs":`...)
			b = append(b, r.ChatTemplateKwargs...)
		}
		if len(r.Tools) > 0 {
			b = append(b, `,"tools":`...)
			b = append(b, r.Tools...)
		}
	} else {
		b = append(b, `,"prompt":`...)
		b = jsonw.AppendString(b, r.Prompt)
	}
	b = append(b, `,"add_special_tokens":`...)
	b = strconv.AppendBool(b, r.AddSpecialTokens)
	return append(b, '}')
}

// appendMessageExtras appends the optional members of a message that are set.
func appendMessageExtras(b []byte, m *Message) []byte {
	if m.Reasoning != "" {
		b = append(b, `,"reasoning_content":`...)
		b = jsonw.AppendString(b, m.Reasoning)
		b = append(b, `,"reasoning":`...)
		b = jsonw.AppendString(b, m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":`...)
		b = append(b, m.ToolCalls...)
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = jsonw.AppendString(b, m.ToolCallID)
	}
	if m.Name != "" {
		b = append(b, `,"name":`...)
		b = jsonw.AppendString(b, m.Name)
	}
	return b
}

// Detokenize returns the text of ids via POST /detokenize.
func (c *Client) Detokenize(ctx context.Context, ids []int32) (string, error) {
	model, err := c.modelName(ctx)
	if err != nil {
		return "", err
	}
	body := encode(func(b []byte) []byte {
		b = append(b, `{"model":`...)
		b = jsonw.AppendString(b, model)
		b = append(b, `,"tokens":`...)
		b = jsonw.AppendInt32s(b, ids)
		return append(b, '}')
	})
	var r struct {
		Prompt *string `json:"prompt"`
	}
	if err := c.call(ctx, c.detokenizeURL, body, &r); err != nil {
		return "", opError("detokenize", c.detokenizeURL, err)
	}
	if r.Prompt == nil {
		return "", opError("detokenize", c.detokenizeURL, fmt.Errorf("%w: no prompt", ErrBadResponse))
	}
	return *r.Prompt, nil
}

// Health checks GET /health: nil when the server answers 200, an error
// matching ErrUnavailable otherwise.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.send(ctx, c.healthURL, nil)
	if err != nil {
		return opError("health", c.healthURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		buf := getBuffer()
		defer putBuffer(buf)
		_, _ = buf.ReadFrom(io.LimitReader(resp.Body, maxErrorBody))
		return opError("health", c.healthURL, fmt.Errorf("%w: %w", ErrUnavailable, decodeAPIError(resp.StatusCode, buf.Bytes())))
	}
	// Drain the (empty) body so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return nil
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	MaxModelLen int    `json:"max_model_len"`
}

// Models lists the models the server serves, via GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var r struct {
		Data []Model `json:"data"`
	}
	if err := c.call(ctx, c.modelsURL, nil, &r); err != nil {
		return nil, opError("models", c.modelsURL, err)
	}
	if r.Data == nil {
		return nil, opError("models", c.modelsURL, fmt.Errorf("%w: no data", ErrBadResponse))
	}
	for i, m := range r.Data {
		if m.ID == "" {
			return nil, opError("models", c.modelsURL, fmt.Errorf("%w: model %d has no id", ErrBadResponse, i))
		}
	}
	return r.Data, nil
}

// call sends one request (a GET when body is nil) and decodes the 2xx
// answer into v.
func (c *Client) call(ctx context.Context, url string, body []byte, v any) error {
	buf, err := c.do(ctx, url, body)
	if err != nil {
		return err
	}
	defer putBuffer(buf)
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	return nil
}

// MaxModelLen returns the served model's context window from /v1/models, or
// 0 when the server does not report one.
func (c *Client) MaxModelLen(ctx context.Context) (int, error) {
	name, err := c.modelName(ctx)
	if err != nil {
		return 0, err
	}
	models, err := c.Models(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range models {
		if m.ID == name {
			return m.MaxModelLen, nil
		}
	}
	return 0, nil
}
