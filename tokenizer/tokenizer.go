// Package tokenizer encodes and decodes text with a Hugging Face tokenizer
// directory (tokenizer.json and tokenizer_config.json), giving the token ids
// the model's own tokenizer gives.
//
// It covers the BPE tokenizers of the models the fleet serves: byte-level BPE
// with regex Split pre-tokenizers (Qwen3, Llama 3, DeepSeek V3, gpt-oss) and
// SentencePiece-style BPE with byte fallback (Gemma 3), with their added
// tokens, normalizers, post-processors and decoders. A component the package
// does not implement makes Load fail with ErrUnsupported rather than encode
// differently.
//
// The reference is transformers.js (the @lenml/tokenizers fork that
// scripts/fetch-tokenizers.sh installs): the parity test holds Encode to its
// ids on a generated corpus of every model. The pure-Go libraries for
// tokenizer.json that exist (github.com/sugarme/tokenizer,
// github.com/gomlx/go-huggingface) compile Split patterns with Go's regexp,
// which has no lookahead, so the `\s+(?!\S)` of every pattern here fails to
// compile and they fall back to other splits; bindings to the Rust library
// need cgo and a prebuilt library. So the package has its own pipeline, and
// runs the Split patterns with github.com/dlclark/regexp2/v2 in its ECMAScript
// Unicode mode, after the same rewrites the reference applies, so `\s`,
// `\p{L}` and `(?i:'s|...)` mean what they mean there. Unicode categories are
// Go's tables (Unicode 15.0 in Go 1.26): a character assigned since (a letter
// to a newer table, unassigned to Go's) can split differently.
//
// Encode with addSpecial adds what tokenizer.json's post-processor adds
// (Llama's and Gemma's BOS), as the reference does; transformers' Python
// LlamaTokenizerFast also adds a BOS where the config sets add_bos_token
// (DeepSeek V3), which neither does.
//
// Decode differs from the reference's decode in two ways: it never applies
// clean_up_tokenization_spaces (Llama 3.1's config asks for it), so it stays
// the inverse of Encode, and it keeps a byte-order mark at the start of a run
// of byte fallback tokens, which the reference's TextDecoder drops. The parity
// test compares it with the reference's decode without clean-up.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Sentinel errors of Load.
var (
	// ErrInvalid means a tokenizer file is missing, is not JSON, or lacks a
	// field the format requires.
	ErrInvalid = errors.New("invalid tokenizer")
	// ErrUnsupported means the tokenizer uses a component (model type,
	// normalizer, pre-tokenizer, post-processor or decoder) or an option this
	// package does not implement.
	ErrUnsupported = errors.New("unsupported tokenizer component")
)

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	vocab  map[string]int32 // model vocabulary with the added tokens over it
	tokens []string         // id to token string; "" where no token has the id
	bytes  [][]byte         // id to the bytes the token stands for

	added    *trie             // added tokens, matched in raw text before normalization
	addedTok map[int32]added   // added token by id
	special  map[int32]bool    // ids Decode drops when asked to skip special tokens
	normal   normalizer        // nil when there is none
	pre      []preTokenizer    // applied in order, each to every piece of the previous
	byteMap  bool              // pieces are mapped byte by byte before BPE (ByteLevel)
	bpe      *bpe              // the model
	prefix   []int32           // post-processor tokens before the text when addSpecial
	suffix   []int32           // and after it
	config   map[string]any    // tokenizer_config.json as read
	bos, eos int32             // -1 when the config names none in the vocabulary
	template map[string]string // chat templates by name; "default" for a single one
}

// added is one entry of tokenizer.json's added_tokens.
type added struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
	LStrip  bool   `json:"lstrip"`
	RStrip  bool   `json:"rstrip"`
}

// fileJSON is the part of tokenizer.json the package reads.
type fileJSON struct {
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	AddedTokens   []added         `json:"added_tokens"`
}

// Load reads dir/tokenizer.json and dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	var f fileJSON
	if err := readJSON(filepath.Join(dir, "tokenizer.json"), &f); err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := readJSON(filepath.Join(dir, "tokenizer_config.json"), &cfg); err != nil {
		return nil, err
	}
	t, err := build(&f, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", dir, err)
	}
	return t, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	return nil
}

