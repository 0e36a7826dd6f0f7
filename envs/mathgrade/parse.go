package mathgrade

import (
	"math/big"
	"strings"
)

// tokKind classifies a token of the LaTeX-ish expression language.
type tokKind uint8

const (
	tEOF tokKind = iota
	tNum         // 12, 1.5, .5, 1.5e3
	tVar         // x, x_1, \theta
	tCmd         // \frac, \pi, ...
	tSym         // + - * / ^ ( ) [ ] { } | !
)

type token struct {
	kind tokKind
	text string
}

// greek letters are variables, as are ASCII letters.
var greek = map[string]bool{
	"alpha": true, "beta": true, "gamma": true, "delta": true, "epsilon": true, "varepsilon": true,
	"zeta": true, "eta": true, "theta": true, "vartheta": true, "iota": true, "kappa": true,
	"lambda": true, "mu": true, "nu": true, "xi": true, "rho": true, "sigma": true, "tau": true,
	"upsilon": true, "phi": true, "varphi": true, "chi": true, "psi": true, "omega": true,
	"Gamma": true, "Delta": true, "Theta": true, "Lambda": true, "Xi": true, "Sigma": true,
	"Phi": true, "Psi": true, "Omega": true,
}

// lex splits a normalized answer into tokens.
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ':
			i++
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			if j < len(s) && s[j] == '.' {
				j++
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			if k := repeating(s, j); k > j { // 0.\overline{3}
				toks = append(toks, token{tNum, s[i:k]})
				i = k
				continue
			}
			if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
				k := j + 1
				if k < len(s) && (s[k] == '+' || s[k] == '-') {
					k++
				}
				if k < len(s) && isDigit(s[k]) {
					for k < len(s) && isDigit(s[k]) {
						k++
					}
					j = k
				}
			}
			toks = append(toks, token{tNum, s[i:j]})
			i = j
		case isLetter(c):
			j := subscript(s, i+1)
			toks = append(toks, token{tVar, s[i:j]})
			i = j
		case c == '\\':
			j := i + 1
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			if j == i+1 {
				if j >= len(s) {
					return nil, errSyntax
				}
				toks = append(toks, token{tSym, s[i : j+1]})
				i = j + 1
				continue
			}
			if greek[s[i+1:j]] {
				k := subscript(s, j)
				toks = append(toks, token{tVar, s[i:k]})
				i = k
				continue
			}
			toks = append(toks, token{tCmd, s[i+1 : j]})
			i = j
		case strings.IndexByte("+-*/^()[]{}|!_", c) >= 0:
			toks = append(toks, token{tSym, s[i : i+1]})
			i++
		default:
			return nil, errSyntax
		}
	}
	return toks, nil
}

// repeating returns the end of a repeating-decimal suffix "\overline{digits}"
// at i, directly after a literal with a decimal point, or i.
func repeating(s string, i int) int {
	const over = `\overline{`
	if !strings.HasPrefix(s[i:], over) || !strings.Contains(s[:i], ".") {
		return i
	}
	j := i + len(over)
	k := j
	for k < len(s) && isDigit(s[k]) {
		k++
	}
	if k == j || k >= len(s) || s[k] != '}' {
		return i
	}
	return k + 1
}

// subscript returns the end of an optional subscript "_1", "_{12}" at i.
func subscript(s string, i int) int {
	if i+1 >= len(s) || s[i] != '_' {
		return i
	}
	if isLetter(s[i+1]) || isDigit(s[i+1]) {
		return i + 2
	}
	if s[i+1] == '{' {
		j := i + 2
		for j < len(s) && (isLetter(s[j]) || isDigit(s[j])) {
			j++
		}
		if j < len(s) && s[j] == '}' && j > i+2 {
			return j + 1
		}
	}
	return i
}

// parser is a recursive-descent parser for expressions:
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | \cdot | \times | "/" | \div) unary | implicit power }
//	unary   = ("-" | "+") unary | power
//	power   = postfix [ "^" ( ("-" | "+") power | power ) ]
//	postfix = atom { "!" }
//	atom    = number [\frac] | variable | "(" expr ")" | "[" expr "]" | "{" expr "}"
//	        | "|" expr "|" | \frac arg arg | \sqrt ["[" expr "]"] arg | \binom arg arg
//	        | \pi | \infty
//
// Implicit multiplication ("2\pi", "3x", "2(1+x)") binds like explicit
// multiplication; an integer directly followed by a \frac of two integers is
// a mixed number.
type parser struct {
	toks  []token
	pos   int
	depth int
}

