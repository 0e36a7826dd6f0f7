package toyllm

import (
	"strconv"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
)

// Token ids of the toy vocabulary: ids 0..255 are the bytes themselves, and
// three special tokens follow.
const (
	// EndOfTextID is <|endoftext|>, the model's end-of-sequence token.
	EndOfTextID int32 = 256
	// ImStartID is <|im_start|>.
	ImStartID int32 = 257
	// ImEndID is <|im_end|>, which ends an assistant turn.
	ImEndID int32 = 258
	// VocabSize is the number of token ids.
	VocabSize = 259
)

// specialText maps special ids (minus 256) to their strings.
var specialText = [...]string{chat.EndOfText, chat.ImStart, chat.ImEnd}

// Tokenizer is the toy model's byte-level tokenizer. Text encodes to one
// token per byte, except that the special-token strings "<|endoftext|>",
// "<|im_start|>" and "<|im_end|>" encode to their special ids, as vLLM's
// /tokenize does for text. There is no BOS token, so "add_special_tokens"
// changes nothing.
type Tokenizer struct{}

// Encode returns the token ids of text.
func (Tokenizer) Encode(text string) []int32 {
	return appendEncode(make([]int32, 0, len(text)), text)
}

// appendEncode appends the token ids of text to dst.
func appendEncode(dst []int32, text string) []int32 {
	for i := 0; i < len(text); {
		if text[i] == '<' {
			if id, n := specialAt(text[i:]); n > 0 {
				dst = append(dst, id)
				i += n
				continue
			}
		}
		dst = append(dst, int32(text[i]))
		i++
	}
	return dst
}

// specialAt reports the special token that s starts with and its length in
// bytes, or n == 0 when s starts with none.
func specialAt(s string) (id int32, n int) {
	for k, sp := range specialText {
		if strings.HasPrefix(s, sp) {
			return EndOfTextID + int32(k), len(sp)
		}
	}
	return 0, 0
}

// Decode returns the text of ids; special ids decode to their strings, so
// Decode(Encode(s)) == s for every s. Ids outside the vocabulary decode to
// U+FFFD, the replacement character, so that they stay visible.
func (Tokenizer) Decode(ids []int32) string {
	return string(appendDecode(make([]byte, 0, len(ids)), ids, false))
}

// appendDecode appends the text of ids to dst, leaving special tokens out
// when skipSpecial is set.
func appendDecode(dst []byte, ids []int32, skipSpecial bool) []byte {
	for _, id := range ids {
		dst = appendTokenText(dst, id, skipSpecial)
	}
	return dst
}

// appendTokenText appends the text of one token to dst.
func appendTokenText(dst []byte, id int32, skipSpecial bool) []byte {
	switch {
	case id >= 0 && id < 256:
		return append(dst, byte(id))
	case id >= EndOfTextID && id < VocabSize:
		if skipSpecial {
			return dst
		}
		return append(dst, specialText[id-EndOfTextID]...)
	default:
		return append(dst, "\uFFFD"...)
	}
}

// inVocab reports whether id is a token id of the vocabulary.
func inVocab(id int32) bool { return id >= 0 && id < VocabSize }

// tokenStrings holds, per id, the token's string as logprobs show it: ASCII
// bytes as themselves, other bytes as "<0xNN>" (the convention of byte-fallback
// vocabularies, which keeps every token string distinct and valid UTF-8), and
// special tokens as their strings. tokenIDStrings holds "token_id:<id>", the
// form vLLM uses with return_tokens_as_token_ids. Both are built once so that
// responses never format a token per request.
var tokenStrings, tokenIDStrings = buildTokenStrings()

// buildTokenStrings computes tokenStrings and tokenIDStrings.
func buildTokenStrings() (strs, idStrs [VocabSize]string) {
	const hex = "0123456789ABCDEF"
	for id := range VocabSize {
		switch {
		case id < 0x80:
			strs[id] = string(rune(id))
		case id < 256:
			strs[id] = "<0x" + string(hex[id>>4]) + string(hex[id&15]) + ">"
		default:
			strs[id] = specialText[id-256]
		}
		idStrs[id] = "token_id:" + strconv.Itoa(id)
	}
	return strs, idStrs
}
