package mathgrade

import (
	"errors"
	"math"
	"math/big"
)

// Internal errors; any of them makes an answer not equivalent to a different one.
var (
	errSyntax = errors.New("mathgrade: not an expression")
	errLimit  = errors.New("mathgrade: resource limit")
	errDomain = errors.New("mathgrade: undefined value")
)

// valKind says how a value is represented.
type valKind uint8

const (
	kRat   valKind = iota // exact rational
	kFloat                // irrational approximation
	kInf                  // ±infinity, sign in f
)

// value is a real number: exact while it can be, float64 once irrational.
type value struct {
	kind valKind
	r    *big.Rat
	f    float64
}

// relTol is the relative tolerance for comparing irrational values: float64
// evaluation of short expressions is accurate to ~1e-15, and answers written
// as decimals must carry about ten significant digits to match.
const relTol = 1e-9

// ratVal wraps an exact result, refusing one over MaxBits.
func ratVal(r *big.Rat) (value, error) {
	if r.Num().BitLen() > MaxBits || r.Denom().BitLen() > MaxBits {
		return value{}, errLimit
	}
	return value{kind: kRat, r: r}, nil
}

// floatVal wraps an inexact result, refusing NaN and infinities.
func floatVal(f float64) (value, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return value{}, errDomain
	}
	return value{kind: kFloat, f: f}, nil
}

// float approximates v as a float64.
func (v value) float() float64 {
	switch v.kind {
	case kRat:
		f, _ := v.r.Float64()
		return f
	default:
		return v.f
	}
}

// equalValues compares two values: exactly when both are rational, within
// relTol otherwise (or within 1e-12 absolutely, for results that cancel to
// about zero in float64).
func equalValues(a, b value) bool {
	if a.kind == kInf || b.kind == kInf {
		return a.kind == b.kind && a.f == b.f
	}
	if a.kind == kRat && b.kind == kRat {
		return a.r.Cmp(b.r) == 0
	}
	x, y := a.float(), b.float()
	if math.IsInf(x, 0) || math.IsInf(y, 0) {
		return false
	}
	d := math.Abs(x - y)
	return d <= relTol*max(math.Abs(x), math.Abs(y)) || d <= 1e-12
}

// roundedEqual compares two values rounded to Precision decimal places, as
// math_verify compares a sympy Float with a number: a.round(6) == b.round(6)
// (sympy's Expr.round rounds half to even). The exact value is rounded once;
// sympy rounds a 16-digit approximation, which differs only within 1e-15
// (relative) of a tie. Infinities compare as in equalValues.
func roundedEqual(a, b value) bool {
	if a.kind == kInf || b.kind == kInf {
		return equalValues(a, b)
	}
	return roundHalfEven(a.rat()).Cmp(roundHalfEven(b.rat())) == 0
}

// rat is v as an exact rational (a float64 exactly as it is stored).
func (v value) rat() *big.Rat {
	if v.kind == kRat {
		return v.r
	}
	return new(big.Rat).SetFloat64(v.f) // finite: floatVal refuses the rest
}

// precisionScale is 10^Precision, the denominator of a rounded value.
var precisionScale = new(big.Int).Exp(big.NewInt(10), big.NewInt(Precision), nil)

// roundHalfEven rounds r to Precision decimal places, ties to the even last
// digit.
func roundHalfEven(r *big.Rat) *big.Rat {
	num := new(big.Int).Mul(r.Num(), precisionScale)
	q, m := new(big.Int).QuoRem(num, r.Denom(), new(big.Int)) // q toward zero
	m.Lsh(m.Abs(m), 1)
	if c := m.Cmp(r.Denom()); c > 0 || c == 0 && q.Bit(0) == 1 {
		q.Add(q, big.NewInt(int64(num.Sign())))
	}
	return new(big.Rat).SetFrac(q, precisionScale)
}

// isDecimal reports whether n is a decimal literal, negated or not: what
// latex2sympy reads as an atomic sympy Float.
func isDecimal(n *node) bool {
	if n.kind == nNeg {
		n = n.a
	}
	return n.kind == nNum && n.decimal
}

