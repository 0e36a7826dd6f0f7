package envs

import (
	"strings"
	"testing"
	"unicode"
)

// TestNdTableShape checks the assumption digitValue rests on: every range of
// unicode.Nd is contiguous and holds whole runs of ten digits.
func TestNdTableShape(t *testing.T) {
	check := func(lo, hi, stride uint32) {
		if stride != 1 || (hi-lo+1)%10 != 0 {
			t.Errorf("Nd range %#x-%#x stride %d is not whole runs of ten", lo, hi, stride)
		}
	}
	for _, r := range unicode.Nd.R16 {
		check(uint32(r.Lo), uint32(r.Hi), uint32(r.Stride))
	}
	for _, r := range unicode.Nd.R32 {
		check(r.Lo, r.Hi, r.Stride)
	}
}

func TestDigitValue(t *testing.T) {
	// Values from Python's int(chr(cp)).
	tests := []struct {
		r      rune
		want   int
		wantOK bool
	}{
		{'0', 0, true},
		{'9', 9, true},
		{'\u0665', 5, true},     // ARABIC-INDIC DIGIT FIVE
		{'\U0001D7D3', 5, true}, // MATHEMATICAL BOLD DIGIT FIVE
		{'\U0001D7CE', 0, true}, // MATHEMATICAL BOLD DIGIT ZERO (start of a 50-digit range)
		{'\U0001D7D8', 0, true}, // MATHEMATICAL DOUBLE-STRUCK DIGIT ZERO (second run of that range)
		{'\U0001D7FF', 9, true}, // MATHEMATICAL MONOSPACE DIGIT NINE (end of that range)
		{'\u0966', 0, true},     // DEVANAGARI DIGIT ZERO
		{'\u09EF', 9, true},     // BENGALI DIGIT NINE
		{'\u0E59', 9, true},     // THAI DIGIT NINE
		{'\u1049', 9, true},     // MYANMAR DIGIT NINE
		{'\uFF10', 0, true},     // FULLWIDTH DIGIT ZERO
		{'\uFF19', 9, true},     // FULLWIDTH DIGIT NINE
		{'\U000104A0', 0, true}, // OSMANYA DIGIT ZERO
		{'\U0001E959', 9, true}, // ADLAM DIGIT NINE
		{'\U0001FBF9', 9, true}, // SEGMENTED DIGIT NINE
		{'²', 0, false},         // superscript: category No, not Nd
		{'\u216B', 0, false},    // ROMAN NUMERAL TWELVE: Nl
		{'½', 0, false},
		{'a', 0, false},
		{'\uFFFD', 0, false},
	}
	for _, tt := range tests {
		got, ok := digitValue(tt.r)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("digitValue(%U) = %d, %v; want %d, %v", tt.r, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestPyInt(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string
		wantOK bool
	}{
		{"ascii", "42", "42", true},
		{"zero", "0", "0", true},
		{"zeros", "000", "0", true},
		{"leading zeros", "0007", "7", true},
		{"arabic-indic", "٤٢", "42", true},
		{"mathematical bold", "𝟒𝟐", "42", true},
		{"mixed scripts", "٤𝟐0", "420", true},
		{"mixed leading zeros", "٠𝟎07", "7", true},
		{"thirty digits", "123456789012345678901234567890", "123456789012345678901234567890", true},
		{"4300 digits", "1" + strings.Repeat("0", 4299), "1" + strings.Repeat("0", 4299), true},
		{"4300 with leading zeros", strings.Repeat("0", 4299) + "5", "5", true},
		{"4300 multibyte counts code points", strings.Repeat("٠", 4299) + "٥", "5", true},
		{"4301 digits", "1" + strings.Repeat("0", 4300), "", false},
		{"4301 leading zeros count", strings.Repeat("0", 4300) + "5", "", false},
		{"empty", "", "", false},
		{"non-digit", "1a", "", false},
		{"superscript", "²", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pyInt(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("pyInt(%.40q) = %.40q, %v; want %.40q, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
