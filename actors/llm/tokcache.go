package llm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/vllm"
)

// tokenize tokenizes on this endpoint, from the cache for plain text. The
// returned slice is shared and must not be modified.
func (e *endpoint) tokenize(ctx context.Context, req vllm.TokenizeRequest) ([]int32, error) {
	if len(req.Messages) > 0 || !tokcache.Cacheable(req.Prompt) {
		// Chat-template renders are first prompts: rarely repeated, and
		// their result depends on flags the key does not hold. Long texts
		// are not kept either.
		return e.client.Tokenize(ctx, req)
	}
	k := tokcache.Key{Text: req.Prompt, Special: req.AddSpecialTokens}
	if ids, ok := e.tokens.Get(k); ok {
		return ids, nil
	}
	ids, err := e.client.Tokenize(ctx, req)
	if err != nil {
		return nil, err
	}
	e.tokens.Put(k, ids)
	return ids, nil
}

// errTemplateTurn means the model's chat template rendered no tokens of its
// own after an assistant turn, so feedback turns cannot be built from it.
var errTemplateTurn = errors.New("llm: the chat template renders no user turn after an assistant turn")

// turnTokens returns the tokens the model's chat template puts after an
// assistant turn when a user message with content follows it (see
// messages.TokenizeRequest.Turn), rendered by the model server and cached
// per content.
func (e *endpoint) turnTokens(ctx context.Context, content string, kind messages.TurnKind, kwargs []byte) ([]int32, error) {
	key := tokcache.KeyOf(&messages.TokenizeRequest{Text: content, Turn: kind, ChatTemplateKwargs: kwargs})
	cacheable := tokcache.Cacheable(content)
	if cacheable {
		if ids, ok := e.tokens.Get(key); ok {
			return ids, nil
		}
	}
	ids, err := e.afterAssistant(ctx, vllm.TokenizeRequest{
		Messages:            []vllm.Message{{Role: "user", Content: content}},
		AddGenerationPrompt: kind == messages.TurnNext,
		ChatTemplateKwargs:  kwargs,
	})
	if err != nil {
		return nil, err
	}
	if cacheable {
		e.tokens.Put(key, ids)
	}
	return ids, nil
}

// afterAssistant returns the tokens the model's chat template puts after an
// assistant turn that req's messages follow, rendered by the model server
// with req's settings.
//
// Two renderings of one conversation that differ only in the assistant's
// content ("a" or "b") share everything after that content: the template's
// end-of-turn token, what it writes between messages, the messages and the
// generation prompt if asked for. The content is followed by the end-of-turn
// special token, where the tokenizer always splits, so these tokens are the
// same whatever the model actually wrote.
func (e *endpoint) afterAssistant(ctx context.Context, req vllm.TokenizeRequest) ([]int32, error) {
	appended := req.Messages
	render := func(assistant string) ([]int32, error) {
		req.Messages = append([]vllm.Message{{Role: "user", Content: "u"}, {Role: "assistant", Content: assistant}}, appended...)
		return e.client.Tokenize(ctx, req)
	}
	a, err := render("a")
	if err != nil {
		return nil, err
	}
	b, err := render("b")
	if err != nil {
		return nil, err
	}
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	if n == 0 || n == len(a) || n == len(b) {
		return nil, fmt.Errorf("%w (%d of %d tokens in common)", errTemplateTurn, n, min(len(a), len(b)))
	}
	return slices.Clip(a[len(a)-n:]), nil
}
