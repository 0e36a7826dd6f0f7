package tokenizer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/rollfleet/rollfleet/internal/tokenizertest"
)

var (
	models        = tokenizertest.Models
	fetchHint     = tokenizertest.FetchHint
	tokenizersDir = tokenizertest.Root
)

// loaded keeps the fetched models' tokenizers for the package's tests, which
// would otherwise each spend seconds loading the same files.
var loaded = struct {
	sync.Mutex
	m map[string]*Tokenizer
}{m: map[string]*Tokenizer{}}

// load loads a fetched model's tokenizer or skips the test.
func load(tb testing.TB, model string) *Tokenizer {
	tb.Helper()
	loaded.Lock()
	defer loaded.Unlock()
	if tk := loaded.m[model]; tk != nil {
		return tk
	}
	dir := filepath.Join(tokenizersDir(), model)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Skipf("no %s tokenizer: %s", model, fetchHint)
	}
	tk, err := Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	loaded.m[model] = tk
	return tk
}

// refLine is one line of testdata/reference.mjs's output.
type refLine struct {
	A []int32 `json:"a"`
	B []int32 `json:"b"`
	D string  `json:"d"`
}

// reference returns the reference's output for the corpus, from the cache
// beside the tokenizers when it holds this corpus and model, else by running
// node (and caching what it wrote).
func reference(t *testing.T, model string, corpusJSONL []byte) []refLine {
	t.Helper()
	root := tokenizersDir()
	dir := filepath.Join(root, model)
	h := sha256.New()
	h.Write(corpusJSONL)
	for _, f := range []string{filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"), filepath.Join("testdata", "reference.mjs")} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("%v: %s", err, fetchHint)
		}
		h.Write(data)
	}
	cached := filepath.Join(root, "parity", model+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".jsonl")
	if _, err := os.Stat(cached); err != nil {
		runReference(t, root, dir, corpusJSONL, cached)
	}
	f, err := os.Open(cached)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []refLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l refLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", cached, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func runReference(t *testing.T, root, dir string, corpusJSONL []byte, cached string) {
	t.Helper()
	mainMjs := filepath.Join(root, "node", "node_modules", "@lenml", "tokenizers", "dist", "main.mjs")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(mainMjs); err != nil || serr != nil {
		t.Skipf("no cached reference output and no node with @lenml/tokenizers: %s", fetchHint)
	}
	tmp := t.TempDir()
	in := filepath.Join(tmp, "corpus.jsonl")
	if err := os.WriteFile(in, corpusJSONL, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	part := cached + ".part"
	cmd := exec.CommandContext(t.Context(), node, filepath.Join("testdata", "reference.mjs"), mainMjs, dir, in, part)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reference: %v\n%s", err, out)
	}
	if err := os.Rename(part, cached); err != nil {
		t.Fatal(err)
	}
	// Outputs for an older corpus or tokenizer are of no more use.
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(cached), filepath.Base(dir)+"-*.jsonl"))
	for _, f := range old {
		if f != cached {
			os.Remove(f)
		}
	}
}

// TestParity holds Encode to the reference's ids for every corpus string and
// model, with and without special tokens, and Decode to its text.
func TestParity(t *testing.T) {
	strs := corpus(10000)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, s := range strs {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			if testing.Short() && model != "qwen3" && model != "llama3_1" {
				t.Skip("-short holds Qwen3 and Llama 3.1 alone to the reference (loading a large vocabulary is slow with -race)")
			}
			tk := load(t, model)
			ref := reference(t, model, buf.Bytes())
			if len(ref) != len(strs) {
				t.Fatalf("reference has %d lines for %d strings", len(ref), len(strs))
			}
			var bad, badSpecial, badDecode, roundTrips int
			// -short checks every tenth string (the reference's output is
			// for the whole corpus, cached once).
			step := 1
			if testing.Short() {
				step = 10
			}
			for i, s := range strs {
				if i%step != 0 {
					continue
				}
				ids := tk.Encode(s, false)
				if !slices.Equal(ids, ref[i].A) {
					if bad++; bad <= 5 {
						t.Errorf("Encode(%q, false)\n got %v\nwant %v", s, ids, ref[i].A)
					}
				}
				if got := tk.Encode(s, true); !slices.Equal(got, ref[i].B) {
					if badSpecial++; badSpecial <= 5 {
						t.Errorf("Encode(%q, true)\n got %v\nwant %v", s, got, ref[i].B)
					}
				}
				if got := tk.Decode(ref[i].A, false); got != ref[i].D {
					if badDecode++; badDecode <= 5 {
						t.Errorf("Decode(%v) = %q, reference %q", ref[i].A, got, ref[i].D)
					}
				}
				if ref[i].D == s {
					roundTrips++
					if got := tk.Decode(ids, false); got != s {
						t.Errorf("Decode(Encode(%q)) = %q", s, got)
					}
				}
			}
			t.Logf("%s: %d strings, mismatches: %d without special tokens, %d with, %d decodes; %d round trips the reference also makes",
				model, (len(strs)+step-1)/step, bad, badSpecial, badDecode, roundTrips)
		})
	}
}
