// Package jsonw appends JSON values to byte slices by hand, for the hot
// paths where encoding/json's reflection and per-value allocations cost too
// much: a request or response with thousands of token ids is written into a
// pooled buffer with no allocation beyond the buffer's growth.
package jsonw

import (
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s to dst as a JSON string, escaped byte for byte as
// encoding/json escapes it with HTML escaping off: invalid UTF-8 becomes
// U+FFFD, and U+2028 and U+2029 are escaped.
func AppendString(dst []byte, s string) []byte {
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
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
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
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendInt32s appends vals to dst as a JSON array of numbers. Values from
// 0 to 999, such as the ids of a small vocabulary or short offsets, are
// written digit by digit without a call to strconv.
func AppendInt32s(dst []byte, vals []int32) []byte {
	dst = append(dst, '[')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch {
		case uint32(v) >= 1000: // negative, or four digits or more
			dst = strconv.AppendInt(dst, int64(v), 10)
		case v < 10:
			dst = append(dst, byte('0'+v))
		case v < 100:
			dst = append(dst, byte('0'+v/10), byte('0'+v%10))
		default:
			dst = append(dst, byte('0'+v/100), byte('0'+v/10%10), byte('0'+v%10))
		}
	}
	return append(dst, ']')
}
