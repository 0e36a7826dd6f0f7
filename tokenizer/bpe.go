package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is a BPE model: the vocabulary and the ranked merges.
//
// Merging works on symbols: the id of a vocabulary string, or for a merge
// operand or result that is not in the vocabulary an extra symbol below
// noSym; a character no merge or vocabulary entry names is noSym.
type bpe struct {
	vocab        map[string]int32
	raw          [][2]string
	merges       map[uint64]merge // by symbol pair
	chars        map[rune]int32   // symbol of each one-character string
	extra        []string         // strings of the extra symbols
	unk          int32            // -1 without an unk_token in the vocabulary
	unkToken     string
	byteFallback bool
	fuseUnk      bool
	ignoreMerges bool
	fallback     [256]int32 // ids of <0x00>..<0xFF>, -1 where absent
	pool         sync.Pool  // *wordBuf
	cache        wordCache
}

// Words up to cachedLen bytes keep their ids in a cache of at most
// cacheWords entries, emptied when full: prompts repeat their words.
const (
	cachedLen  = 64
	cacheWords = 1 << 15
)

// wordCache maps a pre-token to its ids.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) get(word string) ([]int32, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ids, ok := c.m[word]
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= cacheWords || c.m == nil {
		c.m = make(map[string][]int32)
	}
	c.m[strings.Clone(word)] = slices.Clone(ids)
}

// merge is the rank of a pair and the symbol it merges into.
type merge struct{ rank, sym int32 }

// noSym is the symbol of a character that no vocabulary entry or merge names.
const noSym int32 = -1

