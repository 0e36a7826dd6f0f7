// Package mathgrade rewards math rollouts by checking a model's final answer
// against a reference answer the way NeMo Gym's math_with_judge server does
// with its library verifier (HuggingFace math_verify, LaTeX and plain
// expression extraction, precision 6), but in pure Go with no sympy: every
// call is bounded in time and memory by construction.
//
// Extraction ([Grade], [Extract], [ExtractAnswer], [ExpectedAnswer]): a
// response without a complete, non-blank \boxed{…} gets 0, as in NeMo Gym;
// otherwise the answer is chosen by math_verify's priorities ("final answer
// is X. I hope", then the rightmost of "final answer … is X" and the boxed
// answer, …), several boxes close together being one answer, a set. The
// expected answer is reduced to its box when it has one.
//
// Equivalence ([Equivalent]): both answers are normalized (see [Normalize])
// and then compared:
//
//   - Identical normalized strings (ignoring letter case) are equivalent.
//   - Numbers are exact rationals: integers, decimals, repeating decimals
//     ("0.\overline{3}"), fractions, mixed numbers ("2\frac{1}{2}" is 2.5),
//     scientific notation. "3" equals "3.0" but not "3.01"; "0.5" equals
//     "\frac{1}{2}"; "1,000" is one number.
//   - A decimal against a number: as math_verify does, both are rounded to
//     [Precision] (six) decimal places, half to even, and compared, so
//     "0.333333" is "\frac{1}{3}" and "1.414214" is "\sqrt{2}", while
//     "0.33" and "0.333334" are not. With [Options].Strict a decimal must
//     also be exactly the rational, or within 1e-9 of an irrational value,
//     so a rounded or truncated number is not rewarded.
//   - Expressions with + - * / ^ !, \frac, \binom, |x|, roots, \pi, e, and
//     the functions sin … cot, arcsin … arctan, sinh … tanh, ln, log, log_b
//     and exp are evaluated: exactly with big rationals while the value is
//     rational, in float64 with relative tolerance 1e-9 otherwise.
//   - Expressions with variables are evaluated at eight fixed sample points
//     with mixed signs and must agree at every point where either is defined
//     (and be undefined at the same points), at three points at least: so
//     "\sec^2 y" = "\tan^2 y + 1" and "x^2-1" = "(x-1)(x+1)", while "|x|",
//     "\sqrt{x^2}" and "x" differ.
//   - Percent: "p%" (also "\%", "percent", "percentage", "pct") against a
//     plain number means p/100 or p; two percentages compare their numbers.
//   - Tuples, intervals and matrices compare element by element and bracket
//     types matter. Sets "\{…\}", bare lists (separated by ",", ";", "or",
//     "and") and unions ignore order and repetition; "a \pm b" is the set
//     {a+b, a-b}.
//   - Relations: a labelled answer ("x = 5", "AB=4, CD=5", "(p,q)=(3,2)",
//     "f(x)=1", "\angle ABC = 30^\circ") matches its value; two labelled
//     answers need the same label; equations and inequalities match when
//     the differences of their sides are proportional ("2x+4y-3=0" is
//     "y=-\frac12x+\frac34", "5 \geq x" is "x \leq 5"); an inequality in
//     one variable matches its interval ("-793 < a < 10" is "(-793, 10)").
//     An equation whose left side is not a label is its right-hand side
//     against an answer that is not an equation ("2x+z=1" is "1"), as in
//     math_verify, except with [Options].Strict.
//   - Multiple-choice letters match with or without parentheses or \text;
//     words compare case-insensitively.
//
// Limits: an answer longer than [MaxAnswerLen] is never equivalent to
// anything; one over another limit (nesting [MaxDepth], exponent
// [MaxExponent], number size [MaxBits], elements [MaxElements], variables
// [MaxVariables]) is equivalent only to an answer identical to it after
// normalization. A work budget caps the arithmetic of one call and the
// extraction patterns read a bounded window, so a hostile response (huge
// exponents, deep nesting, megabytes of text) is graded 0 within
// milliseconds; BenchmarkGrade measures it.
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
	// Extracted is the answer [Extract] found in the response (several
	// boxes joined by ","), or "" when there was none.
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
func matchBrace(s string, open int) int { return matchBraceWithin(s, open, len(s)) }