// peek returns the next token without consuming it (tEOF at the end).
func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

// next consumes and returns the next token.
func (p *parser) next() token {
	t := p.peek()
	if p.pos < len(p.toks) {
		p.pos++
	}
	return t
}

// isSym reports whether the next token is the symbol s.
func (p *parser) isSym(s string) bool {
	t := p.peek()
	return t.kind == tSym && t.text == s
}

// expect consumes the symbol s or fails.
func (p *parser) expect(s string) error {
	if !p.isSym(s) {
		return errSyntax
	}
	p.pos++
	return nil
}

// enter counts one more level of nesting, failing beyond MaxDepth; the
// caller undoes it when it returns.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return errLimit
	}
	return nil
}

// parseExpression parses a whole normalized scalar answer.
func parseExpression(s string, depth int) (*node, error) {
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, errSyntax
	}
	p := &parser{toks: toks, depth: depth}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, errSyntax
	}
	return n, nil
}

// expr parses a sum or difference of terms.
func (p *parser) expr() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	left, err := p.term()
	if err != nil {
		return nil, err
	}
	for {
		var op nodeKind
		switch {
		case p.isSym("+"):
			op = nAdd
		case p.isSym("-"):
			op = nSub
		default:
			return left, nil
		}
		p.pos++
		right, err := p.term()
		if err != nil {
			return nil, err
		}
		left = &node{kind: op, a: left, b: right}
	}
}

// term parses a product or quotient, with implicit multiplication.
func (p *parser) term() (*node, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		var op nodeKind
		var right *node
		switch {
		case t.kind == tSym && t.text == "*", t.kind == tCmd && (t.text == "cdot" || t.text == "times"):
			op = nMul
		case t.kind == tSym && t.text == "/", t.kind == tCmd && t.text == "div":
			op = nDiv
		case p.startsAtom(t):
			if t.kind == tNum && p.pos > 0 && p.toks[p.pos-1].kind == tNum {
				return nil, errSyntax // "1.2.3" is not a product
			}
			if right, err = p.power(); err != nil {
				return nil, err
			}
			left = &node{kind: nMul, a: left, b: right}
			continue
		default:
			return left, nil
		}
		p.pos++
		if right, err = p.unary(); err != nil {
			return nil, err
		}
		left = &node{kind: op, a: left, b: right}
	}
}

// startsAtom reports whether t can begin an implicitly multiplied factor.
func (p *parser) startsAtom(t token) bool {
	switch t.kind {
	case tNum, tVar:
		return true
	case tSym:
		return t.text == "(" || t.text == "[" || t.text == "{"
	case tCmd:
		switch t.text {
		case "frac", "sqrt", "pi", "infty", "binom", "exp":
			return true
		}
		return funcs[t.text] != nil
	}
	return false
}

// unary parses leading signs: "-2^2" is -(2^2).
func (p *parser) unary() (*node, error) {
	switch {
	case p.isSym("-"):
		p.pos++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		a, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{kind: nNeg, a: a}, nil
	case p.isSym("+"):
		p.pos++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		return p.unary()
	}
	return p.power()
}

// power parses a right-associative power: "2^3^2" is 2^9, and an exponent
// written without braces takes the whole number ("2^10" is 1024).
func (p *parser) power() (*node, error) {
	base, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if !p.isSym("^") {
		return base, nil
	}
	p.pos++
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var exp *node
	switch {
	case p.isSym("-"):
		p.pos++
		e, err := p.power()
		if err != nil {
			return nil, err
		}
		exp = &node{kind: nNeg, a: e}
	case p.isSym("+"):
		p.pos++
		exp, err = p.power()
	default:
		exp, err = p.power()
	}
	if err != nil {
		return nil, err
	}
	return &node{kind: nPow, a: base, b: exp}, nil
}

// postfix parses factorials.
func (p *parser) postfix() (*node, error) {
	a, err := p.atom()
	if err != nil {
		return nil, err
	}
	for p.isSym("!") {
		p.pos++
		a = &node{kind: nFact, a: a}
	}
	return a, nil
}

