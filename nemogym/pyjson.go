package nemogym

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// appendPyString appends s as Python's json.dumps (ensure_ascii=True) quotes
// it: the short escapes for quote, backslash and \n \r \t \b \f, \u00XX for
// other control characters, and \uXXXX (surrogate pairs beyond the BMP) for
// everything outside ASCII. Invalid UTF-8 becomes U+FFFD, as Go strings
// decoded from JSON already are.
func appendPyString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u4 := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r < 0x20:
			b = u4(b, r)
		case r < utf8.RuneSelf:
			b = append(b, byte(r))
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			b = u4(u4(b, hi), lo)
		default:
			b = u4(b, r)
		}
	}
	return append(b, '"')
}

// appendPyFloat appends f as Python's float repr: the shortest round-trip
// digits, ".0" on integral values, exponent form below 1e-4 and from 1e16.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+16 and e-05; Python writes e+16 and e-05 too, but
		// keeps at least two exponent digits, as Go does.
		return append(b, s...)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return append(b, s...)
}
