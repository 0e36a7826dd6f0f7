package mathgrade

import (
	"math/big"
	"slices"
	"strings"
	"unicode"
)

// shapeKind is the structure of an answer.
type shapeKind uint8

const (
	sScalar shapeKind = iota
	sTuple            // ordered, with bracket types: tuples, intervals, matrices
	sList             // bare comma list, unordered
	sSet              // \{…\}, unordered
	sUnion            // A \cup B, unordered
	sRel              // relation: elems are the sides, ops the operators
)

// shape is a parsed answer: a scalar or a structure of shapes.
type shape struct {
	kind        shapeKind
	open, close string
	elems       []*shape

	text string // scalar: normalized text
	word bool   // scalar: letters only, compared as a word
	expr *node  // scalar: parsed expression, nil when not an expression
	vals []value
	errs []bool
	neg  bool // scalar: values are read negated

	ops   []string // relation: operators between the sides
	label string   // relation: labelled left side of an assignment
	diffs []*shape // relation: left minus right side of each link, or nil
	pm    bool     // set: the expansion of a \pm
}

// comparer parses and compares a pair of answers, sharing sample points.
type comparer struct {
	work      budget
	symmetric bool // the rules math_verify applies one way round both ways, as in Equivalent
	strict    bool // Options.Strict
	memo      map[[2]*shape]bool
	elems     int
	vars      map[string]bool
	envs      []map[string]*big.Rat
}

// parseShape parses a normalized answer into its structure.
func (c *comparer) parseShape(s string, depth int) (*shape, error) {
	if depth > MaxDepth {
		return nil, errLimit
	}
	c.elems++
	if c.elems > MaxElements {
		return nil, errLimit
	}
	s = strings.TrimSpace(s)
	switch s {
	case `\emptyset`, `\{\}`:
		return &shape{kind: sSet}, nil
	case `\mathbb{R}`, `\mathbb R`, `\mathbbR`:
		return &shape{kind: sTuple, open: "(", close: ")", elems: []*shape{
			{kind: sScalar, text: `-\infty`, expr: &node{kind: nNeg, a: &node{kind: nInf}}},
			{kind: sScalar, text: `\infty`, expr: &node{kind: nInf}},
		}}, nil
	}
	if len(splitTop(s, ",")) == 1 {
		r, err := c.relation(s, depth)
		if err != nil {
			return nil, err
		}
		if r != nil {
			return r, nil
		}
		if pm, err := c.plusMinus(s, depth); pm != nil || err != nil {
			return pm, err
		}
	}
	if parts := splitTop(s, `\cup`); len(parts) > 1 {
		return c.group(sUnion, "", "", parts, depth)
	}
	if strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && closesAtEnd(s) {
		inner := strings.TrimSpace(s[2 : len(s)-2])
		if inner == "" {
			return &shape{kind: sSet}, nil
		}
		return c.group(sSet, "", "", splitTop(inner, ","), depth)
	}
	if len(s) >= 2 && strings.IndexByte("([", s[0]) >= 0 && strings.IndexByte(")]", s[len(s)-1]) >= 0 && closesAtEnd(s) {
		if parts := splitTop(s[1:len(s)-1], ","); len(parts) > 1 {
			return c.group(sTuple, s[:1], s[len(s)-1:], parts, depth)
		}
	}
	if env, body, ok := matrixBody(s); ok {
		rows := splitTop(body, `\\`)
		m := &shape{kind: sTuple, open: env, close: env}
		for _, row := range rows {
			r, err := c.group(sTuple, "row", "row", splitTop(row, "&"), depth+1)
			if err != nil {
				return nil, err
			}
			m.elems = append(m.elems, r)
		}
		return m, nil
	}
	if parts := splitTop(s, ","); len(parts) > 1 {
		return c.group(sList, "", "", parts, depth)
	}
	return c.scalar(s, depth)
}

