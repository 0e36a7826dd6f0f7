package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

type chatResponse struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	Created          int64        `json:"created"`
	Model            string       `json:"model"`
	Choices          []chatChoice `json:"choices"`
	Usage            usage        `json:"usage"`
	PromptLogprobs   *any         `json:"prompt_logprobs"`
	PromptTokenIDs   []int32      `json:"prompt_token_ids"`
	KVTransferParams *any         `json:"kv_transfer_params"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatOut       `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids"`
	// SessionID is, for a call with n > 1, the session this sample is recorded in.
	SessionID string `json:"session_id,omitempty"`
}

type chatOut struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent *string       `json:"reasoning_content"`
	Reasoning        *string       `json:"reasoning"`
	ToolCalls        []apiToolCall `json:"tool_calls"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one of a position's most likely tokens.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func (g *Gateway) handleChat(w http.ResponseWriter, r *http.Request) error {
	req, c, model, err := beginGeneration(g, w, r, decodeChat, g.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer c.end()
	outs, err := g.chatTurn(r.Context(), c, req, model)
	if err != nil {
		return err
	}
	resp := chatResponse{
		ID: g.nextID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(), Model: model.ID,
		Choices: make([]chatChoice, len(outs)), Usage: c.usage(),
	}
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = c.prompt
	}
	for i, s := range c.all() {
		choice := chatChoice{Index: i, Message: outs[i].message, FinishReason: outs[i].finish, SessionID: s.sampleSession()}
		if req.Logprobs {
			choice.Logprobs = s.chatLogprobs(req.ReturnTokensAsTokenIDs)
		}
		if req.ReturnTokenIDs {
			choice.TokenIDs = s.reply.Tokens
		}
		resp.Choices[i] = choice
	}
	g.respond(w, c, resp, req.Stream, func() { g.streamChat(w, c, &resp, req.includeUsage()) })
	return nil
}

// chatLogprobs are the logprobs of a chat sample's tokens, and of the most likely ones.
func (c *call) chatLogprobs(asIDs bool) *chatLogprobs {
	lp := &chatLogprobs{Content: make([]chatLogprob, len(c.reply.Tokens))}
	for i := range c.reply.Tokens {
		lp.Content[i] = chatLogprob{
			Token: c.tokenString(i, asIDs), Logprob: c.reply.Logprobs[i],
			Bytes: textBytes(c.texts[i]), TopLogprobs: make([]chatTopLogprob, c.topCount(i)),
		}
		for j := range lp.Content[i].TopLogprobs {
			lp.Content[i].TopLogprobs[j] = chatTopLogprob{Token: c.altString(i, j, asIDs),
				Logprob: c.reply.TopLogprobs[i].Logprobs[j], Bytes: textBytes(c.altTexts[i][j])}
		}
	}
	return lp
}

// chatOutcome is a chat completion's reply as the parsers read it.
type chatOutcome struct {
	message chatOut
	finish  string
}

// chatTurn renders and tokenizes a chat request's messages and tools on the model server,
// generates the n completions, records them in the call's sessions and parses the replies,
// one outcome per sample.
func (g *Gateway) chatTurn(ctx context.Context, c *call, req *chatRequest, model messages.ModelInfo) ([]*chatOutcome, error) {
	if err := req.checkTools(g.opts.ToolCallParser); err != nil {
		return nil, err
	}
	kwargs, err := req.templateKwargsWithEffort()
	if err != nil {
		return nil, err
	}
	c.metadata = keptMetadata(req.Metadata)
	c.prompt, c.rendered, err = g.chatPrompt(ctx, c, &messages.ChatTokenizeRequest{
		EpisodeID: c.key, Messages: plainMessages(req.Messages), AddGenerationPrompt: req.addGenerationPrompt(),
		ContinueFinalMessage: req.ContinueFinalMessage, AddSpecialTokens: req.AddSpecialTokens,
		ChatTemplateKwargs: kwargs, Tools: req.toolsJSON,
	})
	if err != nil {
		return nil, err
	}
	if len(c.prompt) == 0 {
		return nil, vllmapi.BadRequest("the rendered prompt is empty")
	}
	requested := req.MaxCompletionTokens
	if requested == nil {
		requested = req.MaxTokens
	}
	if c.maxTokens, err = maxTokens(requested, len(c.prompt), int(model.MaxModelLen), fallbackMaxTokens, true); err != nil {
		return nil, err
	}
	c.pieces = req.Logprobs
	if req.Logprobs && req.TopLogprobs != nil {
		c.topN = int32(*req.TopLogprobs)
	}
	c.promptText = req.Messages[len(req.Messages)-1].Content
	if req.forced.outputs != nil {
		if c.sampling.StructuredOutputs != nil {
			return nil, vllmapi.BadRequest("a forced tool call and a structured output cannot be asked at once")
		}
		c.sampling.StructuredOutputs = req.forced.outputs
	}
	if err := g.run(ctx, c, req.choices()); err != nil {
		return nil, err
	}
	outs := make([]*chatOutcome, 0, 1+len(c.samples))
	for _, s := range c.all() {
		out, err := g.parseReply(s, req)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// parseReply reads a sample's reply as vLLM's parsers do, reasoning first, then tool calls,
// and remembers it in the sample's session.
func (g *Gateway) parseReply(c *call, req *chatRequest) (*chatOutcome, error) {
	out := &chatOutcome{message: chatOut{Role: "assistant", ToolCalls: []apiToolCall{}}, finish: c.reply.FinishReason}
	content := c.reply.Text
	if g.opts.ReasoningParser == ReasoningParserQwen3 {
		if reasoning, rest, ok := splitQwen3Reasoning(content); ok {
			out.message.ReasoningContent, out.message.Reasoning = &reasoning, &reasoning
			content = rest
		}
	}
	if c.reply.FinishReason == "length" {
		// Cut off before the forced call was whole: the text is returned as it is, as vLLM does.
	} else if forced, err := req.forced.calls(content); err != nil {
		return nil, vllmapi.StatusError(http.StatusBadGateway, "the model's reply to a forced tool call: %v", err)
	} else if forced != nil {
		for _, fc := range forced {
			out.message.ToolCalls = append(out.message.ToolCalls, apiToolCall{
				ID: g.nextID("chatcmpl-tool-"), Type: "function", Function: apiToolFunction{Name: fc.name, Arguments: fc.arguments},
			})
		}
		content, out.finish = "", "tool_calls"
	} else if req.parseTools {
		if rest, calls, ok := parseHermesToolCalls(content); ok {
			if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
				calls = calls[:1]
			}
			for _, pc := range calls {
				out.message.ToolCalls = append(out.message.ToolCalls, apiToolCall{
					ID: g.nextID("chatcmpl-tool-"), Type: "function", Function: apiToolFunction{Name: pc.name, Arguments: pc.arguments},
				})
			}
			content = rest
			out.finish = "tool_calls"
		}
	}
	if content != "" || (len(out.message.ToolCalls) == 0 && out.message.ReasoningContent == nil) {
		out.message.Content = &content
	}
	if c.lease != nil {
		c.lease.remember(c.rendered, &out.message, c.reply.EndOfTurn, c.settings)
	}
	return out, nil
}

// textBytes is a token's text as the list of its UTF-8 bytes.
func textBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}