// atom parses a number, variable, bracketed expression or command.
func (p *parser) atom() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t := p.next()
	switch t.kind {
	case tNum:
		n, err := number(t.text)
		if err != nil {
			return nil, err
		}
		if t := p.peek(); n.intLit && t.kind == tCmd && t.text == "frac" {
			f, err := p.atom()
			if err != nil {
				return nil, err
			}
			if f.a.kind == nNum && f.a.intLit && f.b.kind == nNum && f.b.intLit {
				return &node{kind: nAdd, a: n, b: f}, nil // mixed number 1\frac{1}{2}
			}
			return &node{kind: nMul, a: n, b: f}, nil
		}
		return n, nil
	case tVar:
		if t.text == "e" {
			return &node{kind: nE}, nil // Euler's number, as latex2sympy reads it
		}
		return &node{kind: nVar, name: t.text}, nil
	case tSym:
		var closer string
		switch t.text {
		case "(":
			closer = ")"
		case "[":
			closer = "]"
		case "{":
			closer = "}"
		case "|":
			closer = "|"
		default:
			return nil, errSyntax
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(closer); err != nil {
			return nil, err
		}
		if t.text == "|" {
			return &node{kind: nAbs, a: e}, nil
		}
		return e, nil
	case tCmd:
		switch t.text {
		case "pi":
			return &node{kind: nPi}, nil
		case "exp":
			a, err := p.funcArg()
			if err != nil {
				return nil, err
			}
			return &node{kind: nPow, a: &node{kind: nE}, b: a}, nil
		case "infty":
			return &node{kind: nInf}, nil
		case "frac", "binom":
			a, err := p.arg()
			if err != nil {
				return nil, err
			}
			b, err := p.arg()
			if err != nil {
				return nil, err
			}
			if t.text == "binom" {
				return &node{kind: nBinom, a: a, b: b}, nil
			}
			return &node{kind: nDiv, a: a, b: b}, nil
		case "sqrt":
			if funcs[t.text] == nil {
				break
			}
			fallthrough
		default:
			if funcs[t.text] != nil {
				return p.function(t.text)
			}
		}
		switch t.text {
		case "sqrt":
			var deg *node
			if p.isSym("[") {
				p.pos++
				d, err := p.expr()
				if err != nil {
					return nil, err
				}
				if err := p.expect("]"); err != nil {
					return nil, err
				}
				deg = d
			}
			a, err := p.arg()
			if err != nil {
				return nil, err
			}
			return &node{kind: nRoot, a: a, b: deg}, nil
		}
	}
	return nil, errSyntax
}

// function parses a named function after its name: an optional base
// (\log_2), an optional power (\sin^2 x is (\sin x)^2, \sin^{-1} x is
// \arcsin x), then the argument: parenthesized, braced, or a run of
// implicitly multiplied factors without functions ("\sin 2x" is sin(2x)).
func (p *parser) function(name string) (*node, error) {
	var base, exp *node
	var err error
	if p.isSym("_") && name == "log" {
		p.pos++
		if base, err = p.arg(); err != nil {
			return nil, err
		}
	}
	if p.isSym("^") {
		p.pos++
		if p.isSym("-") || p.isSym("{") {
			if exp, err = p.unaryArg(); err != nil {
				return nil, err
			}
		} else if exp, err = p.arg(); err != nil {
			return nil, err
		}
		if exp.kind == nNeg && exp.a.kind == nNum && exp.a.num.Cmp(big.NewRat(1, 1)) == 0 {
			inv := inverses[name] // \sin^{-1} is \arcsin
			if inv == "" {
				return nil, errSyntax // \sec^{-1}: an inverse this parser does not know
			}
			name, exp = inv, nil
		}
	}
	a, err := p.funcArg()
	if err != nil {
		return nil, err
	}
	f := &node{kind: nFunc, name: name, a: a, b: base}
	if exp != nil {
		return &node{kind: nPow, a: f, b: exp}, nil
	}
	return f, nil
}

// unaryArg parses a signed or braced exponent: "-1" or "{-1}".
func (p *parser) unaryArg() (*node, error) {
	if p.isSym("{") {
		return p.atom()
	}
	return p.unary()
}

