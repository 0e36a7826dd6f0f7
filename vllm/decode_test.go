package vllm

import (
	"errors"
	"slices"
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

func TestDecodeTopLogprobs(t *testing.T) {
	body := `{"choices":[{"logprobs":{"top_logprobs":[{"token_id:7":-2.5,"token_id:3":-0.1,"token_id:9":-2.5},{"token_id:1":0}]}}]}`
	got, err := decodeTopLogprobs([]byte(body), 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{3, 7, 9}; !slices.Equal(got[0].IDs, want) || got[0].Logprobs[0] != -0.1 || got[0].Logprobs[2] != -2.5 {
		t.Errorf("position 0: %+v, want ids %v most likely first, ties by id", got[0], want)
	}
	for _, bad := range []struct {
		body string
		n    int
	}{{body, 3}, {`{"choices":[{"logprobs":{"top_logprobs":[{"7":-1}]}}]}`, 1}, {`{"choices":[{}]}`, 1}, {`[`, 0}} {
		if _, err := decodeTopLogprobs([]byte(bad.body), bad.n); !errors.Is(err, ErrBadResponse) {
			t.Errorf("%s (n %d): %v, want ErrBadResponse", bad.body, bad.n, err)
		}
	}
}