// nodeKind is the operation of an expression node.
type nodeKind uint8

const (
	nNum nodeKind = iota
	nVar
	nPi
	nInf
	nNeg
	nAbs
	nAdd
	nSub
	nMul
	nDiv
	nPow
	nRoot // a = radicand, b = degree or nil for a square root
	nFact
	nBinom
	nE    // Euler's number
	nFunc // name(a), with base b for \log_b
)

// node is an expression tree node. Evaluation never mutates num.
type node struct {
	kind nodeKind
	num  *big.Rat
	name string
	a, b *node
	// intLit marks a literal written without a decimal point or exponent,
	// for mixed numbers; decimal one written with a decimal point (not a
	// repeating decimal), which latex2sympy reads as a sympy Float.
	intLit, decimal bool
}

// workBudget bounds the big-number work of one Equivalent call, in units of
// (64-bit words)², about the cost of one multiplication: the size limits
// bound each operation, and this bounds how many large ones there are.
const workBudget = 1 << 20

// budget is the work left for one comparison.
type budget struct{ left int64 }

// spend charges cost units; once the budget is gone every charge fails.
func (b *budget) spend(cost int64) error {
	b.left -= cost
	if b.left < 0 {
		return errLimit
	}
	return nil
}

// sizeCost is the cost of an operation involving these values: the square
// of the largest exact one in 64-bit words, times 32 when a fraction must be
// reduced (a GCD costs far more than a multiplication).
func sizeCost(vs ...value) int64 {
	w, frac := 1, false
	for _, v := range vs {
		if v.kind == kRat && v.r != nil {
			w = max(w, v.r.Num().BitLen()/64+1, v.r.Denom().BitLen()/64+1)
			frac = frac || !v.r.IsInt()
		}
	}
	cost := int64(w) * int64(w)
	if frac {
		cost *= 32
	}
	return cost
}

// evaluator evaluates expressions with variables bound to sample values.
type evaluator struct {
	env  map[string]*big.Rat
	work *budget
}

// eval evaluates n, charging the work budget for every operation. The left
// spine of a chain such as 1+2+3+… or 2x·y·z is walked in a loop, so long
// sums and products do not recurse deeply; everything else nests at most
// MaxDepth levels.
func (e *evaluator) eval(n *node) (value, error) {
	var spine []*node
	for n.kind >= nAdd && n.kind <= nDiv {
		spine = append(spine, n)
		n = n.a
	}
	if err := e.work.spend(1); err != nil {
		return value{}, err
	}
	v, cost, err := e.evalNode(n)
	if err == nil {
		err = e.work.spend(cost)
	}
	for i := len(spine) - 1; i >= 0 && err == nil; i-- {
		var b value
		if b, err = e.eval(spine[i].b); err != nil {
			break
		}
		if v, err = arith(spine[i].kind, v, b); err == nil {
			err = e.work.spend(1 + sizeCost(v))
		}
	}
	return v, err
}

// evalNode evaluates n and returns the work its own operation cost.
func (e *evaluator) evalNode(n *node) (value, int64, error) {
	v, err := e.evalOp(n)
	if err != nil {
		return value{}, 0, err
	}
	// Operands were charged when they were computed; the result is what
	// this operation adds. Some operations are several multiplications.
	cost := sizeCost(v)
	switch n.kind {
	case nPow:
		cost = max(4*cost, 256)
	case nFact, nBinom:
		cost = max(16*cost, 256)
	case nRoot:
		cost = max(32*cost, 256)
	}
	return v, cost, nil
}

