// Package tokcache remembers the tokenizations of short plain texts. A
// tokenizer is a pure function of the text, and an env's feedback repeats a
// lot (the same few sentences with different numbers), so most feedback
// turns can be tokenized without asking the model server, or without
// crossing NATS at all when the env worker keeps its own cache.
package tokcache

import (
	"sync"

	"github.com/rollfleet/rollfleet/messages"
)

// Entries and Bytes bound a cache, and MaxText the texts it keeps: feedback
// turns are short and repeat, while a long text (a single-turn style's
// whole history) rarely comes twice and would only crowd the cache. A
// feedback turn takes a few hundred bytes, so the entry bound is the one
// that usually applies; the byte bound keeps long feedback (a board after
// every move) from filling 16,384 entries with 4 KiB texts and their
// tokens, over 128 MiB.
const (
	Entries = 1 << 14
	Bytes   = 16 << 20
	MaxText = 4 << 10
)

// entryOverhead approximates what an entry costs besides its text and ids:
// its share of the map, the key and the slice header.
const entryOverhead = 64

// Key is a text, whether special tokens are added to it and, for the tokens
// a chat template renders around a user turn, the turn kind and the
// template's extra variables (messages.TokenizeRequest's Turn and
// ChatTemplateKwargs).
type Key struct {
	Text    string
	Special bool
	Turn    uint8
	Kwargs  string
}

// KeyOf is the key of a plain-text or turn tokenization request.
func KeyOf(req *messages.TokenizeRequest) Key {
	return Key{Text: req.Text, Special: req.AddSpecialTokens, Turn: uint8(req.Turn), Kwargs: string(req.ChatTemplateKwargs)}
}

// Cacheable reports whether a text is short enough to be kept.
func Cacheable(text string) bool { return len(text) <= MaxText }

func entrySize(k Key, ids []int32) int {
	return len(k.Text) + len(k.Kwargs) + 4*cap(ids) + entryOverhead
}

// Cache remembers tokenizations, bounded by Entries and Bytes. It keeps two
// generations: a full current map becomes the previous one, and entries
// used again move back, which approximates least-recently-used eviction
// without per-entry bookkeeping. A generation holds at most half the
// entries and half the bytes of the bounds. The zero value is ready to use
// and safe for concurrent use; returned slices are shared and must not be
// modified.
type Cache struct {
	mu        sync.Mutex
	cur, prev map[Key][]int32
	// curBytes and prevBytes are the generations' sizes (entrySize).
	curBytes, prevBytes int
}

// Get returns the cached tokenization of k.
func (c *Cache) Get(k Key) ([]int32, bool) {
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

// Put remembers the tokenization of k.
func (c *Cache) Put(k Key, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, ids)
}

func (c *Cache) putLocked(k Key, ids []int32) {
	size := entrySize(k, ids)
	if old, ok := c.cur[k]; ok {
		c.curBytes -= entrySize(k, old)
	} else if c.cur == nil || len(c.cur) >= Entries/2 || c.curBytes+size > Bytes/2 {
		c.prev, c.prevBytes = c.cur, c.curBytes
		c.cur, c.curBytes = make(map[Key][]int32, Entries/2), 0
	}
	c.cur[k] = ids
	c.curBytes += size
}

// Len is the number of entries held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}
