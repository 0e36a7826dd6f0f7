package toyllm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// The token-level policy. At each step the policy has a planned next token
// (the next token of its planned response, or <|im_end|> once the plan is
// used up). Its logits over the whole vocabulary are:
//
//	skill      for the planned token (DefaultSkill unless weights were
//	           loaded: see Server.UpdateWeights),
//	slipLogit  for the planned token's plausible slips (see slipsOf),
//	0          for every other token.
//
// A sampled token that is not the planned one replaces it: generation goes on
// with the next planned token, so a slip shows up as a typo.
const (
	// DefaultSkill is the planned token's logit when Options.Skill is 0.
	DefaultSkill = 14.0
	// MaxSkill bounds the skill: beyond it slips are so rare (below e^-24
	// per token) that a higher value changes nothing a test can see, and
	// exp stays far from overflow.
	MaxSkill  = 30.0
	slipLogit = 6.0
)

// stepShape describes the logits of a step for one planned token.
type stepShape struct {
	slips  [2]int32
	nSlips int
	// excl lists the planned token and its slips in increasing order; the
	// remaining tokens of the vocabulary form the logit-0 level.
	excl [3]int32
}

// shapes holds the step shape of every planned token.
var shapes = buildShapes()

// slipsOf returns the plausible slips of a token: neighbouring digits, the
// other letter case, look-alike punctuation, and <|endoftext|> for <|im_end|>.
// Slips inside \boxed{N} make the wrong-number and format errors a real model
// makes.
func slipsOf(id int32) []int32 {
	switch {
	case id >= '0' && id <= '9':
		return []int32{'0' + (id-'0'+9)%10, '0' + (id-'0'+1)%10}
	case id >= 'a' && id <= 'z':
		return []int32{id - 'a' + 'A'}
	case id >= 'A' && id <= 'Z':
		return []int32{id - 'A' + 'a'}
	}
	switch id {
	case ' ':
		return []int32{'\n'}
	case '\n':
		return []int32{' '}
	case '.':
		return []int32{','}
	case ',':
		return []int32{'.'}
	case '{':
		return []int32{'['}
	case '}':
		return []int32{']'}
	case '\\':
		return []int32{'/'}
	case ImEndID:
		return []int32{EndOfTextID}
	}
	return nil
}

// buildShapes computes the step shape of every token once.
func buildShapes() *[VocabSize]stepShape {
	var t [VocabSize]stepShape
	for id := range int32(VocabSize) {
		s := &t[id]
		s.nSlips = copy(s.slips[:], slipsOf(id))
		slices.Sort(s.slips[:s.nSlips])
		s.excl[0] = id
		copy(s.excl[1:], s.slips[:s.nSlips])
		slices.Sort(s.excl[:1+s.nSlips])
	}
	return &t
}

// tokenGroup says which tokens of a step a level holds.
type tokenGroup uint8

const (
	groupPlanned      tokenGroup = iota // the planned token
	groupSlips                          // its slips, in id order
	groupPlannedSlips                   // both, in id order, when skill equals slipLogit
	groupRest                           // every other token, in id order
)

// stepLevels are the logit levels of a step with a given number of slips,
// sorted by strictly decreasing logit as newDist requires, and the token
// group of each level.
type stepLevels struct {
	n      int
	levels [3]level
	groups [3]tokenGroup
}

// get returns the levels as a slice of the table's own array, allocating
// nothing.
func (sl *stepLevels) get() []level { return sl.levels[:sl.n] }

// policyTable is the policy's step levels for one skill: for the byte
// vocabulary by number of slips of the planned token, computed once per
// weight update so that a generation only looks it up; in the tokenizer
// mode by step kind (see ModelTokenizer.policyTable).
type policyTable [3]stepLevels

// newPolicyTable builds the step levels of the byte vocabulary for skill
// (> 0), by number of slips of the planned token.
func newPolicyTable(skill float64) policyTable {
	var t policyTable
	for nSlips := range len(t) {
		t[nSlips] = newStepLevels(skill, nSlips, 0, VocabSize-1-nSlips)
	}
	return t
}

