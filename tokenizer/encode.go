package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// trie matches added tokens in raw text, byte by byte.
type trie struct {
	first [256]bool // bytes an added token starts with
	nodes []trieNode
}

type trieNode struct {
	next map[byte]int32
	id   int32 // the added token ending here, or -1
	size int32 // its length in bytes
}

func newTrie(tokens []added) *trie {
	t := &trie{nodes: []trieNode{{id: -1}}}
	for _, a := range tokens {
		n := int32(0)
		for i := 0; i < len(a.Content); i++ {
			c := a.Content[i]
			next, ok := t.nodes[n].next[c]
			if !ok {
				if t.nodes[n].next == nil {
					t.nodes[n].next = map[byte]int32{}
				}
				next = int32(len(t.nodes))
				t.nodes[n].next[c] = next
				t.nodes = append(t.nodes, trieNode{id: -1})
			}
			n = next
		}
		t.nodes[n].id, t.nodes[n].size = a.ID, int32(len(a.Content))
		t.first[a.Content[0]] = true
	}
	return t
}

// match returns the longest added token at the start of s.
func (t *trie) match(s string) (id int32, size int, ok bool) {
	if s == "" || !t.first[s[0]] {
		return 0, 0, false
	}
	n := int32(0)
	for i := 0; i < len(s); i++ {
		next, found := t.nodes[n].next[s[i]]
		if !found {
			break
		}
		n = next
		if t.nodes[n].id >= 0 {
			id, size, ok = t.nodes[n].id, int(t.nodes[n].size), true
		}
	}
	return id, size, ok
}

// section is a run of text, or an added token when id >= 0.
type section struct {
	text string
	id   int32
}

// split cuts text at the added tokens, scanning from the left and taking the
// longest token at each position, as the reference does.
func (t *trie) split(text string) []section {
	var out []section
	start := 0
	for i := 0; i < len(text); {
		id, size, ok := t.match(text[i:])
		if !ok {
			i++
			continue
		}
		if i > start {
			out = append(out, section{text: text[start:i], id: -1})
		}
		out = append(out, section{text: text[i : i+size], id: id})
		i += size
		start = i
	}
	if start < len(text) {
		out = append(out, section{text: text[start:], id: -1})
	}
	return out
}

// Encode returns the token ids of text. Added tokens written in the text
// (such as "<|im_start|>") are their own ids, as the model's tokenizer gives
// them; addSpecial adds what the post-processor adds (Llama's and Gemma's
// BOS). Bytes of text that are not UTF-8 reach a byte-level model as they
// are; a byte fallback model sees each as U+FFFD.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	if addSpecial {
		out = append(out, t.prefix...)
	}
	sections := t.added.split(text)
	for i, s := range sections {
		if s.id < 0 {
			continue
		}
		a := t.addedTok[s.id]
		if a.LStrip && i > 0 && sections[i-1].id < 0 {
			sections[i-1].text = strings.TrimRightFunc(sections[i-1].text, isJSSpace)
		}
		if a.RStrip && i+1 < len(sections) && sections[i+1].id < 0 {
			sections[i+1].text = strings.TrimLeftFunc(sections[i+1].text, isJSSpace)
		}
	}
	buf := t.bpe.pool.Get().(*wordBuf)
	defer t.bpe.release(buf)
	for _, s := range sections {
		switch {
		case s.id >= 0:
			out = append(out, s.id)
		case s.text != "": // stripping may have emptied it; a Prepend must not see it
			out = t.encodeSection(s.text, buf, out)
		}
	}
	if addSpecial {
		out = append(out, t.suffix...)
	}
	return out
}