func build(f *fileJSON, cfg map[string]any) (*Tokenizer, error) {
	t := &Tokenizer{config: cfg, addedTok: map[int32]added{}, special: map[int32]bool{}}
	m, err := parseBPE(f.Model)
	if err != nil {
		return nil, err
	}
	t.vocab = m.vocab
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("%w: added token %q with id %d", ErrInvalid, a.Content, a.ID)
		}
		t.vocab[a.Content] = a.ID
		t.addedTok[a.ID] = a
	}
	t.tokens = tokenTable(t.vocab, f.AddedTokens)
	if err := m.finish(t.vocab); err != nil {
		return nil, err
	}
	t.bpe = m
	t.added = newTrie(f.AddedTokens)
	if t.normal, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, t.byteMap, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.prefix, t.suffix, err = parsePostProcessor(f.PostProcessor, t.vocab); err != nil {
		return nil, err
	}
	if t.bytes, err = tokenBytes(f.Decoder, t.tokens, t.addedTok); err != nil {
		return nil, err
	}
	t.readConfig()
	return t, nil
}

// tokenTable inverts the vocabulary, the added tokens winning a shared id as
// they do in the reference.
func tokenTable(vocab map[string]int32, addedTokens []added) []string {
	n := int32(0)
	for _, id := range vocab {
		n = max(n, id+1)
	}
	tokens := make([]string, n)
	for s, id := range vocab {
		if id >= 0 {
			tokens[id] = s
		}
	}
	for _, a := range addedTokens {
		tokens[a.ID] = a.Content
	}
	return tokens
}

// readConfig takes the special tokens and chat templates from
// tokenizer_config.json.
func (t *Tokenizer) readConfig() {
	for id, a := range t.addedTok {
		if a.Special {
			t.special[id] = true
		}
	}
	if list, ok := t.config["additional_special_tokens"].([]any); ok {
		for _, v := range list {
			if id, ok := t.vocab[configToken(v)]; ok {
				t.special[id] = true
			}
		}
	}
	t.bos, t.eos = t.configID("bos_token"), t.configID("eos_token")
	t.template = map[string]string{}
	switch ct := t.config["chat_template"].(type) {
	case string:
		t.template["default"] = ct
	case []any:
		for _, v := range ct {
			e, _ := v.(map[string]any)
			name, _ := e["name"].(string)
			tmpl, ok := e["template"].(string)
			if name != "" && ok {
				t.template[name] = tmpl
			}
		}
	}
}

// configToken reads a token the config names either as a string or as an
// AddedToken object with a content field.
func configToken(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		s, _ := v["content"].(string)
		return s
	}
	return ""
}

func (t *Tokenizer) configID(key string) int32 {
	if id, ok := t.vocab[configToken(t.config[key])]; ok {
		return id
	}
	return -1
}

// ID returns the id of a token string (a vocabulary entry in the model's
// spelling, such as "Ġthe", or an added token such as "<|im_end|>").
func (t *Tokenizer) ID(token string) (int32, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token string of an id, or "" and false for an id no
// token has.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// TokenBytes returns the bytes a token stands for in decoded text: a
// byte-level token's bytes before the byte-to-character mapping, a byte
// fallback token <0xNN>'s one byte, an added token's content. The bytes of
// one token need not be valid UTF-8; callers streaming text cut where the
// bytes so far are. It returns nil for an id no token has. The slice must
// not be modified.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.bytes) {
		return nil
	}
	return t.bytes[id]
}

// VocabSize returns one more than the highest token id, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the id of the config's bos_token, if it names one.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns the id of the config's eos_token, if it names one.
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.eos >= 0 }

// SpecialIDs returns the ids of the special tokens (added tokens marked
// special and the config's additional_special_tokens), ascending.
func (t *Tokenizer) SpecialIDs() []int32 {
	ids := make([]int32, 0, len(t.special))
	for id := range t.special {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ChatTemplate returns the config's chat template as written: the single
// template, or the one named "default" of a list; "" when it has none.
func (t *Tokenizer) ChatTemplate() string { return t.template["default"] }

// NamedChatTemplate returns a template of the config's list by name (such as
// "tool_use"); a single template is named "default".
func (t *Tokenizer) NamedChatTemplate(name string) (string, bool) {
	s, ok := t.template[name]
	return s, ok
}

// Config returns tokenizer_config.json as read, for the variables a chat
// template uses (bos_token, eos_token and the like). It must not be modified.
func (t *Tokenizer) Config() map[string]any { return t.config }
