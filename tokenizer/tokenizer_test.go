package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// writeDir writes a tokenizer directory from its two files' contents.
func writeDir(t *testing.T, tok, cfg any) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]any{"tokenizer.json": tok, "tokenizer_config.json": cfg} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tinyJSON is a SentencePiece-style BPE in the shape of Gemma's: spaces
// become ▁, bytes outside the vocabulary fall back to <0xNN>, except 0xE2,
// whose characters are unknown.
func tinyJSON() map[string]any {
	vocab := map[string]int{"<unk>": 0}
	for b := range 256 {
		if b != 0xE2 {
			vocab[fmt.Sprintf("<0x%02X>", b)] = 1 + b
		}
	}
	for i, s := range []string{"a", "b", "ab", "▁", "▁ab", "<x>"} {
		vocab[s] = 257 + i
	}
	return map[string]any{
		"normalizer":     map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		"pre_tokenizer":  nil,
		"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<unk>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": [][]string{{"a", "b"}, {"▁", "ab"}},
			"unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true},
		"added_tokens": []any{
			map[string]any{"id": 0, "content": "<unk>", "special": true},
			map[string]any{"id": 262, "content": "<x>", "special": false, "lstrip": true, "rstrip": true},
		},
	}
}

func tinyConfig() map[string]any {
	return map[string]any{
		"bos_token":                 map[string]any{"__type": "AddedToken", "content": "<unk>"},
		"eos_token":                 "<x>",
		"additional_special_tokens": []any{"<x>"},
		"chat_template": []any{
			map[string]any{"name": "default", "template": "{{ messages }}"},
			map[string]any{"name": "tool_use", "template": "{{ tools }}"},
		},
	}
}

func TestTinyEncodeDecode(t *testing.T) {
	tk, err := Load(writeDir(t, tinyJSON(), tinyConfig()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, text string
		want       []int32
		decoded    string // "" when it is text
	}{
		{"merges in rank order", "ab ab", []int32{259, 261}, ""},
		{"byte fallback", "é", []int32{1 + 0xC3, 1 + 0xA9}, ""},
		{"lstrip and rstrip eat the spaces around an added token", "a <x> b", []int32{257, 262, 258}, "a<x>b"},
		{"unknown characters fuse into one unk", "€€", []int32{0}, "<unk>"},
		{"empty", "", []int32{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := tk.Encode(c.text, false)
			if !slices.Equal(got, c.want) {
				t.Fatalf("Encode(%q) = %v, want %v", c.text, got, c.want)
			}
			want := c.text
			if c.decoded != "" {
				want = c.decoded
			}
			if d := tk.Decode(got, false); d != want {
				t.Errorf("Decode(%v) = %q, want %q", got, d, want)
			}
		})
	}
	if got := tk.Encode("ab", true); !slices.Equal(got, []int32{0, 259}) {
		t.Errorf("Encode(ab, true) = %v: the template's token first", got)
	}
	if got := tk.Decode([]int32{0, 259, 262}, true); got != "ab" {
		t.Errorf("Decode skipping special = %q, want the special and additional special tokens dropped", got)
	}
	if b := tk.TokenBytes(1 + 0xC3); !slices.Equal(b, []byte{0xC3}) {
		t.Errorf("TokenBytes(<0xC3>) = %x", b)
	}
	if b := tk.TokenBytes(260); string(b) != " " {
		t.Errorf("TokenBytes(▁) = %q", b)
	}
	if b := tk.TokenBytes(1 + 0xE2); b != nil {
		t.Errorf("TokenBytes of an id no token has = %q", b)
	}
}

// TestIgnoreMerges: with ignore_merges a pre-token the vocabulary holds whole
// is that token, though no merge leads to it.
func TestIgnoreMerges(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		tok := tinyJSON()
		model := tok["model"].(map[string]any)
		model["vocab"].(map[string]int)["ba"] = 263
		model["ignore_merges"] = ignore
		tk, err := Load(writeDir(t, tok, tinyConfig()))
		if err != nil {
			t.Fatal(err)
		}
		want := []int32{258, 257}
		if ignore {
			want = []int32{263}
		}
		if got := tk.Encode("ba", false); !slices.Equal(got, want) {
			t.Errorf("ignore_merges %v: Encode(ba) = %v, want %v", ignore, got, want)
		}
	}
}

