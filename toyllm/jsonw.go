package toyllm

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// The generation endpoints write their JSON by hand into pooled buffers:
// encoding/json would allocate per token (a map per position for vLLM's
// top_logprobs), and the stand-in must stay far cheaper than the system it
// serves.

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it (without HTML escaping): invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers;
		// encoding/json escapes them too.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// minLogprob is the floor vLLM puts on reported logprobs, so that JSON never
// carries -Infinity.
const minLogprob = -9999.0

// appendLogprob appends a logprob, floored at minLogprob, formatted as
// encoding/json formats a float64.
func appendLogprob(dst []byte, f float64) []byte {
	if f < minLogprob || math.IsNaN(f) {
		f = minLogprob
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// logprobFormatter formats logprobs, remembering the last few: a response
// repeats a handful of distinct values many times, and formatting a float
// is the costliest part of writing it.
type logprobFormatter struct {
	n    int
	bits [8]uint64
	size [8]uint8
	text [8][32]byte
}

// append appends v as appendLogprob does.
func (f *logprobFormatter) append(dst []byte, v float64) []byte {
	bits := math.Float64bits(v)
	for i := range f.n {
		if f.bits[i] == bits {
			return append(dst, f.text[i][:f.size[i]]...)
		}
	}
	start := len(dst)
	dst = appendLogprob(dst, v)
	if k := f.n; k < len(f.bits) && len(dst)-start <= len(f.text[k]) {
		f.bits[k], f.size[k] = bits, uint8(copy(f.text[k][:], dst[start:]))
		f.n++
	}
	return dst
}

// smallInts holds the decimal text of 0..VocabSize-1, so that token ids are
// written without formatting.
var smallInts = func() (t [VocabSize]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// appendIDs appends a JSON array of token ids (or other integers).
func appendIDs(dst []byte, ids []int32) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		if id >= 0 && id < VocabSize {
			dst = append(dst, smallInts[id]...)
		} else {
			dst = strconv.AppendInt(dst, int64(id), 10)
		}
	}
	return append(dst, ']')
}

// tokenJSON holds the JSON-quoted token strings of tokenStrings and
// tokenIDStrings, and tokenBytesJSON each token's bytes as a JSON array.
var tokenJSON, tokenIDJSON, tokenBytesJSON = buildTokenJSON()

// buildTokenJSON computes tokenJSON, tokenIDJSON and tokenBytesJSON.
func buildTokenJSON() (strs, idStrs, byteArrays [VocabSize]string) {
	for id := range VocabSize {
		strs[id] = string(appendJSONString(nil, tokenStrings[id]))
		idStrs[id] = string(appendJSONString(nil, tokenIDStrings[id]))
		b := []byte{'['}
		for i, c := range appendTokenText(nil, int32(id), false) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(c), 10)
		}
		byteArrays[id] = string(append(b, ']'))
	}
	return strs, idStrs, byteArrays
}
