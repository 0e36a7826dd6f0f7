package env

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/messages"
)

// errPromptTooLong marks a prompt that leaves no room for generation: the
// episode's failure is recorded with kind messages.FailurePromptTooLong.
var errPromptTooLong = errors.New("prompt too long")

// templated is a prompt that a template renders around message content: an
// overflowing prompt may lose content, never the template's own text (the
// chat template's role headers, say).
type templated struct {
	// content is the text of each message, in order.
	content []string
	// render builds the tokenize request of the prompt with the given
	// content in place of the original.
	render func(content []string) *messages.TokenizeRequest
}

// promptBudget is the most tokens a prompt may have so that at least one
// turn's worth of generation (the per-turn max_tokens, or 1) fits in
// max_length.
func (e *episode) promptBudget() (int, error) {
	maxNew := max(e.req.Sampling.MaxTokens, 1)
	keep := int(e.req.MaxLength - maxNew)
	if keep <= 0 {
		return 0, e.fail("max_length %d leaves no room for a prompt with max_tokens %d", e.req.MaxLength, maxNew)
	}
	return keep, nil
}

// fitPrompt returns the prompt toks, which are t rendered (or, for a nil t,
// plain text that is all content), made to fit promptBudget as the request's
// PromptOverflow says, and how many tokens were cut; t.content is left
// holding the content kept. A prompt that does not
// fit fails the episode (errPromptTooLong), unless truncate-left is asked
// for: then the start of the content is cut.
func (e *episode) fitPrompt(ctx context.Context, toks []int32, t *templated) ([]int32, int32, error) {
	keep, err := e.promptBudget()
	if err != nil {
		return nil, 0, err
	}
	if len(toks) <= keep {
		return toks, 0, nil
	}
	if e.req.PromptOverflow != messages.PromptOverflowTruncateLeft {
		return nil, 0, e.tooLong(len(toks), keep)
	}
	if t == nil {
		return toks[len(toks)-keep:], int32(len(toks) - keep), nil
	}
	tokenize := func(content []string) ([]int32, error) { return e.tokenize(ctx, t.render(content), false) }
	bare, err := tokenize(make([]string, len(t.content)))
	if err != nil {
		return nil, 0, err
	}
	if len(bare) > keep {
		return nil, 0, fmt.Errorf("%w, and its template alone takes %d", e.tooLong(len(toks), keep), len(bare))
	}
	kept, content, err := cutContent(t.content, len(toks), bare, keep, tokenize)
	if err != nil {
		return nil, 0, err
	}
	t.content = content
	return kept, int32(len(toks) - len(kept)), nil
}

// tooLong is the failure of a prompt of n tokens over the budget keep.
func (e *episode) tooLong(n, keep int) error {
	return fmt.Errorf("%w: %w: %d tokens, over the budget of %d (max_length %d minus max_tokens %d)",
		errEpisode, errPromptTooLong, n, keep, e.req.MaxLength, max(e.req.Sampling.MaxTokens, 1))
}

// cutContent returns the tokens of the rendering that keeps the longest
// ending of content within keep tokens, and that content: content is cut from its start (the
// first message's first), on UTF-8 boundaries. full is the token count of
// the uncut rendering (over keep), bare the tokens of the rendering without
// any content (within keep). Each probe is a tokenization (a round trip to
// a model server), so the cut is guessed from the token counts, as if they
// shrank evenly with it, and found by bisection only where guesses do not
// close in.
func cutContent(content []string, full int, bare []int32, keep int, tokenize func([]string) ([]int32, error)) ([]int32, []string, error) {
	joined := strings.Join(content, "")
	// Cutting lo bytes leaves nLo > keep tokens; cutting hi leaves best,
	// within keep. The answer is the smallest fitting cut in (lo, hi].
	lo, nLo := 0, full
	hi, best := len(joined), bare
	slow := 0 // guesses in a row that did not halve the interval
	for {
		mid := lo + int(int64(hi-lo)*int64(nLo-keep)/int64(nLo-len(best)))
		if slow >= 2 {
			mid = lo + (hi-lo)/2
		}
		// Cut whole runes only: at the start of the rune the guess falls
		// in, or else at the first after lo.
		mid = runeAt(joined, max(lo+1, min(mid, hi-1)))
		if mid <= lo {
			mid = runeStart(joined, lo+1)
		}
		if mid >= hi {
			return best, cutFront(content, hi), nil
		}
		width := hi - lo
		toks, err := tokenize(cutFront(content, mid))
		if err != nil {
			return nil, nil, err
		}
		if len(toks) <= keep {
			hi, best = mid, toks
		} else {
			lo, nLo = mid, len(toks)
		}
		if 2*(hi-lo) > width {
			slow++
		} else {
			slow = 0
		}
	}
}

// runeStart is the first offset from i on that starts a rune of s, or
// len(s).
func runeStart(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// runeAt is the offset of the start of the rune of s that byte i is part
// of, or len(s) for i == len(s).
func runeAt(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// cutFront drops the first n bytes of the concatenated content: messages
// wholly inside them become empty, the one the cut falls in loses its start.
func cutFront(content []string, n int) []string {
	out := make([]string, len(content))
	for i, c := range content {
		k := min(n, len(c))
		out[i] = c[k:]
		n -= k
	}
	return out
}
