package mathgrade

import (
	"regexp"
	"strings"
)

// Precision is the number of decimal places a decimal answer is rounded to
// before it is compared with a number: math_verify's verify(float_rounding=6),
// the precision NeMo Gym's math_with_judge server grades with.
const Precision = 6

// Options choose how [Options.Grade] and [Options.Equivalent] grade. The zero
// value grades as NeMo Gym does; [Grade] and [Equivalent] use it.
type Options struct {
	// Strict rejects two kinds of answer NeMo Gym rewards that an RL reward
	// should not, since a policy can learn to game them:
	//
	//   - A decimal that only rounds to the expected value: by default, as in
	//     math_verify's sympy_numeric_eq, when one side is a decimal and both
	//     are numbers, both are rounded to [Precision] places and compared,
	//     so "0.333333" is "\frac13", "1.414214" is "\sqrt2" and "0.0000001"
	//     is "0". Strict also compares them as every other value: exactly
	//     with rationals, within a relative 1e-9 with irrational values.
	//   - An equation whose left side is not a label against an answer that
	//     is not an equation: by default, as math_verify does, the equation
	//     is its last right-hand side ("2x+z=1" is "1"). Strict matches only
	//     labelled answers ("x=1") by their value.
	//
	// A number that does not round to the expected value ("0.33" or "0.3333"
	// for "\frac13") is rejected either way: Strict only takes rewards away.
	Strict bool
}

// Equivalent reports whether two answers are mathematically the same; see the
// package documentation for what counts. It is symmetric, and false whenever
// either answer is empty after normalization or a resource limit is hit.
// [Grade] uses the same rules with math_verify's asymmetries: only an
// expected inequality is turned into an interval to match a predicted one,
// and only a predicted equation is read as its right-hand side.
func Equivalent(pred, expected string) bool { return Options{}.Equivalent(pred, expected) }

// Equivalent is [Equivalent] with these options.
func (o Options) Equivalent(pred, expected string) bool {
	return o.equivalent(pred, expected, true)
}

// equivalent compares a prediction with a gold answer; symmetric selects the
// symmetric variant of the rules math_verify applies one way round.
func (o Options) equivalent(pred, gold string, symmetric bool) bool {
	if len(pred) > MaxAnswerLen || len(gold) > MaxAnswerLen {
		return false
	}
	na, nb := normalize(pred, true), normalize(gold, true)
	if na == "" || nb == "" {
		return false
	}
	pa, pb := hasPercent(pred), hasPercent(gold)
	if strings.EqualFold(na, nb) {
		return true
	}
	c := comparer{work: budget{left: workBudget}, symmetric: symmetric, strict: o.Strict}
	a, err := c.parseShape(na, 0)
	if err != nil {
		return false
	}
	b, err := c.parseShape(nb, 0)
	if err != nil {
		return false
	}
	if !c.evaluate(a, b) {
		return false
	}
	if pa == pb {
		return c.equal(a, b)
	}
	// One side carries a percent sign: p% means p/100, and, as math_verify
	// also accepts for an expected "28\%" against "28", the bare number p.
	if c.equal(a, b) {
		return true
	}
	if pa {
		if h := scaled(a, 100); h != nil {
			return c.equal(h, b)
		}
		return false
	}
	if h := scaled(b, 100); h != nil {
		return c.equal(a, h)
	}
	return false
}

// percentTailRe is a percent sign or word at the end of an answer.
var percentTailRe = regexp.MustCompile(`(?i)(?:%|\bpercent|\bpercentage|\bpct)[\s.}$)]*$`)

// hasPercent reports whether a raw answer ends in a percent sign or word
// ("%", "\%", "percent", "percentage", "pct"), which normalization drops; only
// then may it also mean a hundredth.
func hasPercent(s string) bool {
	t := stripDelims(strings.TrimSpace(s))
	if len(t) > 64 {
		t = t[len(t)-64:]
	}
	return percentTailRe.MatchString(t)
}
