package llm

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/vllm"
)

// The requests of this file serve the OpenAI-compatible gateway: chat
// tokenization with the template's optional settings, detokenization (with
// each token's own text for logprobs) and the served model's name and
// context window.

// pieceCacheEntries bounds each endpoint's cache of token texts.
const pieceCacheEntries = 1 << 16

// pieceCache remembers the text of single tokens on one endpoint: a token's
// text is a pure function of its id, and a completion's logprobs name every
// token, so after a warm-up nearly every lookup is a hit.
type pieceCache struct {
	mu     sync.Mutex
	pieces map[int32]string
}

func (c *pieceCache) get(id int32) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pieces[id]
	return p, ok
}

func (c *pieceCache) put(id int32, piece string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pieces == nil || len(c.pieces) >= pieceCacheEntries {
		c.pieces = make(map[int32]string)
	}
	c.pieces[id] = piece
}

// piecesOf returns each token's own text, from the cache or by
// detokenizing it alone on this endpoint.
func (e *endpoint) piecesOf(ctx context.Context, ids []int32) ([]string, error) {
	pieces := make([]string, len(ids))
	for i, id := range ids {
		if p, ok := e.pieces.get(id); ok {
			pieces[i] = p
			continue
		}
		p, err := e.client.Detokenize(ctx, []int32{id})
		if err != nil {
			return nil, err
		}
		e.pieces.put(id, p)
		pieces[i] = p
	}
	return pieces, nil
}

func (w *Worker) serveTokenizeChat(ctx context.Context, data []byte) *messages.TokenizeReply {
	req, err := messages.Decode[messages.ChatTokenizeRequest](data)
	return serve(ctx, w, req, err, func(r *messages.ChatTokenizeRequest) int64 { return r.Deadline }, tokenizeFailed, w.chatTokenizeReply)
}

// chatTokenizeReply asks a model server to render req's messages with the chat
// template and tokenize them, or with AfterAssistant for the tokens the
// template puts after an assistant turn those messages follow.
func (w *Worker) chatTokenizeReply(ctx context.Context, req *messages.ChatTokenizeRequest) *messages.TokenizeReply {
	treq := vllm.TokenizeRequest{
		Messages:             make([]vllm.Message, len(req.Messages)),
		AddGenerationPrompt:  req.AddGenerationPrompt,
		ContinueFinalMessage: req.ContinueFinalMessage,
		AddSpecialTokens:     req.AddSpecialTokens,
		ChatTemplateKwargs:   req.ChatTemplateKwargs,
		Tools:                req.Tools,
	}
	for i, m := range req.Messages {
		treq.Messages[i] = vllm.Message{
			Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name,
		}
	}
	var ids []int32
	_, err := w.withEndpoint(ctx, req.EpisodeID, func(ctx context.Context, e *endpoint) error {
		var err error
		if req.AfterAssistant {
			ids, err = e.afterAssistant(ctx, treq)
		} else {
			ids, err = e.client.Tokenize(ctx, treq)
		}
		return err
	})
	if err != nil {
		return tokenizeFailed(err.Error(), errorCode(err))
	}
	return &messages.TokenizeReply{V: messages.Version, Tokens: ids}
}

func (w *Worker) serveDetokenize(ctx context.Context, data []byte) *messages.DetokenizeReply {
	req, err := messages.Decode[messages.DetokenizeRequest](data)
	return serve(ctx, w, req, err, func(r *messages.DetokenizeRequest) int64 { return r.Deadline }, detokenizeFailed, w.detokenizeReply)
}

// detokenizeReply asks a model server for the text of req's tokens and, when req
// asks for them, each token's own text.
func (w *Worker) detokenizeReply(ctx context.Context, req *messages.DetokenizeRequest) *messages.DetokenizeReply {
	var text string
	var pieces []string
	_, err := w.withEndpoint(ctx, req.EpisodeID, func(ctx context.Context, e *endpoint) error {
		var err error
		if text, err = e.client.Detokenize(ctx, req.Tokens); err != nil {
			return err
		}
		if req.Pieces {
			pieces, err = e.piecesOf(ctx, req.Tokens)
		}
		return err
	})
	if err != nil {
		return detokenizeFailed(err.Error(), errorCode(err))
	}
	return &messages.DetokenizeReply{V: messages.Version, Text: text, Pieces: pieces}
}

// serveModelInfo answers with the model this worker sends its requests to:
// Options.Model, or the first model a server lists, with its context window.
func (w *Worker) serveModelInfo(ctx context.Context, data []byte) *messages.ModelInfoReply {
	req, err := messages.Decode[messages.ModelInfoRequest](data)
	return serve(ctx, w, req, err, func(r *messages.ModelInfoRequest) int64 { return r.Deadline }, modelInfoFailed, w.modelInfoReply)
}

// modelInfoReply asks a model server for its models and picks the worker's.
func (w *Worker) modelInfoReply(ctx context.Context, _ *messages.ModelInfoRequest) *messages.ModelInfoReply {
	var models []vllm.Model
	_, err := w.withEndpoint(ctx, "", func(ctx context.Context, e *endpoint) error {
		var err error
		models, err = e.client.Models(ctx)
		return err
	})
	if err != nil {
		return modelInfoFailed(err.Error(), errorCode(err))
	}
	info, err := w.servedModel(models)
	if err != nil {
		w.errs.Add(1)
		return modelInfoFailed(err.Error(), messages.CodeUnavailable)
	}
	return &messages.ModelInfoReply{V: messages.Version, Models: []messages.ModelInfo{info}}
}

// servedModel picks the worker's model out of a server's listing.
func (w *Worker) servedModel(models []vllm.Model) (messages.ModelInfo, error) {
	clamp := func(n int) int32 { return int32(min(max(n, 0), math.MaxInt32)) }
	if w.opts.Model == "" {
		if len(models) == 0 {
			return messages.ModelInfo{}, fmt.Errorf("llm: %w: the model server lists no models", vllm.ErrBadResponse)
		}
		return messages.ModelInfo{ID: models[0].ID, MaxModelLen: clamp(models[0].MaxModelLen)}, nil
	}
	for _, m := range models {
		if m.ID == w.opts.Model {
			return messages.ModelInfo{ID: m.ID, MaxModelLen: clamp(m.MaxModelLen)}, nil
		}
	}
	// The server does not list it (a proxy may rename models): the name is
	// still the one requests carry, with the window unknown.
	return messages.ModelInfo{ID: w.opts.Model}, nil
}
