package mathgrade

import (
	"math"
	"regexp"
	"strings"
)

// relOps are the relation operators recognized at the top level of an
// answer, longest spelling first, with their canonical form. "\in" and
// "\approx" read as "=": "x \in [1,2]" is labelled like "x = [1,2]", and
// math_verify reads "x \approx 11" as an equation.
var relOps = []struct{ spell, op string }{
	{`\leqslant`, "<="}, {`\geqslant`, ">="}, {`\leq`, "<="}, {`\geq`, ">="}, {`\neq`, "!="},
	{`\le`, "<="}, {`\ge`, ">="}, {`\lt`, "<"}, {`\gt`, ">"}, {`\ne`, "!="},
	{`\approx`, "="}, {`\in`, "="}, {"<=", "<="}, {">=", ">="}, {"!=", "!="}, {"=<", "<="}, {"=>", ">="},
	{"=", "="}, {"<", "<"}, {">", ">"},
}

// inverseOp is the operator of a relation read right to left.
var inverseOp = map[string]string{"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}

// splitRelation splits s at relation operators outside all brackets. It
// returns nil when there is none.
func splitRelation(s string) (parts, ops []string) {
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		if depth == 0 {
			matched := false
			for _, r := range relOps {
				if !strings.HasPrefix(s[i:], r.spell) {
					continue
				}
				end := i + len(r.spell)
				if r.spell[0] == '\\' && end < len(s) && isLetter(s[end]) {
					continue // \left, \neg, \infty…
				}
				parts = append(parts, s[start:i])
				ops = append(ops, r.op)
				i = end - 1
				start = end
				matched = true
				break
			}
			if matched {
				continue
			}
		}
		d, w := bracketDelta(s, i)
		depth += d
		i += w - 1
		if depth < 0 {
			return nil, nil
		}
	}
	if len(ops) == 0 || depth != 0 {
		return nil, nil
	}
	parts = append(parts, s[start:])
	for _, p := range parts {
		if strings.TrimSpace(p) == "" {
			return nil, nil
		}
	}
	return parts, ops
}

// labelRe is a left-hand side that names what the answer is: a variable or
// a run of letters (AB), Greek letters, subscripts and primes, a function
// value f(x) or f(2), a tuple of such names (p,q), an angle \angle ABC or
// m\angle A, or a segment \overline{AB}. math_verify calls these
// "assignments" (an equation whose left side is only symbols).
var labelRe = regexp.MustCompile(`^(?:` + labelName + `|` + labelName + `\([A-Za-z0-9,+\-]*\)|` +
	`\(` + labelName + `(?:,` + labelName + `)+\)|m?\\angle ?[A-Za-z]{1,3}|\\overline\{[A-Za-z]{1,3}\})$`)

const labelName = `(?:[A-Za-z]{1,4}|\\(?:alpha|beta|gamma|delta|theta|lambda|mu|phi|varphi|psi|omega|rho|sigma|tau))` +
	`(?:_\{?[A-Za-z0-9]+\}?)?'*`

// relation parses s as a relation (equation, inequality or chain of them),
// or returns nil when s has no top-level relation operator.
func (c *comparer) relation(s string, depth int) (*shape, error) {
	parts, ops := splitRelation(s)
	if parts == nil {
		return nil, nil
	}
	r := &shape{kind: sRel, ops: ops}
	if labelRe.MatchString(strings.TrimSpace(parts[0])) {
		assign := true
		for _, op := range ops {
			assign = assign && op == "="
		}
		if assign {
			r.label = strings.TrimSpace(parts[0])
		}
	}
	for i, p := range parts {
		if i == 0 && r.label != "" {
			r.elems = append(r.elems, &shape{kind: sScalar, text: r.label, word: true})
			continue
		}
		e, err := c.parseShape(p, depth+1)
		if err != nil {
			return nil, err
		}
		r.elems = append(r.elems, e)
	}
	// The difference of the two sides of every link, to compare relations.
	for i := range ops {
		l, rt := c.sideExpr(r.elems[i], depth), c.sideExpr(r.elems[i+1], depth)
		var d *shape
		if l != nil && rt != nil {
			d = &shape{kind: sScalar, expr: &node{kind: nSub, a: l, b: rt}}
		}
		r.diffs = append(r.diffs, d)
	}
	return r, nil
}

