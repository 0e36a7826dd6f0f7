package toyllm

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
)

// The stand-in also answers simple math problems, so that a math run shows
// a real success rate: it evaluates arithmetic exactly and solves a few
// one-step word problems, and most of the time boxes the right answer. As
// for the games, the reply is planned once, before the tokens are sampled.

// mathMarkers are the instructions that make a conversation a math problem:
// NeMo Gym's math system prompt, GEM's math prompt and the instruction line
// of NeMo Gym's math data (which opens the user turn, the question after two
// newlines).
var mathMarkers = [...][]byte{
	[]byte("Your task is to solve a math problem."),
	[]byte(`Please reason step by step, and put your final answer within \boxed{}.`),
	nemoMathLine,
}

var nemoMathLine = []byte(`Solve the following math problem. Make sure to put the answer (and only answer) inside \boxed{}.`)

// The reply kinds are drawn with these probabilities, so that the rewards
// of a math run spread: the right answer boxed, a wrong one boxed, and the
// right one without a box, which a boxed-answer verifier rejects.
const (
	mathCorrectRate = 0.80
	mathWrongRate   = 0.12
)

// userTurn opens a user turn, turnEnd closes it, and retryWord marks the
// environment's notice after a wrong answer.
var (
	userTurn  = []byte(chat.ImStart + "user\n")
	turnEnd   = []byte(chat.ImEnd)
	retryWord = []byte("incorrect")
)

// gameFrame opens GEM's qwen3_game template, which closes with the same
// request as GEM's math prompt: such a conversation is a game, not math.
var gameFrame = []byte("You are playing language games.")

// appendMathPlan appends a reply to a math problem, or reports false when
// the conversation is not one.
func appendMathPlan(dst, text []byte, rng *rand.PCG) ([]byte, bool) {
	isMath := false
	for _, m := range mathMarkers {
		isMath = isMath || bytes.Contains(text, m)
	}
	if !isMath || bytes.Contains(text, gameFrame) {
		return dst, false
	}
	sol, ok := solveMath(mathQuestion(text))
	if !ok {
		sol = mathSolution{how: "I cannot solve this exactly, so I estimate.", val: rat{int64(intN(rng, 100)), 1}}
	}
	val := sol.val
	u := float64(rng.Uint64()>>11) / (1 << 53)
	if u >= mathCorrectRate && u < mathCorrectRate+mathWrongRate {
		// An off-by-one slip, stated as if it were right.
		if rng.Uint64()&1 == 0 {
			val, _ = val.add(rat{1, 1})
		} else {
			val, _ = val.sub(rat{1, 1})
		}
	}
	dst = append(dst, sol.how...)
	if sol.expr != "" {
		dst = append(dst, sol.expr...)
		dst = val.appendTo(append(dst, " = "...), sol.decimal)
		dst = append(dst, '.')
	}
	dst = append(dst, "\nThe answer is "...)
	if u >= mathCorrectRate+mathWrongRate {
		return append(val.appendTo(dst, sol.decimal), '.'), true
	}
	dst = val.appendTo(append(dst, `\boxed{`...), sol.decimal)
	return append(dst, "}."...), true
}

// mathQuestion returns the question of a math conversation: the last user
// turn, or the first one when the last is a retry notice after a wrong
// answer. Without ChatML turns it is the whole text.
func mathQuestion(text []byte) []byte {
	q := turnAt(text, bytes.LastIndex(text, userTurn))
	if q == nil {
		return text
	}
	if bytes.Contains(q, retryWord) {
		if first := turnAt(text, bytes.Index(text, userTurn)); first != nil {
			q = first
		}
	}
	// NeMo Gym's instruction line comes before the question.
	if _, after, ok := bytes.Cut(q, nemoMathLine); ok {
		q = bytes.TrimLeft(after, "\n")
	}
	return q
}

// turnAt returns the content of the user turn that starts at i, or nil when
// i < 0.
func turnAt(text []byte, i int) []byte {
	if i < 0 {
		return nil
	}
	t := text[i+len(userTurn):]
	if j := bytes.Index(t, turnEnd); j >= 0 {
		t = t[:j]
	}
	return t
}

// mathSolution is a solved problem: a reasoning line (how, then expr = val)
// and the answer.
type mathSolution struct {
	how  string
	expr string
	val  rat
	// decimal says to write val as a decimal: the problem had decimals.
	decimal bool
}