// newStepLevels builds the levels of a step whose planned token has logit
// skill (> 0), its nSlips slips slipLogit and restCount other tokens
// restLogit, below both. The planned level is above the slips for skill >
// slipLogit, below them for a smaller skill, and merged with them at
// slipLogit, since newDist needs distinct logits.
func newStepLevels(skill float64, nSlips int, restLogit float64, restCount int) stepLevels {
	var sl stepLevels
	add := func(logit float64, count int, g tokenGroup) {
		sl.levels[sl.n], sl.groups[sl.n] = level{logit, count}, g
		sl.n++
	}
	switch {
	case nSlips == 0:
		add(skill, 1, groupPlanned)
	case skill > slipLogit:
		add(skill, 1, groupPlanned)
		add(slipLogit, nSlips, groupSlips)
	case skill == slipLogit:
		add(skill, 1+nSlips, groupPlannedSlips)
	default:
		add(slipLogit, nSlips, groupSlips)
		add(skill, 1, groupPlanned)
	}
	add(restLogit, restCount, groupRest)
	return sl
}

// stepToken returns the token of member m of a level of group g in the step
// whose planned token is planned. Members of a level are in id order.
func stepToken(planned int32, g tokenGroup, m int) int32 {
	s := &shapes[planned]
	switch g {
	case groupPlanned:
		return planned
	case groupSlips:
		return s.slips[m]
	case groupPlannedSlips:
		return s.excl[m]
	}
	id := int32(m)
	for _, e := range s.excl[:1+s.nSlips] {
		if id >= e {
			id++
		}
	}
	return id
}

// The game the policy plays: GEM's GuessTheNumber.
const (
	// defaultMin and defaultMax are the range of GuessTheNumber-v0, used when
	// the conversation does not state one.
	defaultMin = 1
	defaultMax = 20
	// maxHistory bounds the earlier guesses remembered for repeats.
	maxHistory = 64
	// maxParsed bounds parsed numbers, so that arithmetic never overflows.
	maxParsed = 1_000_000_000
)

var (
	rangeMarker  = []byte("number between ")
	andMarker    = []byte(" and ")
	guessMarker  = []byte("you guessed ")
	higherMarker = []byte(", and the target number is higher than ")
	lowerMarker  = []byte(", and the target number is lower than ")
)

// gameView is what the policy reads from the conversation.
type gameView struct {
	min, max int // the game's range
	lo, hi   int // the range left by the feedback so far
	history  [maxHistory]int
	nHistory int
}

// readGame reads the game's range from the instructions ("guess the number
// between {min} and {max}"; the first such phrase, since the policy's own
// replies may mention other ranges) and narrows it with every feedback line
// ("you guessed G, and the target number is higher/lower than G").
func readGame(text []byte) gameView {
	g := gameView{min: defaultMin, max: defaultMax}
	if i := bytes.Index(text, rangeMarker); i >= 0 {
		rest := text[i+len(rangeMarker):]
		lo, n := parseNum(rest)
		if n > 0 && bytes.HasPrefix(rest[n:], andMarker) {
			hi, m := parseNum(rest[n+len(andMarker):])
			if m > 0 && lo <= hi {
				g.min, g.max = lo, hi
			}
		}
	}
	g.lo, g.hi = g.min, g.max
	for rest := text; ; {
		i := bytes.Index(rest, guessMarker)
		if i < 0 {
			break
		}
		rest = rest[i+len(guessMarker):]
		guess, n := parseNum(rest)
		if n == 0 {
			continue
		}
		switch tail := rest[n:]; {
		case bytes.HasPrefix(tail, higherMarker):
			g.lo = max(g.lo, guess+1)
		case bytes.HasPrefix(tail, lowerMarker):
			g.hi = min(g.hi, guess-1)
		default:
			continue
		}
		if g.nHistory < maxHistory {
			g.history[g.nHistory] = guess
			g.nHistory++
		}
	}
	if g.lo > g.hi {
		// Contradictory feedback: start over on the whole range.
		g.lo, g.hi = g.min, g.max
	}
	return g
}

