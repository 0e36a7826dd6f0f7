package envs

import (
	"regexp"
	"testing"
	"unicode"
)

// TestPyClasses checks isPyDigit against category Nd and isPySpace against
// pySpaceClass over every code point.
func TestPyClasses(t *testing.T) {
	space := regexp.MustCompile(`^` + pySpaceClass + `$`)
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if got, want := isPyDigit(r), unicode.Is(unicode.Nd, r); got != want {
			t.Errorf("isPyDigit(%U) = %v, want %v", r, got, want)
		}
		if r <= 0x3000 { // no Python whitespace lies above U+3000
			if got, want := isPySpace(r), space.MatchString(string(r)); got != want {
				t.Errorf("isPySpace(%U) = %v, want %v", r, got, want)
			}
		} else if isPySpace(r) {
			t.Errorf("isPySpace(%U) = true", r)
		}
	}
}