// TestStrippedEmpty: a section an rstrip token empties is not normalized, so
// a Prepend normalizer adds nothing there, as in the reference.
func TestStrippedEmpty(t *testing.T) {
	tok := tinyJSON()
	tok["normalizer"] = map[string]any{"type": "Prepend", "prepend": "▁"}
	tk, err := Load(writeDir(t, tok, tinyConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tk.Encode("a <x> ", false), []int32{260, 257, 262}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}

// TestConcurrentEncode encodes from several goroutines at once, filling the
// shared word cache and reusing buffers, and expects what another tokenizer
// gets alone.
func TestConcurrentEncode(t *testing.T) {
	dir := writeDir(t, tinyJSON(), tinyConfig())
	alone, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	texts := corpus(200)
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = alone.Encode(s, false)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, s := range texts {
				if got := tk.Encode(s, false); !slices.Equal(got, want[i]) {
					t.Errorf("Encode(%q) = %v concurrently, %v alone", s, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestTinyConfig(t *testing.T) {
	tk, err := Load(writeDir(t, tinyJSON(), tinyConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tk.BOS(); !ok || id != 0 {
		t.Errorf("BOS from an AddedToken object = %d, %v", id, ok)
	}
	if id, ok := tk.EOS(); !ok || id != 262 {
		t.Errorf("EOS from a string = %d, %v", id, ok)
	}
	if got := tk.SpecialIDs(); !slices.Equal(got, []int32{0, 262}) {
		t.Errorf("SpecialIDs = %v, want the special added token and the additional one", got)
	}
	if tk.ChatTemplate() != "{{ messages }}" {
		t.Errorf("ChatTemplate = %q", tk.ChatTemplate())
	}
	if s, ok := tk.NamedChatTemplate("tool_use"); !ok || s != "{{ tools }}" {
		t.Errorf("NamedChatTemplate(tool_use) = %q, %v", s, ok)
	}
	if id, ok := tk.ID("▁ab"); !ok || id != 261 {
		t.Errorf("ID(▁ab) = %d, %v", id, ok)
	}
	if s, ok := tk.Token(261); !ok || s != "▁ab" {
		t.Errorf("Token(261) = %q, %v", s, ok)
	}
	if tk.VocabSize() != 263 {
		t.Errorf("VocabSize = %d", tk.VocabSize())
	}
	if tk.Config()["eos_token"] != "<x>" {
		t.Errorf("Config = %v", tk.Config())
	}
}

func TestLoadErrors(t *testing.T) {
	with := func(key string, v any) map[string]any {
		m := tinyJSON()
		m[key] = v
		return m
	}
	model := tinyJSON()["model"].(map[string]any)
	model["type"] = "WordPiece"
	for _, c := range []struct {
		name string
		dir  func() string
		want error
	}{
		{"missing directory", func() string { return filepath.Join(t.TempDir(), "none") }, ErrInvalid},
		{"not JSON", func() string {
			d := writeDir(t, tinyJSON(), tinyConfig())
			if err := os.WriteFile(filepath.Join(d, "tokenizer.json"), []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
			return d
		}, ErrInvalid},
		{"WordPiece model", func() string { return writeDir(t, with("model", model), tinyConfig()) }, ErrUnsupported},
		{"Metaspace pre-tokenizer", func() string {
			return writeDir(t, with("pre_tokenizer", map[string]any{"type": "Metaspace"}), tinyConfig())
		}, ErrUnsupported},
		{"regex JavaScript cannot compile", func() string {
			return writeDir(t, with("pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?<=`}}), tinyConfig())
		}, ErrUnsupported},
		{"template token outside the vocabulary", func() string {
			return writeDir(t, with("post_processor", map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}}}), tinyConfig())
		}, ErrInvalid},
		{"no decoder", func() string { return writeDir(t, with("decoder", nil), tinyConfig()) }, ErrUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.dir())
			if !errors.Is(err, c.want) {
				t.Fatalf("Load: %v, want %v", err, c.want)
			}
		})
	}
}

func TestLossyUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{"ok é", "ok é"},
		{"\xe2\x82a", "\ufffda"},               // a truncated 3-byte sequence is one subpart
		{"\xe2\x82\xe2\x82\xac", "\ufffd€"},    // then a whole one
		{"\x80\x80", "\ufffd\ufffd"},           // stray continuation bytes, one each
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // a surrogate's bytes never start a valid sequence
		{"\xf0\x9f\x99", "\ufffd"},             // a truncated 4-byte sequence
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
	} {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestModels checks what the fetched models' configs name.
func TestModels(t *testing.T) {
	for _, c := range []struct {
		model    string
		bos, eos int32 // -1: none
		template bool
	}{
		{"qwen3", -1, 151645, true},
		{"llama3_1", 128000, 128009, true},
		{"gemma3", 2, 106, true},
		{"deepseek_v3", 0, 1, true},
		{"gptoss", 199998, 200002, false},
	} {
		t.Run(c.model, func(t *testing.T) {
			tk := load(t, c.model)
			if id, ok := tk.BOS(); id != c.bos || ok != (c.bos >= 0) {
				t.Errorf("BOS = %d, %v; want %d", id, ok, c.bos)
			}
			if id, ok := tk.EOS(); id != c.eos || !ok {
				t.Errorf("EOS = %d, %v; want %d", id, ok, c.eos)
			}
			if (tk.ChatTemplate() != "") != c.template {
				t.Errorf("ChatTemplate = %.40q", tk.ChatTemplate())
			}
			if !slices.Contains(tk.SpecialIDs(), c.eos) {
				t.Errorf("SpecialIDs lacks EOS %d", c.eos)
			}
			ids := tk.Encode("héllo 世界", false)
			var b []byte
			for _, id := range ids {
				b = append(b, tk.TokenBytes(id)...)
			}
			if string(b) != "héllo 世界" {
				t.Errorf("TokenBytes of %v = %q", ids, b)
			}
		})
	}
}

// prompt2K is about 2 KB of a game prompt and its feedback.
func prompt2K() string {
	var sb strings.Builder
	for _, s := range gameTexts() {
		if sb.Len() >= 2048 {
			break
		}
		sb.WriteString(s)
		sb.WriteString("\n")
	}
	s := sb.String()[:2048]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func BenchmarkEncode(b *testing.B) {
	prompt := prompt2K()
	for _, model := range models {
		b.Run(model, func(b *testing.B) {
			tk := load(b, model)
			n := len(tk.Encode(prompt, false))
			b.SetBytes(int64(len(prompt)))
			b.ReportAllocs()
			for b.Loop() {
				tk.Encode(prompt, false)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// FuzzEncodeDecode holds Decode(Encode(s)) to s on the models whose
// normalizer leaves text as it is (byte-level ones without NFC), and Encode
// to not panicking on anything.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range corpus(40) {
		f.Add(s)
	}
	f.Add("\xff\xfe<|im_start|>\x00")
	var tks []*Tokenizer
	for _, model := range []string{"llama3_1", "deepseek_v3", "gptoss"} {
		tks = append(tks, load(f, model))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range tks {
			ids := tk.Encode(s, false)
			if got := tk.Decode(ids, false); utf8.ValidString(s) && got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
		}
	})
}