// sideExpr is the expression of a relation's side, also for a side that
// reads as a word ("x", "AB"), or nil.
func (c *comparer) sideExpr(s *shape, depth int) *node {
	if s.kind != sScalar {
		return nil
	}
	if s.expr != nil {
		return s.expr
	}
	n, err := parseExpression(s.text, depth+1)
	if err != nil {
		return nil
	}
	if c.vars == nil {
		c.vars = map[string]bool{}
	}
	collectVars(n, c.vars)
	return n
}

// isEquation reports whether s is a relation of equalities only.
func isEquation(s *shape) bool {
	if s.kind != sRel {
		return false
	}
	for _, op := range s.ops {
		if op != "=" {
			return false
		}
	}
	return true
}

// compareRel compares a prediction and a gold answer when either is a
// relation, by math_verify's rules:
//
//   - two assignments ("x = 1", "y = 1") match when the labels and the
//     values do;
//   - an assignment matches a non-equation by its last right-hand side
//     ("x = 5+5+1 = 11" is 11, "f(x) = 1" is 1, "(p,q) = (3,2)" is (3,2));
//   - two relations of the same shape match link by link when the
//     differences of their sides are proportional with a constant factor
//     (positive for inequalities read the same way, negative for flipped
//     ones, any for equations): "2x+4y-3=0" is "y = -\frac12x+\frac34",
//     "x < 1" is "-x > -1";
//   - an expected inequality in one variable matches a predicted interval
//     ("-1 < x < 2" is "(-1, 2)"); in the symmetric [Equivalent] also the
//     other way round;
//   - unless strict, a predicted equation whose left side is not a label
//     matches a gold answer that is not an equation by its last right-hand
//     side ("2x+z = 1" is 1: math_verify's "we follow what the gold format
//     is"); in the symmetric [Equivalent] also the other way round.
func (c *comparer) compareRel(p, g *shape) bool {
	pa, ga := p.kind == sRel && p.label != "", g.kind == sRel && g.label != ""
	switch {
	case pa && ga:
		return strings.EqualFold(p.label, g.label) && c.equal(last(p), last(g))
	case pa && !isEquation(g):
		return c.equal(last(p), g)
	case ga && !isEquation(p):
		return c.equal(p, last(g))
	case !c.strict && isEquation(p) && !isEquation(g):
		return c.equal(last(p), g)
	case !c.strict && c.symmetric && isEquation(g) && !isEquation(p):
		return c.equal(p, last(g))
	case p.kind == sRel && g.kind == sRel:
		return c.sameRelation(p, g)
	case g.kind == sRel && p.kind != sRel:
		if iv := c.interval(g); iv != nil {
			return c.equal(p, iv)
		}
	case p.kind == sRel && g.kind != sRel && c.symmetric:
		if iv := c.interval(p); iv != nil {
			return c.equal(iv, g)
		}
	}
	return false
}

// last is the last side of a relation.
func last(r *shape) *shape { return r.elems[len(r.elems)-1] }

// sameRelation compares two relations link by link, each read as it is or
// flipped.
func (c *comparer) sameRelation(p, g *shape) bool {
	if len(p.ops) != len(g.ops) {
		return false
	}
	same, flipped := true, true
	for i := range p.ops {
		same = same && c.sameLink(p.ops[i], p.diffs[i], g.ops[i], g.diffs[i])
		j := len(g.ops) - 1 - i
		flipped = flipped && c.sameLink(p.ops[i], p.diffs[i], inverseOp[g.ops[j]], negated(g.diffs[j]))
	}
	return same || flipped
}

// negated marks a difference as read with its sides swapped.
func negated(d *shape) *shape {
	if d == nil {
		return nil
	}
	return &shape{kind: sScalar, expr: d.expr, vals: d.vals, errs: d.errs, neg: !d.neg}
}