// parseNum parses the ASCII digits at the start of b, returning the value
// (capped at maxParsed) and the number of digits.
func parseNum(b []byte) (v, n int) {
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		v = min(v*10+int(b[n]-'0'), maxParsed)
		n++
	}
	return v, n
}

// planKind is the kind of response the policy decides to write.
type planKind int

const (
	planBisect     planKind = iota // the middle of the remaining range
	planJitter                     // another number of the remaining range
	planRepeat                     // an earlier guess again
	planOutOfRange                 // a number above the game's range
	planNoBox                      // a number without \boxed{}
	planSpacedBox                  // \boxed{ N}, which GEM does not parse
	numPlanKinds
)

// planWeights are the probabilities of the plan kinds at temperature 1; they
// are distinct, as newDist requires of its levels.
var planWeights = [numPlanKinds]float64{0.82, 0.08, 0.04, 0.03, 0.02, 0.01}

// styleWeights are the probabilities of the wordings of a bisect or jitter
// reply at temperature 1.
var styleWeights = [...]float64{0.55, 0.30, 0.15}

// plan is the response the policy will write.
type plan struct {
	kind  planKind
	style int
	guess int
}

// choosePlan decides the response. The choice is itself sampled with the
// request's temperature, min-p, top-k and top-p, so greedy decoding always
// bisects and a low temperature makes mistakes rarer.
func choosePlan(g *gameView, sp *samplingParams, rng *rand.PCG) plan {
	var kinds [numPlanKinds]planKind
	var levels [numPlanKinds]level
	n := 0
	for k := range numPlanKinds {
		if (k == planJitter && g.hi-g.lo < 2) || (k == planRepeat && g.nHistory == 0) {
			continue
		}
		kinds[n], levels[n] = k, level{math.Log(planWeights[k]), 1}
		n++
	}
	d := newDist(levels[:n], sp)
	lvl, _ := d.sample(sp, rng)
	p := plan{kind: kinds[lvl], guess: g.lo + (g.hi-g.lo)/2}
	switch p.kind {
	case planBisect, planJitter:
		var sl [len(styleWeights)]level
		for i, w := range styleWeights {
			sl[i] = level{math.Log(w), 1}
		}
		sd := newDist(sl[:], sp)
		p.style, _ = sd.sample(sp, rng)
		if p.kind == planJitter {
			mid := p.guess
			p.guess = g.lo + intN(rng, g.hi-g.lo+1)
			if p.guess == mid {
				p.guess = mid + 1
			}
		}
	case planRepeat:
		p.guess = g.history[intN(rng, g.nHistory)]
	case planOutOfRange:
		p.guess = g.max + 1 + intN(rng, 3)
	}
	return p
}

// appendPlanText appends the text of the planned response to dst.
func appendPlanText(dst []byte, g *gameView, p plan) []byte {
	num := func(b []byte, v int) []byte { return strconv.AppendInt(b, int64(v), 10) }
	box := func(b []byte, v int) []byte { return append(num(append(b, `\boxed{`...), v), '}') }
	switch p.kind {
	case planRepeat:
		dst = append(num(append(dst, "I try "...), p.guess), " again. "...)
		return box(dst, p.guess)
	case planOutOfRange:
		dst = append(num(append(dst, "Maybe "...), p.guess), ". "...)
		return box(dst, p.guess)
	case planNoBox:
		return append(num(append(dst, "I guess "...), p.guess), '.')
	case planSpacedBox:
		dst = append(num(append(dst, "I guess "...), p.guess), `. \boxed{ `...)
		return append(num(dst, p.guess), '}')
	}
	switch p.style {
	case 0:
		dst = num(append(dst, "It is between "...), g.lo)
		dst = num(append(dst, " and "...), g.hi)
		dst = append(num(append(dst, ", so I try "...), p.guess), ". "...)
	case 1:
		dst = append(num(append(dst, "I guess "...), p.guess), ". "...)
	}
	return box(dst, p.guess)
}