// evalOp evaluates one node; chains of + - * / are normally taken apart by
// eval before they get here.
func (e *evaluator) evalOp(n *node) (value, error) {
	switch n.kind {
	case nNum:
		return value{kind: kRat, r: n.num}, nil
	case nVar:
		r, ok := e.env[n.name]
		if !ok {
			return value{}, errDomain
		}
		return value{kind: kRat, r: r}, nil
	case nPi:
		return value{kind: kFloat, f: math.Pi}, nil
	case nE:
		return value{kind: kFloat, f: math.E}, nil
	case nInf:
		return value{kind: kInf, f: 1}, nil
	}
	a, err := e.eval(n.a)
	if err != nil {
		return value{}, err
	}
	switch n.kind {
	case nNeg:
		switch a.kind {
		case kRat:
			return value{kind: kRat, r: new(big.Rat).Neg(a.r)}, nil
		default:
			return value{kind: a.kind, f: -a.f}, nil
		}
	case nAbs:
		switch a.kind {
		case kRat:
			return value{kind: kRat, r: new(big.Rat).Abs(a.r)}, nil
		default:
			return value{kind: a.kind, f: math.Abs(a.f)}, nil
		}
	case nFact:
		return factorial(a)
	case nFunc:
		var base *value
		if n.b != nil {
			b, err := e.eval(n.b)
			if err != nil {
				return value{}, err
			}
			base = &b
		}
		return applyFunc(n.name, a, base)
	case nRoot:
		deg := value{kind: kRat, r: big.NewRat(2, 1)}
		if n.b != nil {
			if deg, err = e.eval(n.b); err != nil {
				return value{}, err
			}
		}
		if deg.kind != kRat || !deg.r.IsInt() || deg.r.Sign() <= 0 || deg.r.Num().CmpAbs(big.NewInt(MaxExponent)) > 0 {
			return value{}, errDomain
		}
		return power(a, value{kind: kRat, r: new(big.Rat).Inv(deg.r)})
	}
	b, err := e.eval(n.b)
	if err != nil {
		return value{}, err
	}
	switch n.kind {
	case nPow:
		return power(a, b)
	case nBinom:
		return binomial(a, b)
	}
	return arith(n.kind, a, b)
}

// arith applies + - * / exactly when it can.
func arith(op nodeKind, a, b value) (value, error) {
	if a.kind == kInf || b.kind == kInf {
		return value{}, errDomain
	}
	if a.kind == kRat && b.kind == kRat {
		r := new(big.Rat)
		switch op {
		case nAdd:
			r.Add(a.r, b.r)
		case nSub:
			r.Sub(a.r, b.r)
		case nMul:
			r.Mul(a.r, b.r)
		case nDiv:
			if b.r.Sign() == 0 {
				return value{}, errDomain
			}
			r.Quo(a.r, b.r)
		}
		return ratVal(r)
	}
	x, y := a.float(), b.float()
	switch op {
	case nAdd:
		return floatVal(x + y)
	case nSub:
		return floatVal(x - y)
	case nMul:
		return floatVal(x * y)
	default:
		if y == 0 {
			return value{}, errDomain
		}
		return floatVal(x / y)
	}
}

var maxExp = big.NewInt(MaxExponent)

// power computes a^b, exactly for rational results, refusing exponents and
// results over the limits before doing any big work.
func power(a, b value) (value, error) {
	if a.kind == kInf || b.kind == kInf {
		return value{}, errDomain
	}
	if b.kind == kRat {
		p, q := b.r.Num(), b.r.Denom()
		if b.r.IsInt() {
			if p.CmpAbs(maxExp) > 0 {
				return value{}, errLimit
			}
			k := p.Int64()
			if a.kind == kRat {
				return ratPow(a.r, k)
			}
			return floatVal(math.Pow(a.f, float64(k)))
		}
		qOdd := q.Bit(0) == 1
		if a.kind == kRat && p.CmpAbs(maxExp) <= 0 && q.CmpAbs(maxExp) <= 0 {
			if root, ok := ratRoot(a.r, int(q.Int64())); ok {
				return ratPow(root, p.Int64())
			}
		}
		x, y := a.float(), b.float()
		if x < 0 {
			if !qOdd {
				return value{}, errDomain // not real
			}
			r := math.Pow(-x, y)
			if p.Bit(0) == 1 {
				r = -r
			}
			return floatVal(r)
		}
		if x == 0 && y < 0 {
			return value{}, errDomain
		}
		return floatVal(math.Pow(x, y))
	}
	x, y := a.float(), b.f
	if x < 0 || (x == 0 && y <= 0) {
		return value{}, errDomain
	}
	return floatVal(math.Pow(x, y))
}