// group parses the parts of a structure as its elements; each may be a
// variable assignment ("x=1, x=2").
func (c *comparer) group(kind shapeKind, open, close string, parts []string, depth int) (*shape, error) {
	g := &shape{kind: kind, open: open, close: close}
	for _, part := range parts {
		e, err := c.parseShape(part, depth+1)
		if err != nil {
			return nil, err
		}
		if e.pm && (kind == sSet || kind == sList) {
			g.elems = append(g.elems, e.elems...) // \{1\pm\sqrt5, -2\} has three elements
			continue
		}
		g.elems = append(g.elems, e)
	}
	return g, nil
}

// scalar parses a single answer: a multiple-choice letter, a word or an
// expression. Text that is none of these is still compared as text.
func (c *comparer) scalar(s string, depth int) (*shape, error) {
	if len(s) == 3 && s[0] == '(' && s[2] == ')' && isLetter(s[1]) {
		s = s[1:2] // "(B)" is the choice B
	}
	sh := &shape{kind: sScalar, text: s}
	if isWord(s) {
		sh.word = true
		return sh, nil
	}
	n, err := parseExpression(s, depth)
	if err != nil {
		return sh, nil
	}
	sh.expr = n
	if c.vars == nil {
		c.vars = map[string]bool{}
	}
	collectVars(n, c.vars)
	return sh, nil
}

// collectVars adds the variables of n to vars.
func collectVars(n *node, vars map[string]bool) {
	for n != nil {
		if n.kind == nVar {
			vars[n.name] = true
		}
		if n.b != nil {
			collectVars(n.b, vars)
		}
		n = n.a
	}
}

// isWord reports whether s is only letters (in any script).
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// splitTop splits s at sep where it is outside all brackets. sep is ",",
// "&", `\\` or `\cup`.
func splitTop(s, sep string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		if depth == 0 && strings.HasPrefix(s[i:], sep) &&
			(sep != `\cup` || i+len(sep) >= len(s) || !isLetter(s[i+len(sep)])) {
			parts = append(parts, s[start:i])
			i += len(sep) - 1
			start = i + 1
			continue
		}
		d, w := bracketDelta(s, i)
		depth += d
		i += w - 1
		if depth < 0 {
			return []string{s}
		}
	}
	if depth != 0 {
		return []string{s}
	}
	return append(parts, s[start:])
}

// bracketDelta is how the character at s[i] changes the bracket depth, and
// how many bytes it spans: an escaped brace (\{, \}) is a bracket, any other
// escape spans its two bytes and is none.
func bracketDelta(s string, i int) (delta, width int) {
	switch s[i] {
	case '\\':
		if i+1 == len(s) {
			return 0, 1
		}
		switch s[i+1] {
		case '{':
			return 1, 2
		case '}':
			return -1, 2
		}
		return 0, 2
	case '(', '[', '{':
		return 1, 1
	case ')', ']', '}':
		return -1, 1
	}
	return 0, 1
}

// closesAtEnd reports whether the bracket opening s closes at its very end,
// with any bracket types ("[1,3)" counts).
func closesAtEnd(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		d, w := bracketDelta(s, i)
		if d == 0 && s[i] != '\\' {
			continue
		}
		depth += d
		i += w - 1
		if depth == 0 {
			return i == len(s)-1
		}
	}
	return false
}

// matrixBody recognizes \begin{pmatrix}…\end{pmatrix} and its relatives.
func matrixBody(s string) (env, body string, ok bool) {
	const begin = `\begin{`
	if !strings.HasPrefix(s, begin) {
		return "", "", false
	}
	k := strings.IndexByte(s[len(begin):], '}')
	if k < 0 {
		return "", "", false
	}
	env = s[len(begin) : len(begin)+k]
	if !strings.HasSuffix(env, "matrix") && env != "array" {
		return "", "", false
	}
	end := `\end{` + env + `}`
	if !strings.HasSuffix(s, end) {
		return "", "", false
	}
	body = s[len(begin)+k+1 : len(s)-len(end)]
	if env == "array" { // \begin{array}{cc} … : drop the column spec
		if strings.HasPrefix(body, "{") {
			if close := matchBrace(body, 0); close > 0 {
				body = body[close+1:]
			}
		}
	}
	return "matrix", body, true
}

