package llm

import (
	"context"
	"sync"

	"github.com/rollfleet/rollfleet/vllm"
)

// tokenCacheEntries and tokenCacheBytes bound each endpoint's tokenization
// cache, and tokenCacheMaxText the texts it keeps: feedback turns are short
// and repeat, while a long text (a single-turn style's whole history) rarely
// comes twice and would only crowd the cache. A feedback turn takes a few
// hundred bytes, so the entry bound is the one that usually applies; the
// byte bound keeps long feedback (a board after every move) from filling
// 16,384 entries with 4 KiB texts and their tokens, over 128 MiB.
const (
	tokenCacheEntries = 1 << 14
	tokenCacheBytes   = 16 << 20
	tokenCacheMaxText = 4 << 10
)

// tokenEntryOverhead approximates what an entry costs besides its text and
// ids: its share of the map, the key and the slice header.
const tokenEntryOverhead = 64

// tokenEntrySize is the memory an entry holds, as the byte bound counts it.
func tokenEntrySize(k tokenKey, ids []int32) int {
	return len(k.text) + 4*cap(ids) + tokenEntryOverhead
}

// tokenCache remembers the tokenization of plain texts on one endpoint. A
// tokenizer is a pure function of the text, and env feedback repeats a lot
// (the same few sentences with different numbers), so most feedback turns
// are served without a round trip to the model server. It keeps two
// generations: a full current map becomes the previous one, and entries
// used again move back, which approximates least-recently-used eviction
// without per-entry bookkeeping. A generation holds at most half the
// entries and half the bytes of the bounds.
type tokenCache struct {
	mu        sync.Mutex
	cur, prev map[tokenKey][]int32
	// curBytes and prevBytes are the generations' sizes (tokenEntrySize).
	curBytes, prevBytes int
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
	size := tokenEntrySize(k, ids)
	if old, ok := c.cur[k]; ok {
		c.curBytes -= tokenEntrySize(k, old)
	} else if c.cur == nil || len(c.cur) >= tokenCacheEntries/2 || c.curBytes+size > tokenCacheBytes/2 {
		c.prev, c.prevBytes = c.cur, c.curBytes
		c.cur, c.curBytes = make(map[tokenKey][]int32, tokenCacheEntries/2), 0
	}
	c.cur[k] = ids
	c.curBytes += size
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
