package llm

import (
	"context"
	"sync"

	"github.com/rollfleet/rollfleet/vllm"
)

// tokenCacheEntries bounds each endpoint's tokenization cache, and
// tokenCacheMaxText the texts it keeps: feedback turns are short and repeat,
// while a long text (a single-turn style's whole history) rarely comes
// twice and would only crowd the cache.
const (
	tokenCacheEntries = 1 << 14
	tokenCacheMaxText = 4 << 10
)

// tokenCache remembers the tokenization of plain texts on one endpoint. A
// tokenizer is a pure function of the text, and env feedback repeats a lot
// (the same few sentences with different numbers), so most feedback turns
// are served without a round trip to the model server. It keeps two
// generations: a full current map becomes the previous one, and entries
// used again move back, which approximates least-recently-used eviction
// without per-entry bookkeeping.
type tokenCache struct {
	mu        sync.Mutex
	cur, prev map[tokenKey][]int32
}

type tokenKey struct {
	text    string
	special bool
}

func (c *tokenCache) get(k tokenKey) ([]int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.cur[k]; ok {
		return ids, true
	}
	ids, ok := c.prev[k]
	if ok {
		c.putLocked(k, ids)
	}
	return ids, ok
}

func (c *tokenCache) put(k tokenKey, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, ids)
}

func (c *tokenCache) putLocked(k tokenKey, ids []int32) {
	if c.cur == nil || len(c.cur) >= tokenCacheEntries/2 {
		c.prev, c.cur = c.cur, make(map[tokenKey][]int32, tokenCacheEntries/2)
	}
	c.cur[k] = ids
}

// tokenize tokenizes on this endpoint, from the cache for plain text. The
// returned slice is shared and must not be modified.
func (e *endpoint) tokenize(ctx context.Context, req vllm.TokenizeRequest) ([]int32, error) {
	if len(req.Messages) > 0 || len(req.Prompt) > tokenCacheMaxText {
		// Chat-template renders are first prompts: rarely repeated, and
		// their result depends on flags the key does not hold. Long texts
		// are not kept either.
		return e.client.Tokenize(ctx, req)
	}
	k := tokenKey{text: req.Prompt, special: req.AddSpecialTokens}
	if ids, ok := e.tokens.get(k); ok {
		return ids, nil
	}
	ids, err := e.client.Tokenize(ctx, req)
	if err != nil {
		return nil, err
	}
	e.tokens.put(k, ids)
	return ids, nil
}