// funcArg parses the argument of a function.
func (p *parser) funcArg() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t := p.peek()
	if t.kind == tSym && (t.text == "(" || t.text == "{" || t.text == "[") {
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		if p.isSym("^") { // \sin(x)^2
			return a, nil
		}
		return a, nil
	}
	a, err := p.power()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if !(t.kind == tNum || t.kind == tVar || t.kind == tCmd && (t.text == "pi" || t.text == "frac" || t.text == "sqrt")) {
			return a, nil
		}
		b, err := p.power()
		if err != nil {
			return nil, err
		}
		a = &node{kind: nMul, a: a, b: b}
	}
}

// arg parses a command argument: a braced expression, or a single token as
// TeX allows (\frac12 takes the digits one at a time).
func (p *parser) arg() (*node, error) {
	t := p.peek()
	if t.kind == tSym && t.text == "{" {
		return p.atom()
	}
	if t.kind == tNum && len(t.text) > 1 && isDigit(t.text[0]) {
		p.toks[p.pos].text = t.text[1:]
		return number(t.text[:1])
	}
	return p.atom()
}

// number converts a numeric literal to an exact rational, refusing
// exponents over MaxExponent and results over MaxBits.
func number(lit string) (*node, error) {
	if k := strings.Index(lit, `\overline{`); k >= 0 {
		return repeatingNumber(lit[:k], lit[k+len(`\overline{`):len(lit)-1])
	}
	mant, exp := lit, 0
	if k := strings.IndexAny(lit, "eE"); k >= 0 {
		mant = lit[:k]
		e := strings.TrimPrefix(lit[k+1:], "+")
		neg := strings.HasPrefix(e, "-")
		e = strings.TrimPrefix(e, "-")
		e = strings.TrimLeft(e, "0")
		if len(e) > 4 {
			return nil, errLimit
		}
		for _, c := range e {
			exp = exp*10 + int(c-'0')
		}
		if exp > MaxExponent {
			return nil, errLimit
		}
		if neg {
			exp = -exp
		}
	}
	intLit := mant == lit && !strings.Contains(lit, ".")
	decimal := strings.Contains(mant, ".")
	digits := mant
	if k := strings.IndexByte(mant, '.'); k >= 0 {
		digits = mant[:k] + mant[k+1:]
		exp -= len(mant) - k - 1
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return &node{kind: nNum, num: new(big.Rat), intLit: intLit, decimal: decimal}, nil
	}
	// ~3.32 bits per digit: refuse before allocating anything large.
	if len(digits)*3 > MaxBits || exp > MaxBits/3 || exp < -MaxBits/3 {
		return nil, errLimit
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return nil, errSyntax
	}
	r := new(big.Rat).SetInt(n)
	if exp != 0 {
		abs := exp
		if abs < 0 {
			abs = -abs
		}
		scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs)), nil)
		if exp > 0 {
			r.Mul(r, new(big.Rat).SetInt(scale))
		} else {
			r.Quo(r, new(big.Rat).SetInt(scale))
		}
	}
	v, err := ratVal(r)
	if err != nil {
		return nil, err
	}
	return &node{kind: nNum, num: v.r, intLit: intLit, decimal: decimal}, nil
}

// repeatingNumber is head (such as "0.1") followed by the digits rep
// repeated forever: head + rep / (10^len(rep) - 1) / 10^(digits after the point).
func repeatingNumber(head, rep string) (*node, error) {
	point := strings.IndexByte(head, '.')
	if len(rep) > 100 || len(head)-point-1 > 100 {
		return nil, errLimit
	}
	h, err := number(strings.TrimSuffix(head, "."))
	if err != nil {
		return nil, err
	}
	r, ok := new(big.Int).SetString(rep, 10)
	if !ok {
		return nil, errSyntax
	}
	ten := big.NewInt(10)
	nines := new(big.Int).Exp(ten, big.NewInt(int64(len(rep))), nil)
	nines.Sub(nines, big.NewInt(1))
	scale := new(big.Int).Exp(ten, big.NewInt(int64(len(head)-point-1)), nil)
	tail := new(big.Rat).SetFrac(r, nines.Mul(nines, scale))
	return &node{kind: nNum, num: new(big.Rat).Add(h.num, tail)}, nil
}