// ratPow computes r^k for |k| <= MaxExponent, estimating the result size first.
func ratPow(r *big.Rat, k int64) (value, error) {
	if k == 0 {
		return value{kind: kRat, r: big.NewRat(1, 1)}, nil
	}
	if r.Sign() == 0 {
		if k < 0 {
			return value{}, errDomain
		}
		return value{kind: kRat, r: new(big.Rat)}, nil
	}
	abs := k
	if abs < 0 {
		abs = -abs
	}
	num, den := r.Num(), r.Denom()
	if int64(max(num.BitLen(), den.BitLen())-1)*abs > MaxBits {
		return value{}, errLimit
	}
	e := big.NewInt(abs)
	n := new(big.Int).Exp(new(big.Int).Abs(num), e, nil)
	d := new(big.Int).Exp(den, e, nil)
	if num.Sign() < 0 && abs%2 == 1 {
		n.Neg(n)
	}
	res := new(big.Rat).SetFrac(n, d)
	if k < 0 {
		res.Inv(res)
	}
	return ratVal(res)
}

// ratRoot returns the exact q-th root of r when it is rational.
func ratRoot(r *big.Rat, q int) (*big.Rat, bool) {
	if q <= 0 || q > MaxExponent {
		return nil, false
	}
	neg := r.Sign() < 0
	if neg && q%2 == 0 {
		return nil, false
	}
	n, ok := intRoot(new(big.Int).Abs(r.Num()), q)
	if !ok {
		return nil, false
	}
	d, ok := intRoot(r.Denom(), q)
	if !ok {
		return nil, false
	}
	if neg {
		n.Neg(n)
	}
	return new(big.Rat).SetFrac(n, d), true
}

// intRoot returns the floor of the q-th root of x >= 0 and whether it is
// exact, by integer Newton iteration from an over-estimate.
func intRoot(x *big.Int, q int) (*big.Int, bool) {
	if x.Sign() == 0 || q == 1 {
		return new(big.Int).Set(x), true
	}
	if q == 2 {
		s := new(big.Int).Sqrt(x)
		return s, new(big.Int).Mul(s, s).Cmp(x) == 0
	}
	bits := x.BitLen()
	if bits < q { // 1 <= x < 2^q, so the root is 1
		return big.NewInt(1), x.Cmp(big.NewInt(1)) == 0
	}
	qb, qm1 := big.NewInt(int64(q)), big.NewInt(int64(q-1))
	// Start just above the root, from a float64 estimate of log2(x)/q, so
	// Newton needs only a few steps whatever q is.
	shift := max(bits-64, 0)
	top := new(big.Int).Rsh(x, uint(shift)).Uint64()
	e := (math.Log2(float64(top)) + float64(shift)) / float64(q)
	whole := math.Floor(e)
	m := math.Exp2(e-whole) * (1 + 1e-9)
	r, _ := new(big.Float).SetMantExp(big.NewFloat(m), int(whole)).Int(nil)
	r.Add(r, big.NewInt(1))
	for range 200 { // converges in a handful of steps; the bound only guards
		t := new(big.Int).Exp(r, qm1, nil)
		t.Quo(x, t)
		next := new(big.Int).Mul(r, qm1)
		next.Add(next, t)
		next.Quo(next, qb)
		if next.Cmp(r) >= 0 {
			break
		}
		r = next
	}
	return r, new(big.Int).Exp(r, qb, nil).Cmp(x) == 0
}

// factorial computes n! for integers 0 <= n <= MaxExponent.
func factorial(a value) (value, error) {
	if a.kind != kRat || !a.r.IsInt() || a.r.Sign() < 0 {
		return value{}, errDomain
	}
	if a.r.Num().CmpAbs(maxExp) > 0 {
		return value{}, errLimit
	}
	n := a.r.Num().Int64()
	if n < 2 {
		return value{kind: kRat, r: big.NewRat(1, 1)}, nil
	}
	return ratVal(new(big.Rat).SetInt(new(big.Int).MulRange(1, n)))
}

