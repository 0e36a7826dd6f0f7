package vllm

import (
	"errors"
	"testing"
)

// TestMalformedSequenceIsAnError decodes malformed replies one after the
// other, among them object keys that end in a dangling escape, the sequence
// on which goccy/go-json (which decoded replies once) read past its buffer
// and panicked: each must come back as ErrBadResponse.
func TestMalformedSequenceIsAnError(t *testing.T) {
	inputs := []string{`{"\p#\`, `{"choices":[{"\`, completionJSON, `{"choices":[{"text":"\`, `{"\`}
	for range 2000 {
		for _, s := range inputs {
			if _, err := decodeCompletion([]byte(s)); s != completionJSON && !errors.Is(err, ErrBadResponse) {
				t.Fatalf("%q: %v, want ErrBadResponse", s, err)
			}
		}
	}
}