// sampleCount is how many points expressions with variables are evaluated at.
// Eight points, with signs mixed per variable, so that expressions equal
// only for positive values (|x| and x, \sqrt{x^2} and x, \ln x^2 and 2\ln x)
// are told apart, and agreement at every point where both are defined is
// required at three points at least.
const sampleCount = 8

// evaluate binds variables to sample points and evaluates every scalar of
// both shapes. It reports false when there are too many variables.
func (c *comparer) evaluate(a, b *shape) bool {
	names := make([]string, 0, len(c.vars))
	for v := range c.vars {
		names = append(names, v)
	}
	if len(names) > MaxVariables {
		return false
	}
	slices.Sort(names)
	if len(names) == 0 {
		c.envs = []map[string]*big.Rat{nil}
	} else {
		for j := range sampleCount {
			env := map[string]*big.Rat{}
			var used []*big.Rat
			for k, name := range names {
				r := sample(j, k)
				for unique := false; !unique; {
					unique = true
					for _, u := range used {
						if u.Cmp(r) == 0 {
							r.Add(r, big.NewRat(1, 1))
							unique = false
						}
					}
				}
				used = append(used, r)
				env[name] = r
			}
			c.envs = append(c.envs, env)
		}
	}
	c.evalShape(a)
	c.evalShape(b)
	return true
}

// sample is the value of the k-th variable at the j-th sample point: a fixed,
// scrambled positive rational with small numerator and denominator, so that
// different expressions agreeing at every point by accident is unlikely.
func sample(j, k int) *big.Rat {
	x := uint64(j)*0x9E3779B97F4A7C15 + uint64(k)*0xBF58476D1CE4E5B9 + 0x94D049BB133111EB
	x ^= x >> 31
	x *= 0xD6E8FEB86659FD93
	x ^= x >> 29
	num := int64(x%97) + 2
	den := int64((x>>32)%29) + 3
	if (x>>40)&1 == 1 && j > 0 {
		num = -num
	}
	return big.NewRat(num, den)
}

// evalShape evaluates every scalar of s at every sample point.
func (c *comparer) evalShape(s *shape) {
	if s.kind != sScalar {
		for _, e := range s.elems {
			c.evalShape(e)
		}
		for _, d := range s.diffs {
			if d != nil {
				c.evalShape(d)
			}
		}
		return
	}
	if s.expr == nil {
		return
	}
	s.vals = make([]value, len(c.envs))
	s.errs = make([]bool, len(c.envs))
	for i, env := range c.envs {
		ev := evaluator{env: env, work: &c.work}
		v, err := ev.eval(s.expr)
		s.vals[i], s.errs[i] = v, err != nil
	}
}

// scaled returns a copy of a numeric scalar divided by d, or nil.
func scaled(s *shape, d int64) *shape {
	if s.kind != sScalar || s.expr == nil {
		return nil
	}
	t := *s
	t.text = ""
	t.vals = make([]value, len(s.vals))
	for i, v := range s.vals {
		if s.errs[i] {
			continue
		}
		switch v.kind {
		case kRat:
			t.vals[i] = value{kind: kRat, r: new(big.Rat).Quo(v.r, big.NewRat(d, 1))}
		case kFloat:
			t.vals[i] = value{kind: kFloat, f: v.f / float64(d)}
		default:
			t.vals[i] = v
		}
	}
	return &t
}

// equal compares two evaluated shapes. Results are memoized: nested sets
// compare child pairs from both sides, which would otherwise double the work
// at every level.
func (c *comparer) equal(a, b *shape) bool {
	key := [2]*shape{a, b}
	if eq, ok := c.memo[key]; ok {
		return eq
	}
	eq := c.compare(a, b)
	if c.memo == nil {
		c.memo = map[[2]*shape]bool{}
	}
	c.memo[key] = eq
	return eq
}