// solveMath solves q as an arithmetic expression, or else as one of the
// word-problem shapes.
func solveMath(q []byte) (mathSolution, bool) {
	var buf [64]mtok
	toks := lexMath(buf[:0], q)
	if sol, ok := solveExpr(q, toks); ok {
		return sol, true
	}
	return solveWords(q, toks)
}

// rat is an exact rational number n/d, with d > 0, reduced, and both parts
// below ratLimit, so that the products of add and mul fit in an int64.
type rat struct{ n, d int64 }

const ratLimit = 1 << 31

// makeRat returns n/d reduced, and false when d is 0 or a part is too big.
func makeRat(n, d int64) (rat, bool) {
	if d == 0 {
		return rat{}, false
	}
	if d < 0 {
		n, d = -n, -d
	}
	g := gcd(n, d)
	n, d = n/g, d/g
	return rat{n, d}, n > -ratLimit && n < ratLimit && d < ratLimit
}

func gcd(a, b int64) int64 {
	if a < 0 {
		a = -a
	}
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (a rat) add(b rat) (rat, bool) { return makeRat(a.n*b.d+b.n*a.d, a.d*b.d) }
func (a rat) sub(b rat) (rat, bool) { return makeRat(a.n*b.d-b.n*a.d, a.d*b.d) }
func (a rat) mul(b rat) (rat, bool) { return makeRat(a.n*b.n, a.d*b.d) }
func (a rat) div(b rat) (rat, bool) { return makeRat(a.n*b.d, a.d*b.n) }

// appendTo writes a as an integer, as a terminating decimal when decimal is
// set and a has one, or else as a reduced fraction n/d.
func (a rat) appendTo(dst []byte, decimal bool) []byte {
	if a.d == 1 || !decimal || !terminates(a.d) {
		dst = strconv.AppendInt(dst, a.n, 10)
		if a.d == 1 {
			return dst
		}
		return strconv.AppendInt(append(dst, '/'), a.d, 10)
	}
	n := a.n
	if n < 0 {
		dst, n = append(dst, '-'), -n
	}
	dst = append(strconv.AppendInt(dst, n/a.d, 10), '.')
	for r := n % a.d; r != 0; r = r * 10 % a.d {
		dst = append(dst, byte('0'+r*10/a.d))
	}
	return dst
}

// terminates reports whether 1/d has a finite decimal expansion.
func terminates(d int64) bool {
	for d%2 == 0 {
		d /= 2
	}
	for d%5 == 0 {
		d /= 5
	}
	return d == 1
}

// mtokKind is the kind of a lexed token of a question.
type mtokKind uint8

const (
	mtNum   mtokKind = iota
	mtOp             // an operator, in op: + - * /
	mtOpen           // (
	mtClose          // )
	mtBreak          // anything else: a word, punctuation
)

// mtok is a token of a question; start and end are its bytes.
type mtok struct {
	kind       mtokKind
	op         byte
	dec        bool // a number with a decimal point
	val        rat
	start, end int
}

// opWords are the operator words and symbols besides + - * /.
var opWords = [...]struct {
	word string
	op   byte
}{
	{"plus", '+'}, {"minus", '-'}, {"times", '*'}, {"x", '*'},
	{"multiplied by", '*'}, {"divided by", '/'},
	{"×", '*'}, {"÷", '/'}, {"−", '-'},
}

// lexMath appends the tokens of q to dst. Runs of other words and
// punctuation become one break token, which no expression spans.
func lexMath(dst []mtok, q []byte) []mtok {
	brk := func(dst []mtok, i, j int) []mtok {
		if n := len(dst); n > 0 && dst[n-1].kind == mtBreak {
			dst[n-1].end = j
			return dst
		}
		return append(dst, mtok{kind: mtBreak, start: i, end: j})
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
			continue
		case c >= '0' && c <= '9':
			t, n := lexNumber(q[i:])
			t.start, t.end = i, i+n
			if t.kind == mtNum {
				dst = append(dst, t)
			} else {
				dst = brk(dst, i, i+n)
			}
			i += n
			continue
		case c == '+' || c == '-' || c == '*' || c == '/':
			dst = append(dst, mtok{kind: mtOp, op: c, start: i, end: i + 1})
			i++
			continue
		case c == '(' || c == ')':
			k := mtOpen
			if c == ')' {
				k = mtClose
			}
			dst = append(dst, mtok{kind: k, start: i, end: i + 1})
			i++
			continue
		}
		j := i + 1
		if isLetter(c) {
			for j < len(q) && isLetter(q[j]) {
				j++
			}
		}
		if op, n := opWordAt(q[i:]); n > 0 {
			dst = append(dst, mtok{kind: mtOp, op: op, start: i, end: i + n})
			i += n
			continue
		}
		dst = brk(dst, i, j)
		i = j
	}
	return dst
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// opWordAt reports the operator word that s starts with, as a whole word,
// and its length.
func opWordAt(s []byte) (byte, int) {
	for _, w := range opWords {
		n := len(w.word)
		if len(s) >= n && bytes.EqualFold(s[:n], []byte(w.word)) && (len(s) == n || !isLetter(s[n])) {
			return w.op, n
		}
	}
	return 0, 0
}

// lexNumber lexes the number at the start of s: digits, and a fraction when
// a digit follows the point. It is a break token when too long to be exact.
func lexNumber(s []byte) (mtok, int) {
	var n, d int64 = 0, 1
	digits, i, dec := 0, 0, false
	for i < len(s) {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits < 18 {
				n = n*10 + int64(c-'0')
				if dec {
					d *= 10
				}
			}
			digits++
		case c == '.' && !dec && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			dec = true
		default:
			goto done
		}
		i++
	}
done:
	v, ok := makeRat(n, d)
	if !ok || digits > 18 {
		return mtok{kind: mtBreak}, i
	}
	return mtok{kind: mtNum, val: v, dec: dec}, i
}