// binomial computes C(n, k) for integers with 0 <= n <= MaxExponent, so
// that the result stays under MaxBits bits.
func binomial(a, b value) (value, error) {
	if a.kind != kRat || b.kind != kRat || !a.r.IsInt() || !b.r.IsInt() || a.r.Sign() < 0 {
		return value{}, errDomain
	}
	if a.r.Num().CmpAbs(maxExp) > 0 {
		return value{}, errLimit
	}
	n, k := a.r.Num().Int64(), b.r.Num()
	if k.Sign() < 0 || k.CmpAbs(a.r.Num()) > 0 {
		return value{kind: kRat, r: new(big.Rat)}, nil
	}
	return ratVal(new(big.Rat).SetInt(new(big.Int).Binomial(n, k.Int64())))
}

// funcs are the functions the parser knows, by command name, with their
// real-valued definitions; a result that is not a finite real is undefined.
var funcs = map[string]func(float64) float64{
	"sin": math.Sin, "cos": math.Cos, "tan": math.Tan,
	"sec":    func(x float64) float64 { return 1 / math.Cos(x) },
	"csc":    func(x float64) float64 { return 1 / math.Sin(x) },
	"cot":    func(x float64) float64 { return math.Cos(x) / math.Sin(x) },
	"arcsin": math.Asin, "arccos": math.Acos, "arctan": math.Atan,
	"sinh": math.Sinh, "cosh": math.Cosh, "tanh": math.Tanh,
	"ln": math.Log, "log": math.Log10,
}

// inverses maps a function to the one its "^{-1}" names.
var inverses = map[string]string{"sin": "arcsin", "cos": "arccos", "tan": "arctan"}

// applyFunc evaluates a named function in float64; \log with a base is
// log_b, \log without one is the base-10 logarithm and \ln the natural one,
// as in latex2sympy2_extended. Exact results are kept exact for a few cases that
// answers use as integers (\log_2 8 = 3, \ln 1 = 0, \sin 0 = 0).
func applyFunc(name string, a value, base *value) (value, error) {
	if a.kind == kInf || base != nil && base.kind == kInf {
		return value{}, errDomain
	}
	x := a.float()
	if base != nil {
		b := base.float()
		if b <= 0 || b == 1 || x <= 0 {
			return value{}, errDomain
		}
		if base.kind == kRat && a.kind == kRat {
			if k, ok := exactLog(base.r, a.r); ok {
				return value{kind: kRat, r: big.NewRat(k, 1)}, nil
			}
		}
		return floatVal(math.Log(x) / math.Log(b))
	}
	if a.kind == kRat && a.r.Sign() == 0 {
		switch name {
		case "sin", "tan", "arcsin", "arctan", "sinh", "tanh":
			return value{kind: kRat, r: new(big.Rat)}, nil
		case "cos", "sec", "cosh":
			return value{kind: kRat, r: big.NewRat(1, 1)}, nil
		}
	}
	if a.kind == kRat && a.r.Cmp(big.NewRat(1, 1)) == 0 && (name == "ln" || name == "log") {
		return value{kind: kRat, r: new(big.Rat)}, nil
	}
	if name == "log" && a.kind == kRat {
		if k, ok := exactLog(big.NewRat(10, 1), a.r); ok {
			return value{kind: kRat, r: big.NewRat(k, 1)}, nil
		}
	}
	f := funcs[name]
	if f == nil {
		return value{}, errDomain
	}
	if (name == "ln" || name == "log") && x <= 0 {
		return value{}, errDomain
	}
	return floatVal(f(x))
}

// exactLog returns k when x = b^k for a small integer k.
func exactLog(b, x *big.Rat) (int64, bool) {
	if b.Sign() <= 0 || b.Cmp(big.NewRat(1, 1)) == 0 {
		return 0, false
	}
	p := big.NewRat(1, 1)
	for k := int64(0); k <= 64; k++ {
		if p.Cmp(x) == 0 {
			return k, true
		}
		p = new(big.Rat).Mul(p, b)
		if p.Num().BitLen() > 256 {
			break
		}
	}
	return 0, false
}
