package gateway

import (
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usage              `json:"usage"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	TokenIDs       []int32             `json:"token_ids"`
	PromptLogprobs *any                `json:"prompt_logprobs"`
	PromptTokenIDs []int32             `json:"prompt_token_ids"`
	// SessionID is, for a call with n > 1, the session this sample is recorded in.
	SessionID string `json:"session_id,omitempty"`
}

type completionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

// completionLogprobs are the logprobs of a completion sample's tokens, and of the most likely
// ones.
func (c *call) completionLogprobs(asIDs bool) *completionLogprobs {
	n := len(c.reply.Tokens)
	lp := &completionLogprobs{
		TextOffset: make([]int, n), TokenLogprobs: c.reply.Logprobs,
		Tokens: make([]string, n), TopLogprobs: make([]map[string]float32, n),
	}
	offset := 0
	for i := range n {
		tok := c.tokenString(i, asIDs)
		lp.TextOffset[i] = offset
		offset += utf8.RuneCountInString(c.texts[i])
		lp.Tokens[i] = tok
		lp.TopLogprobs[i] = map[string]float32{tok: c.reply.Logprobs[i]}
		for j := range c.topCount(i) {
			lp.TopLogprobs[i][c.altString(i, j, asIDs)] = c.reply.TopLogprobs[i].Logprobs[j]
		}
	}
	return lp
}

func (g *Gateway) handleCompletion(w http.ResponseWriter, r *http.Request) error {
	req, c, model, err := beginGeneration(g, w, r, decodeCompletion, g.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer c.end()
	ctx := r.Context()
	if req.Prompt.isText {
		c.promptText = req.Prompt.text
		c.prompt, err = g.tokenize(ctx, &messages.ChatTokenizeRequest{
			EpisodeID: c.key, AddSpecialTokens: req.AddSpecialTokens == nil || *req.AddSpecialTokens,
		}, req.Prompt.text)
		if err != nil {
			return err
		}
		if len(c.prompt) == 0 {
			return vllmapi.BadRequest("the tokenized prompt is empty")
		}
	} else {
		c.prompt = req.Prompt.ids
	}
	if c.maxTokens, err = maxTokens(req.MaxTokens, len(c.prompt), int(model.MaxModelLen), 16, false); err != nil {
		return err
	}
	c.pieces = req.Logprobs != nil
	if req.Logprobs != nil {
		c.topN = int32(*req.Logprobs)
	}
	if err := g.run(ctx, c, req.choices()); err != nil {
		return err
	}
	resp := completionResponse{
		ID: g.nextID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: model.ID,
		Choices: make([]completionChoice, 1+len(c.samples)), Usage: c.usage(),
	}
	for i, s := range c.all() {
		choice := completionChoice{Index: i, Text: s.reply.Text, FinishReason: s.reply.FinishReason, SessionID: s.sampleSession()}
		if req.Logprobs != nil {
			choice.Logprobs = s.completionLogprobs(req.ReturnTokensAsTokenIDs)
		}
		if req.ReturnTokenIDs {
			choice.TokenIDs, choice.PromptTokenIDs = s.reply.Tokens, s.prompt
		}
		resp.Choices[i] = choice
	}
	g.respond(w, c, resp, req.Stream, func() { g.streamCompletion(w, c, &resp, req.includeUsage()) })
	return nil
}