// solveExpr evaluates the longest run of tokens between breaks that is a
// whole arithmetic expression with at least one operator.
func solveExpr(q []byte, toks []mtok) (mathSolution, bool) {
	var best mathSolution
	bestLen := 0
	for i := 0; i < len(toks); {
		j := i
		for j < len(toks) && toks[j].kind != mtBreak {
			j++
		}
		if seg := toks[i:j]; len(seg) > bestLen {
			p := exprParser{toks: seg}
			if v, ok := p.expr(); ok && p.pos == len(seg) && p.ops > 0 {
				best = mathSolution{how: "We compute ", expr: string(q[seg[0].start:seg[len(seg)-1].end]), val: v, decimal: p.dec}
				bestLen = len(seg)
			}
		}
		i = j + 1
	}
	return best, bestLen > 0
}

// exprParser parses an expression by recursive descent, with the usual
// precedence, evaluating it exactly.
type exprParser struct {
	toks []mtok
	pos  int
	ops  int  // binary operators seen
	dec  bool // a number had a decimal point
}

func (p *exprParser) peekOp(ops string) byte {
	if p.pos < len(p.toks) && p.toks[p.pos].kind == mtOp && strings.IndexByte(ops, p.toks[p.pos].op) >= 0 {
		return p.toks[p.pos].op
	}
	return 0
}

// expr := term {(+|-) term}
func (p *exprParser) expr() (rat, bool) {
	v, ok := p.term()
	for ok {
		op := p.peekOp("+-")
		if op == 0 {
			break
		}
		p.pos++
		p.ops++
		var w rat
		if w, ok = p.term(); !ok {
			break
		}
		if op == '+' {
			v, ok = v.add(w)
		} else {
			v, ok = v.sub(w)
		}
	}
	return v, ok
}

// term := unary {(*|/) unary}
func (p *exprParser) term() (rat, bool) {
	v, ok := p.unary()
	for ok {
		op := p.peekOp("*/")
		if op == 0 {
			break
		}
		p.pos++
		p.ops++
		var w rat
		if w, ok = p.unary(); !ok {
			break
		}
		if op == '*' {
			v, ok = v.mul(w)
		} else {
			v, ok = v.div(w)
		}
	}
	return v, ok
}

