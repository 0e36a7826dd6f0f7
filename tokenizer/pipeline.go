package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a text section before pre-tokenization.
type normalizer func(string) string

// preTokenizer appends the pieces it splits s into.
type preTokenizer func(s string, out []string) []string

// component is the type tag every tokenizer.json component has.
type component struct {
	Type string `json:"type"`
}

// pattern is a Split or Replace pattern: a regex or a literal string.
type pattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c struct {
		component
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     pattern           `json:"pattern"`
		Content     string            `json:"content"`
		Prepend     string            `json:"prepend"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: normalizer: %w", ErrInvalid, err)
	}
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Prepend":
		return func(s string) string { return c.Prepend + s }, nil
	case "Replace":
		if c.Pattern.String != nil {
			old := *c.Pattern.String
			return func(s string) string { return strings.ReplaceAll(s, old, c.Content) }, nil
		}
		if c.Pattern.Regex == nil || strings.Contains(c.Content, "$") {
			return nil, fmt.Errorf("%w: Replace normalizer %s", ErrUnsupported, raw)
		}
		re, err := compileRegex(*c.Pattern.Regex)
		if err != nil {
			return nil, err
		}
		return func(s string) string {
			out, err := re.Replace(s, c.Content, -1, -1)
			mustMatch(err)
			return out
		}, nil
	case "Sequence":
		var seq []normalizer
		for _, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, n := range seq {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, c.Type)
}

// parsePreTokenizer returns the pre-tokenizers in order and whether the last
// is ByteLevel, whose byte-to-character mapping the BPE step does itself.
func parsePreTokenizer(raw json.RawMessage) ([]preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c struct {
		component
		PreTokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        pattern           `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("%w: pre_tokenizer: %w", ErrInvalid, err)
	}
	switch c.Type {
	case "Sequence":
		var all []preTokenizer
		for i, r := range c.PreTokenizers {
			p, byteLevel, err := parsePreTokenizer(r)
			if err != nil {
				return nil, false, err
			}
			all = append(all, p...)
			if byteLevel {
				if i != len(c.PreTokenizers)-1 {
					return nil, false, fmt.Errorf("%w: ByteLevel pre-tokenizer before another", ErrUnsupported)
				}
				return all, true, nil
			}
		}
		return all, false, nil
	case "Split":
		// The reference splits keeping every match as its own piece whatever
		// the behavior, except Removed; inverted patterns and Removed are left
		// out rather than guessed.
		if c.Invert || strings.EqualFold(c.Behavior, "Removed") {
			return nil, false, fmt.Errorf("%w: Split pre-tokenizer %s", ErrUnsupported, raw)
		}
		if c.Pattern.String != nil {
			return []preTokenizer{splitString(*c.Pattern.String)}, false, nil
		}
		if c.Pattern.Regex == nil {
			return nil, false, fmt.Errorf("%w: Split pre-tokenizer without a pattern", ErrInvalid)
		}
		re, err := compileRegex(*c.Pattern.Regex)
		if err != nil {
			return nil, false, err
		}
		return []preTokenizer{splitRegex(re)}, false, nil
	case "ByteLevel":
		var pre []preTokenizer
		if c.AddPrefixSpace {
			pre = append(pre, func(s string, out []string) []string {
				if !strings.HasPrefix(s, " ") {
					s = " " + s
				}
				return append(out, s)
			})
		}
		if c.UseRegex == nil || *c.UseRegex {
			pre = append(pre, splitRegex(gpt2Pattern))
		}
		return pre, true, nil
	}
	return nil, false, fmt.Errorf("%w: pre_tokenizer %q", ErrUnsupported, c.Type)
}

