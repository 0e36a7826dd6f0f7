package toyllm

import (
	"slices"
	"strconv"
	"testing"
)

func TestTokenizerRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		text string
		ids  []int32 // nil: not checked
	}{
		{name: "empty", text: "", ids: []int32{}},
		{name: "ascii", text: "hi!", ids: []int32{'h', 'i', '!'}},
		{name: "special tokens", text: "<|im_start|>user\nx<|im_end|><|endoftext|>",
			ids: []int32{ImStartID, 'u', 's', 'e', 'r', '\n', 'x', ImEndID, EndOfTextID}},
		{name: "multibyte UTF-8", text: "é世🎲", ids: []int32{0xc3, 0xa9, 0xe4, 0xb8, 0x96, 0xf0, 0x9f, 0x8e, 0xb2}},
		{name: "partial special stays bytes", text: "<|im_end|", ids: []int32{'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|'}},
		{name: "special after a lone bracket", text: "<<|im_end|>", ids: []int32{'<', ImEndID}},
		{name: "invalid UTF-8 is kept byte for byte", text: "\xff\xfe<|im_start|>\x80"},
		{name: "game text", text: `You are playing Guess The Number. \boxed{14}` + "\n"},
	}
	var tok Tokenizer
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids := tok.Encode(tc.text)
			if tc.ids != nil && !slices.Equal(ids, tc.ids) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, ids, tc.ids)
			}
			for _, id := range ids {
				if !inVocab(id) {
					t.Errorf("Encode(%q) gave id %d outside the vocabulary", tc.text, id)
				}
			}
			if got := tok.Decode(ids); got != tc.text {
				t.Errorf("Decode(Encode(%q)) = %q", tc.text, got)
			}
		})
	}
}

func TestTokenizerDecode(t *testing.T) {
	tests := []struct {
		name        string
		ids         []int32
		skipSpecial bool
		want        string
	}{
		{name: "specials kept", ids: []int32{'a', ImEndID, '\n', ImStartID}, want: "a<|im_end|>\n<|im_start|>"},
		{name: "specials skipped", ids: []int32{'a', ImEndID, '\n', EndOfTextID}, skipSpecial: true, want: "a\n"},
		{name: "out of vocabulary", ids: []int32{'a', VocabSize, -1}, want: "a\uFFFD\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendDecode(nil, tc.ids, tc.skipSpecial)); got != tc.want {
				t.Errorf("decode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTokenStrings(t *testing.T) {
	seen := map[string]int32{}
	for id := range int32(VocabSize) {
		s := tokenStrings[id]
		if prev, dup := seen[s]; dup {
			t.Errorf("ids %d and %d share the token string %q", prev, id, s)
		}
		seen[s] = id
		if want := "token_id:" + strconv.Itoa(int(id)); tokenIDStrings[id] != want {
			t.Errorf("tokenIDStrings[%d] = %q, want %q", id, tokenIDStrings[id], want)
		}
	}
	for id, want := range map[int32]string{'a': "a", '\n': "\n", 0xe4: "<0xE4>", ImEndID: "<|im_end|>"} {
		if tokenStrings[id] != want {
			t.Errorf("tokenStrings[%d] = %q, want %q", id, tokenStrings[id], want)
		}
	}
}
