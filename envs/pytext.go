package envs

import "unicode"

// pySpaceClass is Python's Unicode \s (str.isspace, also str.split()'s
// separator set) as a Go regexp character class: Go's \s is ASCII-only
// (without \v) and unicode.IsSpace lacks U+001C..U+001F.
const pySpaceClass = `[\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

// isPySpace reports whether r is in Python's Unicode \s; it is the rune form
// of pySpaceClass.
func isPySpace(r rune) bool {
	switch {
	case r <= 0x20:
		return r >= '\t' && r <= '\r' || r >= 0x1c
	case r < 0x85:
		return false
	}
	switch r {
	case 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// isPyDigit is Python's Unicode \d: category Nd.
func isPyDigit(r rune) bool {
	if '0' <= r && r <= '9' {
		return true
	}
	return r > unicode.MaxASCII && unicode.Is(unicode.Nd, r)
}

// skipRunes returns the byte length of the longest prefix of s whose runes
// satisfy in. Invalid UTF-8 decodes to U+FFFD, as in Go's regexp, and
// satisfies neither isPySpace nor isPyDigit.
func skipRunes(s string, in func(rune) bool) int {
	for i, r := range s {
		if !in(r) {
			return i
		}
	}
	return len(s)
}
