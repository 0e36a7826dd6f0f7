package vllm

import (
	"errors"
	"testing"
)

// malformedReplies end inside an object key or string with a dangling
// escape, after other malformed replies: the sequence on which
// goccy/go-json (which decoded replies once) read past its buffer and
// panicked. They seed FuzzDecodeCompletion too.
var malformedReplies = []string{`{"\p#\`, `{"choices":[{"\`, `{"choices":[{"text":"\`, `{"\`}

// TestMalformedSequenceIsAnError decodes the malformed replies around a
// valid one: each malformed reply is ErrBadResponse, the valid one decodes.
func TestMalformedSequenceIsAnError(t *testing.T) {
	for _, s := range malformedReplies {
		if _, err := decodeCompletion([]byte(s)); !errors.Is(err, ErrBadResponse) {
			t.Fatalf("%q: %v, want ErrBadResponse", s, err)
		}
		if _, err := decodeCompletion([]byte(completionJSON)); err != nil {
			t.Fatalf("the valid reply after %q: %v", s, err)
		}
	}
}
