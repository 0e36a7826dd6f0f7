// Package mathgrade rewards math rollouts by checking a model's final answer
// against a reference answer, the way NeMo Gym's library judge (math_verify)
// and GEM's math grader do, but in pure Go with no sympy and no timeouts: every
// call is bounded in time and memory by construction.
//
// The answer is the content of the last \boxed{…} (or \fbox{…}) in the model
// output. Both answers are normalized (see [Normalize]) and then compared:
//
//   - Identical normalized strings (ignoring letter case) are equivalent.
//   - Numbers are exact rationals: integers, decimals, repeating decimals
//     ("0.\overline{3}"), fractions, mixed numbers ("1\frac{1}{2}" = 3/2, so
//     "2\frac{1}{2}" is 2.5, not 1), scientific notation ("1.5e3",
//     "1.5\times10^{3}"). "3" equals "3.0" but not "3.01"; "0.5" equals
//     "\frac{1}{2}". A single number with comma groups of three is one number
//     ("1,000" = 1000), not a list.
//   - A decimal equals a fraction only when it is exactly the same rational:
//     "0.333" is not "\frac{1}{3}", however many digits are given. Rounded
//     answers are wrong answers, which keeps the reward from being gamed by
//     truncation and matches the "integers must match exactly" rule of GEM.
//   - Simple expressions with + - * / ^ !, parentheses, \frac, \binom, |x|,
//     \sqrt{x}, \sqrt[n]{x} and implicit multiplication ("2\sqrt{2}", "3x")
//     are evaluated exactly with big rationals. Only when a value is
//     irrational (a root that is not exact, a fractional power, \pi) is
//     float64 used, and then two values are equal when they agree to a
//     relative tolerance of 1e-9 (about ten significant digits), so
//     "\sqrt{8}" = "2\sqrt{2}" and "2\pi" = "\pi*2", while "3.14" is not
//     "\pi" but "3.14159265359" is.
//   - Expressions with single-letter (or Greek, or subscripted) variables are
//     compared by exact evaluation at three fixed positive rational sample
//     points, so "2x+1" = "1+2x" and "x^2-1" = "(x-1)(x+1)"; a bare run of
//     letters is a word, not a product.
//   - A trailing percent sign on one side only: "p%" matches both p and p/100
//     ("50\%" = "0.5" = "50"), as math_verify does; two percentages compare
//     their numbers ("0.5\%" is not "50\%").
//   - Tuples and intervals compare element by element and bracket types matter
//     ("[1,3)" is not "[1,3]", "(1,2)" is not "(2,1)"). Sets "\{…\}", bare
//     comma lists and unions "\cup" ignore order and repetition; a bare list
//     also matches a parenthesized tuple in the same order, and a set of one
//     number matches that number. "\mathbb{R}" is (-\infty,\infty), and
//     \emptyset, \varnothing and \{\} are the empty set. Matrices
//     (pmatrix, bmatrix, …) compare entry by entry.
//   - Multiple-choice letters match with or without parentheses or \text
//     ("B", "(B)", "\text{(B)}"); words compare case-insensitively.
//   - "x = 5" is "5": a single variable assignment on the left is dropped,
//     also for each element of a list ("x=1, x=2" is the set {1, 2}).
//
// Deliberately not equivalent (where sympy-based graders may differ): rounded
// decimals against exact values, symbolic identities that need algebra rather
// than evaluation (trigonometric functions, logarithms, equations and
// inequalities other than a plain assignment are compared only as normalized
// strings), complex numbers, and anything over a resource limit. An answer
// longer than [MaxAnswerLen] is never equivalent to anything; one over another
// limit (nesting [MaxDepth], exponent [MaxExponent], number size [MaxBits],
// elements [MaxElements], variables [MaxVariables]) is equivalent only to an
// answer that is identical to it after normalization. A fixed work budget
// also caps the total big-number arithmetic of one call. Nothing hangs or
// panics: a call on hostile input returns within milliseconds.
package mathgrade

import (
	"errors"
	"strings"
)

// Resource limits that bound the work done for hostile answers.
const (
	// MaxAnswerLen is the longest answer, in bytes, that is considered at all;
	// model answers are short, and everything else is linear in this.
	MaxAnswerLen = 10 << 10
	// MaxDepth bounds nesting of brackets, operators and structures, so
	// recursion stays shallow.
	MaxDepth = 64
	// MaxExponent bounds |n| in x^n, n-th roots, n! and \binom{n}{k}, so
	// that big-integer exponentiation cannot run away.
	MaxExponent = 1000
	// MaxBits bounds the numerator and denominator of every exact
	// intermediate value (about 2466 decimal digits); anything larger is
	// rejected rather than computed.
	MaxBits = 8192
	// MaxElements bounds the number of elements in tuples, sets, lists,
	// unions and matrices, counted over both answers together, since sets
	// are compared pairwise.
	MaxElements = 100
	// MaxVariables bounds the distinct variables in a pair of answers.
	MaxVariables = 8
)

// Sentinel errors returned by [Extract].
var (
	// ErrNoAnswer means the response has no balanced, non-empty \boxed{…}.
	ErrNoAnswer = errors.New("mathgrade: no boxed answer")
	// ErrTooLong means the extracted answer is longer than [MaxAnswerLen].
	ErrTooLong = errors.New("mathgrade: answer too long")
)

// Result is the outcome of grading one response, with the same fields NeMo
// Gym's math verifier reports.
type Result struct {
	// Reward is 1 when the answer matched and 0 otherwise.
	Reward float64
	// Extracted is the content of the last \boxed{…} of the response, or ""
	// when there was none.
	Extracted string
	// Expected is the reference answer with outer $…$, \(…\), \[…\] or
	// \boxed{…} removed.
	Expected string
	// Matched reports whether Extracted is equivalent to Expected.
	Matched bool
}

// LastBoxed returns the content, trimmed of surrounding white space, of the
// last \boxed{…} or \fbox{…} in text, with brace matching that allows nested
// braces and skips escaped ones (\{, \}). Like GEM's last_boxed_only_string it
// also accepts the space form "\boxed 5", whose content runs to the next "$"
// or the end of the text. ok is false when there is no box or the last one is
// unbalanced; an empty box gives "" with ok true.
func LastBoxed(text string) (content string, ok bool) {
	best, argStart := -1, 0
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '\\')
		if j < 0 {
			break
		}
		j += i
		rest := text[j+1:]
		var end int
		switch {
		case strings.HasPrefix(rest, "boxed"):
			end = j + 1 + len("boxed")
		case strings.HasPrefix(rest, "fbox"):
			end = j + 1 + len("fbox")
		default:
			i = j + 1
			continue
		}
		i = end
		if end < len(text) && isLetter(text[end]) {
			continue // a different command, such as \boxedsymbol
		}
		best, argStart = j, end
	}
	if best < 0 {
		return "", false
	}
	k := argStart
	for k < len(text) && isSpace(text[k]) {
		k++
	}
	if k < len(text) && text[k] == '{' {
		close := matchBrace(text, k)
		if close < 0 {
			return "", false
		}
		return strings.TrimSpace(text[k+1 : close]), true
	}
	if k == argStart || k == len(text) {
		return "", false
	}
	rest := text[k:]
	if d := strings.IndexByte(rest, '$'); d >= 0 {
		rest = rest[:d]
	}
	return strings.TrimSpace(rest), true
}

// matchBrace returns the index of the '}' that closes the '{' at open, or -1.
// A backslash escapes the byte after it.
func matchBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}
