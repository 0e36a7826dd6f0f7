package mathgrade

import (
	"regexp"
	"strings"
)

// Equivalent reports whether two answers are mathematically the same; see the
// package documentation for what counts. It is symmetric, and false whenever
// either answer is empty after normalization or a resource limit is hit.
// [Grade] uses the same rules with one asymmetry of math_verify: only an
// expected inequality is turned into an interval to match a predicted one.
func Equivalent(pred, expected string) bool {
	return equivalent(pred, expected, true)
}

// equivalent compares a prediction with a gold answer; symmetric selects the
// symmetric variant of the relation-to-interval rule.
func equivalent(pred, gold string, symmetric bool) bool {
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
	c := comparer{work: budget{left: workBudget}, symmetric: symmetric}
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