// sameLink reports whether two links "l1 op1 r1" and "l2 op2 r2" state the
// same thing: l1-r1 = k(l2-r2) at every sample point for one constant k,
// with k > 0 when the operators are the same inequality (op2 flipped was
// handled by the caller), and any nonzero k for = and ≠.
func (c *comparer) sameLink(op1 string, d1 *shape, op2 string, d2 *shape) bool {
	if op1 != op2 || d1 == nil || d2 == nil {
		return false
	}
	var k float64
	seen, defined := false, 0
	for i := range d1.vals {
		if d1.errs[i] || d2.errs[i] {
			if d1.errs[i] != d2.errs[i] {
				return false
			}
			continue
		}
		defined++
		x, y := d1.vals[i].float(), d2.vals[i].float()
		if d1.neg {
			x = -x
		}
		if d2.neg {
			y = -y
		}
		if d1.vals[i].kind == kInf || d2.vals[i].kind == kInf || math.IsInf(x, 0) || math.IsInf(y, 0) {
			return false
		}
		zx, zy := math.Abs(x) <= 1e-12, math.Abs(y) <= 1e-12
		if zx || zy {
			if zx != zy {
				return false
			}
			continue
		}
		r := x / y
		if !seen {
			k, seen = r, true
			continue
		}
		if math.Abs(r-k) > relTol*max(math.Abs(r), math.Abs(k)) {
			return false
		}
	}
	if defined < min(len(d1.vals), 3) {
		return false
	}
	if !seen {
		return true // both sides identically zero at every point
	}
	if op1 == "=" || op1 == "!=" {
		return true
	}
	return k > 0
}

// interval turns an inequality in one variable into the interval it
// describes: "a < x < b" is (a, b), "x \ge a" is [a, \infty), "b > x" is
// (-\infty, b). It returns nil for anything else.
func (c *comparer) interval(r *shape) *shape {
	isVar := func(s *shape) bool {
		n := c.sideExpr(s, 0)
		return n != nil && n.kind == nVar
	}
	isConst := func(s *shape) bool { return s.kind == sScalar && s.expr != nil && !hasVar(s.expr) }
	inf := func(neg bool) *shape {
		n := &node{kind: nInf}
		if neg {
			n = &node{kind: nNeg, a: n}
		}
		s := &shape{kind: sScalar, expr: n}
		c.evalShape(s)
		return s
	}
	open := func(op string) bool { return op == "<" || op == ">" }
	mk := func(lo, hi *shape, lopen, hopen bool) *shape {
		o, cl := "[", "]"
		if lopen {
			o = "("
		}
		if hopen {
			cl = ")"
		}
		return &shape{kind: sTuple, open: o, close: cl, elems: []*shape{lo, hi}}
	}
	e, ops := r.elems, r.ops
	switch len(ops) {
	case 1:
		l, rt, op := e[0], e[1], ops[0]
		if isConst(l) && isVar(rt) { // "3 < x" is "x > 3"
			l, rt, op = rt, l, inverseOp[op]
		}
		if !isVar(l) || !isConst(rt) {
			return nil
		}
		switch op {
		case "<", "<=":
			return mk(inf(true), rt, true, open(op))
		case ">", ">=":
			return mk(rt, inf(false), open(op), true)
		}
	case 2:
		if !isConst(e[0]) || !isVar(e[1]) || !isConst(e[2]) {
			return nil
		}
		lt := func(op string) bool { return op == "<" || op == "<=" }
		gt := func(op string) bool { return op == ">" || op == ">=" }
		switch {
		case lt(ops[0]) && lt(ops[1]):
			return mk(e[0], e[2], open(ops[0]), open(ops[1]))
		case gt(ops[0]) && gt(ops[1]):
			return mk(e[2], e[0], open(ops[1]), open(ops[0]))
		}
	}
	return nil
}

// hasVar reports whether an expression has a variable.
func hasVar(n *node) bool {
	for n != nil {
		if n.kind == nVar {
			return true
		}
		if n.b != nil && hasVar(n.b) {
			return true
		}
		n = n.a
	}
	return false
}