// unary := (+|-) unary | number | ( expr )
func (p *exprParser) unary() (rat, bool) {
	if p.pos >= len(p.toks) {
		return rat{}, false
	}
	switch t := p.toks[p.pos]; t.kind {
	case mtOp:
		if t.op != '+' && t.op != '-' {
			return rat{}, false
		}
		p.pos++
		v, ok := p.unary()
		if t.op == '-' {
			v.n = -v.n
		}
		return v, ok
	case mtNum:
		p.pos++
		p.dec = p.dec || t.dec
		return t.val, true
	case mtOpen:
		p.pos++
		v, ok := p.expr()
		if !ok || p.pos >= len(p.toks) || p.toks[p.pos].kind != mtClose {
			return rat{}, false
		}
		p.pos++
		return v, true
	}
	return rat{}, false
}

// The word-problem shapes, each recognised by one of its words; they are
// tried in this order, since a sharing problem asks what "each" gets and a
// product problem may ask for a "total".
var wordShapes = [...]struct {
	op    byte
	words []string
}{
	{'/', []string{"equally", "shared", "split"}},
	{'*', []string{"each", "per", "every"}},
	{'-', []string{"away", "eats", "ate", "loses", "lost", "sells", "sold", "spends", "spent",
		"uses", "used", "left", "remain", "remains", "fewer", "less"}},
	{'+', []string{"buys", "bought", "gets", "got", "finds", "found", "receives", "received",
		"adds", "added", "more", "total", "altogether"}},
}

// solveWords solves a one-step word problem with exactly two numbers,
// taken in the order they appear.
func solveWords(q []byte, toks []mtok) (mathSolution, bool) {
	var nums [2]mtok
	n := 0
	for _, t := range toks {
		if t.kind == mtNum {
			if n == len(nums) {
				return mathSolution{}, false
			}
			nums[n] = t
			n++
		}
	}
	if n != len(nums) {
		return mathSolution{}, false
	}
	for _, s := range wordShapes {
		if !hasWord(q, s.words) {
			continue
		}
		a, b := nums[0].val, nums[1].val
		var v rat
		var ok bool
		switch s.op {
		case '/':
			v, ok = a.div(b)
		case '*':
			v, ok = a.mul(b)
		case '-':
			v, ok = a.sub(b)
		default:
			v, ok = a.add(b)
		}
		if !ok {
			return mathSolution{}, false
		}
		expr := string(q[nums[0].start:nums[0].end]) + " " + string(s.op) + " " + string(q[nums[1].start:nums[1].end])
		return mathSolution{how: "From the problem, ", expr: expr, val: v, decimal: nums[0].dec || nums[1].dec}, true
	}
	return mathSolution{}, false
}

// hasWord reports whether q has one of words as a whole word, in any case.
func hasWord(q []byte, words []string) bool {
	for i := 0; i < len(q); {
		if !isLetter(q[i]) {
			i++
			continue
		}
		j := i
		for j < len(q) && isLetter(q[j]) {
			j++
		}
		for _, w := range words {
			if bytes.EqualFold(q[i:j], []byte(w)) {
				return true
			}
		}
		i = j
	}
	return false
}

// The stand-in also judges, as NeMo Gym's math judge is asked: it says the
// two answers are equal when their texts are, spaces aside.
var (
	judgeA    = []byte("<|Start of Assistant A's Answer|>\n")
	judgeAEnd = []byte("\n<|End of Assistant A's Answer|>")
	judgeB    = []byte("<|Start of Assistant B's Answer|>\n")
	judgeBEnd = []byte("\n<|End of Assistant B's Answer|>")
)

// appendJudgePlan appends a verdict on a judge prompt, or reports false when
// the conversation is not one.
func appendJudgePlan(dst, text []byte) ([]byte, bool) {
	between := func(open, end []byte) ([]byte, bool) {
		i := bytes.LastIndex(text, open)
		if i < 0 {
			return nil, false
		}
		rest := text[i+len(open):]
		j := bytes.Index(rest, end)
		if j < 0 {
			return nil, false
		}
		return rest[:j], true
	}
	a, okA := between(judgeA, judgeAEnd)
	b, okB := between(judgeB, judgeBEnd)
	if !okA || !okB {
		return dst, false
	}
	squeeze := func(s []byte) string { return strings.Join(strings.Fields(string(s)), "") }
	if squeeze(a) == squeeze(b) {
		return append(dst, "The answers are the same. My final verdict is equivalent [[A=B]]"...), true
	}
	return append(dst, "The answers differ. My final verdict is different [[A!=B]]"...), true
}
