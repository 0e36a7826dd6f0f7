package envs

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIntDigits is CPython's default limit on the length of a decimal string
// that int() converts (sys.int_info.default_max_str_digits); longer runs raise,
// and GEM's games turn that into a format error.
const maxIntDigits = 4300

// pyInt converts a run of Unicode decimal digits (category Nd, as matched by
// \p{Nd}) the way Python's int() does: digits of any script, mixed freely,
// leading zeros allowed, arbitrary size. It returns the value as canonical
// ASCII decimal ("0" for zero) so that huge values compare and print exactly.
// ok is false when the run is empty, holds a non-digit, or is longer than
// maxIntDigits code points (leading zeros count, as in CPython).
func pyInt(digits string) (canonical string, ok bool) {
	if digits == "" || utf8.RuneCountInString(digits) > maxIntDigits {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(digits))
	for _, r := range digits {
		d, isDigit := digitValue(r)
		if !isDigit {
			return "", false
		}
		if b.Len() == 0 && d == 0 {
			continue // leading zero
		}
		b.WriteByte(byte('0' + d))
	}
	if b.Len() == 0 {
		return "0", true
	}
	return b.String(), true
}

// digitValue returns the value of a Unicode decimal digit. Nd code points come
// in contiguous runs of ten, zero to nine, and every range of unicode.Nd starts
// at a zero (several runs may share one range), so the value is the offset
// from the range start modulo 10.
func digitValue(r rune) (int, bool) {
	if '0' <= r && r <= '9' {
		return int(r - '0'), true
	}
	for _, rg := range unicode.Nd.R16 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); lo <= r && r <= hi {
			return int(r-lo) % 10, true
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); lo <= r && r <= hi {
			return int(r-lo) % 10, true
		}
	}
	return 0, false
}