// gpt2Pattern is the split of a ByteLevel pre-tokenizer with use_regex.
var gpt2Pattern = regexp2.MustCompile(`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, regexOptions...)

var regexOptions = []regexp2.CompileOption{regexp2.ECMAScript | regexp2.Unicode, regexp2.OptionMaxBacktrackingStackSize(-1)}

// jsNeedless are escapes valid in the Rust syntax the patterns are written
// in but not in a JavaScript Unicode regex; the reference drops the backslash.
var jsNeedless = regexp.MustCompile(`\\([#&~])`)

// jsRewrites are the reference's rewrites of constructs JavaScript lacks,
// applied the same way so the pattern matches as it does there.
var jsRewrites = strings.NewReplacer(
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)`, `(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))`,
	" ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+", " ?[^\\s.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c]+",
)

// compileRegex compiles a tokenizer.json regex as the reference does: as a
// JavaScript regex with the u flag.
func compileRegex(expr string) (*regexp2.Regexp, error) {
	js := jsRewrites.Replace(jsNeedless.ReplaceAllString(expr, "$1"))
	re, err := regexp2.Compile(js, regexOptions...)
	if err != nil {
		return nil, fmt.Errorf("%w: regex %q: %w", ErrUnsupported, expr, err)
	}
	return re, nil
}

// mustMatch panics on a matcher error. With no backtracking limit and no
// timeout the matcher has none to give; one would be a bug to see loudly,
// not text to tokenize differently.
func mustMatch(err error) {
	if err != nil {
		panic(fmt.Sprintf("tokenizer: regex match: %v", err))
	}
}

// splitRegex keeps the matches and the text between them as pieces.
func splitRegex(re *regexp2.Regexp) preTokenizer {
	return func(s string, out []string) []string {
		idx, err := re.FindAllStringIndex(s, -1)
		mustMatch(err)
		prev := 0
		for _, m := range idx {
			if prev < m[0] {
				out = append(out, s[prev:m[0]])
			}
			if m[1] > m[0] {
				out = append(out, s[m[0]:m[1]])
			}
			prev = m[1]
		}
		if prev < len(s) {
			out = append(out, s[prev:])
		}
		return out
	}
}

// splitString is splitRegex for a literal pattern.
func splitString(sep string) preTokenizer {
	return func(s string, out []string) []string {
		for sep != "" {
			i := strings.Index(s, sep)
			if i < 0 {
				break
			}
			if i > 0 {
				out = append(out, s[:i])
			}
			out = append(out, s[i:i+len(sep)])
			s = s[i+len(sep):]
		}
		if s != "" {
			out = append(out, s)
		}
		return out
	}
}

// parsePostProcessor returns the ids a TemplateProcessing puts before and
// after a single text; the ByteLevel post-processor adds none.
func parsePostProcessor(raw json.RawMessage, vocab map[string]int32) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var c struct {
		component
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("%w: post_processor: %w", ErrInvalid, err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, r := range c.Processors {
			p, s, err := parsePostProcessor(r, vocab)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(prefix, p...), append(suffix, s...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range c.Single {
			switch {
			case item.Sequence != nil:
				seen = seen || item.Sequence.ID == "A"
			case item.SpecialToken != nil:
				id, ok := vocab[item.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("%w: post_processor token %q not in the vocabulary", ErrInvalid, item.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, id)
				} else {
					prefix = append(prefix, id)
				}
			}
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("%w: post_processor %q", ErrUnsupported, c.Type)
}

// byteLevelRunes maps each byte to the character byte-level vocabularies
// spell it with (GPT-2's bytes_to_unicode): printable Latin-1 stands for
// itself, the other bytes for 256 upwards in order.
var byteLevelRunes, byteLevelBytes = func() ([256]rune, map[rune]byte) {
	var runes [256]rune
	back := map[rune]byte{}
	n := rune(0)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = 256 + n
			n++
		}
		runes[b], back[r] = r, byte(b)
	}
	return runes, back
}()

// tokenBytes computes what each token decodes to, following the decoder:
// ByteLevel undoes the byte mapping of every token but the added ones;
// Replace, ByteFallback and Fuse (in a Sequence) apply to every token.
func tokenBytes(raw json.RawMessage, tokens []string, addedTok map[int32]added) ([][]byte, error) {
	steps, err := parseDecoder(raw)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(tokens))
	for id, tok := range tokens {
		if tok == "" {
			continue
		}
		_, isAdded := addedTok[int32(id)]
		b := []byte(tok)
		for _, st := range steps {
			b = st(b, isAdded)
		}
		out[id] = b
	}
	return out, nil
}

// decodeStep rewrites one token's bytes.
type decodeStep func(b []byte, added bool) []byte

func parseDecoder(raw json.RawMessage) ([]decodeStep, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("%w: no decoder", ErrUnsupported)
	}
	var c struct {
		component
		Decoders []json.RawMessage `json:"decoders"`
		Pattern  pattern           `json:"pattern"`
		Content  string            `json:"content"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: decoder: %w", ErrInvalid, err)
	}
	switch c.Type {
	case "Sequence":
		var all []decodeStep
		for _, r := range c.Decoders {
			s, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			all = append(all, s...)
		}
		return all, nil
	case "Fuse":
		return nil, nil // joining is what Decode does anyway
	case "ByteLevel":
		return []decodeStep{unmapBytes}, nil
	case "ByteFallback":
		return []decodeStep{fallbackByte}, nil
	case "Replace":
		if c.Pattern.String == nil {
			return nil, fmt.Errorf("%w: Replace decoder %s", ErrUnsupported, raw)
		}
		old := *c.Pattern.String
		return []decodeStep{func(b []byte, _ bool) []byte {
			return []byte(strings.ReplaceAll(string(b), old, c.Content))
		}}, nil
	}
	return nil, fmt.Errorf("%w: decoder %q", ErrUnsupported, c.Type)
}

func unmapBytes(b []byte, added bool) []byte {
	if added {
		return b
	}
	out := make([]byte, 0, len(b))
	for _, r := range string(b) {
		if c, ok := byteLevelBytes[r]; ok {
			out = append(out, c)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// fallbackByte turns <0xNN> into the byte NN.
func fallbackByte(b []byte, _ bool) []byte {
	if len(b) != 6 || string(b[:3]) != "<0x" || b[5] != '>' {
		return b
	}
	var v byte
	for _, c := range b[3:5] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return b
		}
	}
	return []byte{v}
}
