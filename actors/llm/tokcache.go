package llm

import (
	"context"

	"github.com/rollfleet/rollfleet/internal/tokcache"
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
