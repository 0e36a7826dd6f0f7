package toyllm

import (
	"math"
	"strconv"

	"github.com/rollfleet/rollfleet/internal/jsonw"
)

// The generation endpoints write their JSON by hand into pooled buffers:
// encoding/json would allocate per token (a map per position for vLLM's
// top_logprobs), and the stand-in must stay far cheaper than the system it
// serves.

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

// tokenJSON holds the JSON-quoted token strings of tokenStrings and
// tokenIDStrings, and tokenBytesJSON each token's bytes as a JSON array.
var tokenJSON, tokenIDJSON, tokenBytesJSON = buildTokenJSON()

// buildTokenJSON computes tokenJSON, tokenIDJSON and tokenBytesJSON.
func buildTokenJSON() (strs, idStrs, byteArrays [VocabSize]string) {
	for id := range VocabSize {
		strs[id] = string(jsonw.AppendString(nil, tokenStrings[id]))
		idStrs[id] = string(jsonw.AppendString(nil, tokenIDStrings[id]))
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