// encodeSection normalizes, pre-tokenizes and merges text between added tokens.
func (t *Tokenizer) encodeSection(text string, buf *wordBuf, out []int32) []int32 {
	if t.normal != nil {
		text = t.normal(text)
	}
	if text == "" {
		return out
	}
	pieces := []string{text}
	for _, p := range t.pre {
		next := make([]string, 0, len(pieces))
		for _, s := range pieces {
			next = p(s, next)
		}
		pieces = next
	}
	start := len(out)
	for _, p := range pieces {
		out = t.encodePiece(p, buf, out)
	}
	if t.bpe.fuseUnk && t.bpe.unk >= 0 {
		out = fuseUnk(out, start, t.bpe.unk)
	}
	return out
}

// fuseUnk merges runs of the unknown token from out[start:] into one.
func fuseUnk(out []int32, start int, unk int32) []int32 {
	w := start
	for r := start; r < len(out); r++ {
		if out[r] == unk && w > start && out[w-1] == unk {
			continue
		}
		out[w] = out[r]
		w++
	}
	return out[:w]
}

// encodePiece appends the ids of one pre-token, from the cache when it
// holds them.
func (t *Tokenizer) encodePiece(p string, buf *wordBuf, out []int32) []int32 {
	if len(p) > cachedLen {
		return t.mergePiece(p, buf, out)
	}
	if ids, ok := t.bpe.cache.get(p); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = t.mergePiece(p, buf, out)
	t.bpe.cache.put(p, out[start:])
	return out
}

// mergePiece appends the ids of one pre-token, merging its characters.
func (t *Tokenizer) mergePiece(p string, buf *wordBuf, out []int32) []int32 {
	m := t.bpe
	nodes := buf.nodes[:0]
	if t.byteMap {
		if m.ignoreMerges {
			var sb strings.Builder
			sb.Grow(2 * len(p))
			for i := 0; i < len(p); i++ {
				sb.WriteRune(byteLevelRunes[p[i]])
			}
			if id, ok := m.vocab[sb.String()]; ok {
				return append(out, id)
			}
		}
		for i := 0; i < len(p); i++ {
			r := byteLevelRunes[p[i]]
			sym, ok := m.chars[r]
			if !ok {
				sym = noSym
			}
			nodes = append(nodes, node{sym: sym, r: r, prev: int32(i) - 1, next: int32(i) + 1, pos: int32(i)})
		}
	} else {
		if m.ignoreMerges {
			if id, ok := m.vocab[p]; ok {
				return append(out, id)
			}
		}
		for _, r := range p {
			sym, ok := m.chars[r]
			if !ok {
				sym = noSym
			}
			i := int32(len(nodes))
			nodes = append(nodes, node{sym: sym, r: r, prev: i - 1, next: i + 1, pos: i})
		}
	}
	if len(nodes) == 0 {
		return out
	}
	nodes[len(nodes)-1].next = -1
	buf.nodes = nodes
	return m.encodeWord(buf, out)
}

// Decode returns the text of ids, dropping the special tokens when
// skipSpecial and ids no token has. Bytes that are not valid UTF-8 become
// U+FFFD, one for each maximal invalid subsequence as in the reference.
// Decode(Encode(s, false), false) == s for valid UTF-8 s when the normalizer
// leaves s unchanged.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if skipSpecial && t.special[id] {
			continue
		}
		b = append(b, t.TokenBytes(id)...)
	}
	return lossyUTF8(b)
}

// lossyUTF8 replaces each maximal subpart of an invalid sequence by U+FFFD
// (the WHATWG and Unicode practice the reference's TextDecoder follows),
// where Go's own conversion would replace byte by byte.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return sb.String()
}

// invalidPrefix is the length of the maximal subpart at the start of b, which
// does not begin a valid sequence: the lead byte and the continuation bytes
// that could still have completed it.
func invalidPrefix(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c == 0xED:
		hi, need = 0x9F, 2
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	}
	n := 1
	for n <= need && n < len(b) && b[n] >= lo && b[n] <= hi {
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}

// isJSSpace is JavaScript's white space and line terminators, what the
// reference's trim of an lstrip or rstrip added token's neighbour removes.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}
