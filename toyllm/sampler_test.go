package toyllm

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// denseLogits writes out a step's logits over the whole vocabulary, as the
// package documentation defines them, for a policy of the given skill.
func denseLogits(planned int32, skill float64) []float64 {
	l := make([]float64, VocabSize)
	for _, s := range slipsOf(planned) {
		l[s] = slipLogit
	}
	l[planned] = skill
	return l
}

// naiveLogprobs computes log-probabilities over a dense logit vector with
// the documented rules, token by token, independently of dist.
func naiveLogprobs(logits []float64, sp samplingParams) []float64 {
	t := sp.temperature
	if t < greedyEpsilon {
		t = 1
	}
	n := len(logits)
	x := make([]float64, n)
	for i, l := range logits {
		x[i] = l / t
	}
	top := slices.Max(x)
	keep := make([]bool, n)
	for i := range x {
		keep[i] = sp.minP == 0 || math.Exp(x[i]-top) >= sp.minP
	}
	if sp.topK > 0 {
		var kept []float64
		for i := range x {
			if keep[i] {
				kept = append(kept, x[i])
			}
		}
		slices.Sort(kept)
		slices.Reverse(kept)
		if sp.topK <= len(kept) {
			kth := kept[sp.topK-1]
			for i := range x {
				keep[i] = keep[i] && x[i] >= kth
			}
		}
	}
	prob := func() []float64 {
		p := make([]float64, n)
		z := 0.0
		for i := range x {
			if keep[i] {
				p[i] = math.Exp(x[i] - top)
				z += p[i]
			}
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	if sp.topP < 1 {
		p := prob()
		// Distinct kept logits from the lowest; tied tokens go together.
		var values []float64
		for i := range x {
			if keep[i] && !slices.Contains(values, x[i]) {
				values = append(values, x[i])
			}
		}
		slices.Sort(values)
		removed := 0.0
		for _, v := range values[:len(values)-1] {
			mass := 0.0
			for i := range x {
				if keep[i] && x[i] == v {
					mass += p[i]
				}
			}
			if removed+mass > 1-sp.topP {
				break
			}
			removed += mass
			for i := range x {
				if x[i] == v {
					keep[i] = false
				}
			}
		}
	}
	p := prob()
	out := make([]float64, n)
	for i := range p {
		out[i] = math.Log(p[i]) // -Inf for removed tokens
	}
	return out
}

var samplingCases = []samplingParams{
	{temperature: 1, topP: 1},
	{temperature: 0, topP: 1},
	{temperature: 0.6, topP: 1},
	{temperature: 2.5, topP: 1},
	{temperature: 1, topP: 1, topK: 1},
	{temperature: 1, topP: 1, topK: 2},
	{temperature: 1, topP: 1, topK: 3},
	{temperature: 2, topP: 1, topK: 50},
	{temperature: 1, topP: 0.9},
	{temperature: 3, topP: 0.5},
	{temperature: 3, topP: 0.99},
	{temperature: 1, topP: 1, minP: 0.001},
	{temperature: 4, topP: 1, minP: 0.2},
	{temperature: 4, topP: 0.95, topK: 40, minP: 0.05},
}

// testSkills are skills above, at and below slipLogit, where the planned
// token's level moves relative to its slips'.
var testSkills = []float64{DefaultSkill, MaxSkill, 8, slipLogit, 3, 0.25}

// TestDistMatchesDense checks the level-based distribution against the
// dense computation, for every token of the vocabulary.
func TestDistMatchesDense(t *testing.T) {
	for _, skill := range testSkills {
		table := newPolicyTable(skill)
		for _, sp := range samplingCases {
			for _, planned := range []int32{'5', 'a', '#', '\\', ImEndID} {
				want := naiveLogprobs(denseLogits(planned, skill), sp)
				sl := &table[shapes[planned].nSlips]
				d := newDist(sl.get(), &sp)
				seen := make([]bool, VocabSize)
				for lvl := range d.n {
					for m := range d.count[lvl] {
						tok := stepToken(planned, sl.groups[lvl], m)
						if seen[tok] {
							t.Fatalf("skill %g planned %d: token %d appears twice", skill, planned, tok)
						}
						seen[tok] = true
						got := d.logp[lvl]
						if math.IsInf(want[tok], -1) != math.IsInf(got, -1) ||
							(!math.IsInf(got, -1) && math.Abs(got-want[tok]) > 1e-9) {
							t.Errorf("skill %g %+v planned %d token %d: logp %v, dense %v", skill, sp, planned, tok, got, want[tok])
						}
					}
				}
				if slices.Contains(seen, false) {
					t.Errorf("skill %g planned %d: the levels do not cover the vocabulary", skill, planned)
				}
			}
		}
	}
}

// TestDistSampling checks that draws follow the distribution.
func TestDistSampling(t *testing.T) {
	sp := samplingParams{temperature: 3, topP: 1}
	table := newPolicyTable(DefaultSkill)
	d := newDist(table[2].get(), &sp)
	var rng rand.PCG
	rng.Seed(1, 2)
	const draws = 200_000
	var counts [maxLevels]int
	members := make(map[int]int)
	for range draws {
		lvl, m := d.sample(&sp, &rng)
		counts[lvl]++
		if lvl == 2 {
			members[m]++
		}
	}
	for lvl := range d.n {
		p := float64(d.count[lvl]) * math.Exp(d.logp[lvl])
		sigma := math.Sqrt(draws * p * (1 - p))
		if diff := math.Abs(float64(counts[lvl]) - draws*p); diff > 5*sigma {
			t.Errorf("level %d drawn %d times, expected %.0f ± %.0f", lvl, counts[lvl], draws*p, sigma)
		}
	}
	if len(members) != d.count[2] {
		t.Errorf("%d of the %d tokens of the logit-0 level were drawn", len(members), d.count[2])
	}
}

func TestDistGreedy(t *testing.T) {
	sp := samplingParams{temperature: 0, topP: 1}
	table := newPolicyTable(DefaultSkill)
	d := newDist(table[1].get(), &sp)
	var rng rand.PCG
	for range 100 {
		if lvl, m := d.sample(&sp, &rng); lvl != 0 || m != 0 {
			t.Fatalf("greedy sample = (%d, %d), want the top token", lvl, m)
		}
	}
}
