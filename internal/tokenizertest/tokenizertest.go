// Package tokenizertest finds the real tokenizer directories that
// scripts/fetch-tokenizers.sh caches, for tests in any package.
package tokenizertest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Models are the tokenizer directories scripts/fetch-tokenizers.sh fetches.
var Models = []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"}

// FetchHint tells how to get the tokenizers when they are missing.
const FetchHint = "run scripts/fetch-tokenizers.sh (or set ROLLFLEET_TOKENIZERS)"

// Root is the cache of tokenizer directories: $ROLLFLEET_TOKENIZERS, else
// .cache/tokenizers at the top of the repository.
func Root() string {
	if d := os.Getenv("ROLLFLEET_TOKENIZERS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", ".cache", "tokenizers")
}

// Dir returns the directory of model's tokenizer, or skips the test with
// FetchHint when it has not been fetched.
func Dir(tb testing.TB, model string) string {
	tb.Helper()
	dir := filepath.Join(Root(), model)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Skipf("tokenizer %s not fetched: %s", model, FetchHint)
	}
	return dir
}

// NodeModules is the directory holding the JavaScript reference
// (@lenml/tokenizers, @huggingface/jinja), or "" when it is missing.
func NodeModules() string {
	dir := filepath.Join(Root(), "node", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "@lenml", "tokenizers")); err != nil {
		return ""
	}
	return dir
}