// modelJSON is tokenizer.json's model section.
type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]int32  `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Dropout                 *float64          `json:"dropout"`
}

func parseBPE(raw json.RawMessage) (*bpe, error) {
	var mj modelJSON
	if err := json.Unmarshal(raw, &mj); err != nil {
		return nil, fmt.Errorf("%w: model: %w", ErrInvalid, err)
	}
	if mj.Type != "BPE" {
		return nil, fmt.Errorf("%w: model type %q (only BPE)", ErrUnsupported, mj.Type)
	}
	if mj.Vocab == nil {
		return nil, fmt.Errorf("%w: BPE model without a vocab", ErrInvalid)
	}
	// None of the served models uses these, so there is nothing to hold an
	// implementation to; they stay unsupported.
	if (mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "") ||
		(mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "") || (mj.Dropout != nil && *mj.Dropout != 0) {
		return nil, fmt.Errorf("%w: BPE with a subword prefix, word suffix or dropout", ErrUnsupported)
	}
	m := &bpe{
		vocab:        mj.Vocab,
		unk:          -1,
		byteFallback: mj.ByteFallback,
		fuseUnk:      mj.FuseUnk,
		ignoreMerges: mj.IgnoreMerges,
	}
	if mj.UnkToken != nil {
		m.unkToken = *mj.UnkToken
	}
	m.raw = make([][2]string, len(mj.Merges))
	for i, r := range mj.Merges {
		var pair []string
		if err := json.Unmarshal(r, &pair); err != nil {
			// The older format is one string, the pair separated by a space.
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, fmt.Errorf("%w: merge %d: %s", ErrInvalid, i, r)
			}
			pair = strings.SplitN(s, " ", 3)
		}
		if len(pair) < 2 {
			return nil, fmt.Errorf("%w: merge %d: %s", ErrInvalid, i, r)
		}
		m.raw[i] = [2]string{pair[0], pair[1]}
	}
	return m, nil
}

// finish builds the merge table over the final vocabulary (added tokens
// included, as the reference looks them up in one map).
func (m *bpe) finish(vocab map[string]int32) error {
	m.vocab = vocab
	if id, ok := vocab[m.unkToken]; ok && m.unkToken != "" {
		m.unk = id
	}
	extraSym := map[string]int32{}
	sym := func(s string) int32 {
		if id, ok := vocab[s]; ok {
			return id
		}
		if id, ok := extraSym[s]; ok {
			return id
		}
		id := noSym - 1 - int32(len(m.extra))
		m.extra = append(m.extra, s)
		extraSym[s] = id
		return id
	}
	m.merges = make(map[uint64]merge, len(m.raw))
	for rank, p := range m.raw {
		// A repeated pair takes its last rank, as the reference's Map does.
		m.merges[pairKey(sym(p[0]), sym(p[1]))] = merge{rank: int32(rank), sym: sym(p[0] + p[1])}
	}
	m.raw = nil
	m.chars = map[rune]int32{}
	add := func(s string, id int32) {
		if r, n := utf8.DecodeRuneInString(s); n == len(s) && r != utf8.RuneError {
			m.chars[r] = id
		}
	}
	for s, id := range vocab {
		add(s, id)
	}
	for s, id := range extraSym {
		add(s, id)
	}
	for b := range m.fallback {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			id = -1
		}
		m.fallback[b] = id
	}
	m.pool.New = func() any { return new(wordBuf) }
	return nil
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// node is one symbol of a word being merged, in a linked list by index.
type node struct {
	sym        int32
	r          rune // the character of a noSym node
	prev, next int32
	pos        int32 // the first character's position: ties go to the leftmost pair
}

// cand is a pair that may merge: the left node and both symbols it was
// queued with, so a pair one of whose nodes has since merged is skipped.
type cand struct {
	rank, pos, left, lsym, rsym int32
}

type wordBuf struct {
	nodes []node
	heap  []cand
}

// pooledNodes bounds the buffers kept for reuse: a long word (a Gemma text
// without spaces is one) gets a buffer of its own that goes with it.
const pooledNodes = 1 << 14

func (m *bpe) release(buf *wordBuf) {
	if cap(buf.nodes) <= pooledNodes && cap(buf.heap) <= pooledNodes {
		m.pool.Put(buf)
	}
}

// encodeWord appends the ids of one pre-token, given as its initial nodes in
// buf.nodes, merging the lowest-ranked pair first and of equal ranks the
// leftmost, as the reference does.
func (m *bpe) encodeWord(buf *wordBuf, out []int32) []int32 {
	nodes := buf.nodes
	h := buf.heap[:0]
	push := func(left int32) {
		l := &nodes[left]
		if l.next < 0 {
			return
		}
		r := &nodes[l.next]
		if l.sym == noSym || r.sym == noSym {
			return
		}
		mg, ok := m.merges[pairKey(l.sym, r.sym)]
		if !ok {
			return
		}
		h = heapPush(h, cand{rank: mg.rank, pos: l.pos, left: left, lsym: l.sym, rsym: r.sym})
	}
	for i := range nodes[:len(nodes)-1] {
		push(int32(i))
	}
	for len(h) > 0 {
		var c cand
		c, h = heapPop(h)
		l := &nodes[c.left]
		if l.sym != c.lsym || l.next < 0 || nodes[l.next].sym != c.rsym {
			continue // stale: a node of the pair merged since
		}
		r := &nodes[l.next]
		l.sym = m.merges[pairKey(c.lsym, c.rsym)].sym
		l.next = r.next
		if r.next >= 0 {
			nodes[r.next].prev = c.left
		}
		r.sym = noSym // dead: queued pairs starting here are stale
		if l.prev >= 0 {
			push(l.prev)
		}
		push(c.left)
	}
	buf.heap = h
	for i := int32(0); i >= 0; i = nodes[i].next {
		out = m.emit(nodes[i], out)
	}
	return out
}

// emit appends the id of a merged symbol, or for one outside the vocabulary
// its byte fallback tokens or the unknown token.
func (m *bpe) emit(n node, out []int32) []int32 {
	if n.sym >= 0 {
		return append(out, n.sym)
	}
	var s string
	if n.sym == noSym {
		s = string(n.r)
	} else {
		s = m.extra[noSym-1-n.sym]
	}
	if m.byteFallback {
		ok := true
		for i := 0; i < len(s); i++ {
			ok = ok && m.fallback[s[i]] >= 0
		}
		if ok {
			for i := 0; i < len(s); i++ {
				out = append(out, m.fallback[s[i]])
			}
			return out
		}
	}
	if m.unk < 0 {
		return out // the reference has no id to give either
	}
	return append(out, m.unk)
}

func heapPush(h []cand, c cand) []cand {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []cand) (cand, []cand) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(h) && less(h[l], h[small]) {
			small = l
		}
		if r < len(h) && less(h[r], h[small]) {
			small = r
		}
		if small == i {
			return top, h
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}

func less(a, b cand) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}