// compare compares two shapes by kind; see the package documentation.
func (c *comparer) compare(a, b *shape) bool {
	if a.kind == sRel || b.kind == sRel {
		return c.compareRel(a, b)
	}
	if a.kind == sScalar && b.kind == sScalar {
		return c.scalarEqual(a, b)
	}
	// A one-element set of a number is that number: "\{5\}" and "5".
	if a.kind == sSet && b.kind == sScalar && len(a.elems) == 1 && a.elems[0].kind == sScalar {
		return c.equal(a.elems[0], b)
	}
	if b.kind == sSet && a.kind == sScalar && len(b.elems) == 1 && b.elems[0].kind == sScalar {
		return c.equal(a, b.elems[0])
	}
	unordered := func(k shapeKind) bool { return k == sList || k == sSet }
	if a.kind == sUnion && b.kind == sUnion || unordered(a.kind) && unordered(b.kind) {
		return c.sameSet(a.elems, b.elems)
	}
	if a.kind == sList && b.kind == sTuple && b.open == "(" && b.close == ")" ||
		b.kind == sList && a.kind == sTuple && a.open == "(" && a.close == ")" ||
		a.kind == sTuple && b.kind == sTuple && a.open == b.open && a.close == b.close {
		if len(a.elems) != len(b.elems) {
			return false
		}
		for i := range a.elems {
			if !c.equal(a.elems[i], b.elems[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// sameSet reports whether every element of each side equals some element of
// the other.
func (c *comparer) sameSet(a, b []*shape) bool {
	// a holds predicted elements and b gold ones: equal takes them in that
	// order, since the relation rules are not symmetric.
	for _, e := range a {
		found := false
		for _, f := range b {
			if c.equal(e, f) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for _, f := range b {
		found := false
		for _, e := range a {
			if c.equal(e, f) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// scalarEqual compares scalars: as text, as words, or by value at every
// sample point where both are defined (at least one, and undefined at the
// same points).
func (c *comparer) scalarEqual(a, b *shape) bool {
	if a.text != "" && strings.EqualFold(a.text, b.text) {
		return true
	}
	if a.word || b.word || a.expr == nil || b.expr == nil {
		return false
	}
	// math_verify's sympy_numeric_eq: when one side is a decimal (a sympy
	// Float) and both are numbers, both are rounded to float_rounding places
	// and compared. Strict also compares them as every other value, so that
	// it only takes rewards away.
	round := (isDecimal(a.expr) || isDecimal(b.expr)) && !hasVar(a.expr) && !hasVar(b.expr)
	exact := c.strict || !round
	defined := 0
	for i := range a.vals {
		if a.errs[i] || b.errs[i] {
			if a.errs[i] != b.errs[i] {
				return false
			}
			continue
		}
		if c.work.spend(sizeCost(a.vals[i], b.vals[i])) != nil {
			return false
		}
		if round && !roundedEqual(a.vals[i], b.vals[i]) || exact && !equalValues(a.vals[i], b.vals[i]) {
			return false
		}
		defined++
	}
	// With variables, agreement must be seen at several points.
	return defined >= min(len(a.vals), 3)
}

// plusMinus expands an answer with \pm (or \mp) outside brackets into the set
// of its values, as latex2sympy2_extended does: "1 \pm \sqrt{19}" is
// {1+\sqrt{19}, 1-\sqrt{19}}. At most two signs are expanded; it returns nil
// when there is none.
func (c *comparer) plusMinus(s string, depth int) (*shape, error) {
	at, spell := -1, ""
	d := 0
	for i := 0; i < len(s) && at < 0; i++ {
		if d == 0 {
			for _, sp := range [...]string{`\pm`, `\mp`} {
				if strings.HasPrefix(s[i:], sp) && (i+3 >= len(s) || !isLetter(s[i+3])) {
					at, spell = i, sp
				}
			}
			if at >= 0 {
				break
			}
		}
		dd, w := bracketDelta(s, i)
		d += dd
		i += w - 1
	}
	if at < 0 {
		return nil, nil
	}
	if depth > 2*MaxDepth/3 {
		return nil, errLimit
	}
	signs := [2]string{"+", "-"}
	if spell == `\mp` {
		signs = [2]string{"-", "+"}
	}
	set := &shape{kind: sSet, pm: true}
	for _, sign := range signs {
		e, err := c.parseShape(s[:at]+sign+s[at+3:], depth+8)
		if err != nil {
			return nil, err
		}
		if e.pm {
			set.elems = append(set.elems, e.elems...)
		} else {
			set.elems = append(set.elems, e)
		}
	}
	return set, nil
}
