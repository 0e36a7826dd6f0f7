package toyllm

import (
	"math"
	"math/rand/v2"
)

// greedyEpsilon is the temperature below which sampling is greedy, as in vLLM.
const greedyEpsilon = 1e-5

// samplingParams are a request's validated sampling settings.
type samplingParams struct {
	temperature float64 // below greedyEpsilon: greedy
	topP        float64 // in (0, 1]
	topK        int     // 0: off
	minP        float64 // in [0, 1]; 0: off
}

func (sp *samplingParams) greedy() bool { return sp.temperature < greedyEpsilon }

// maxLevels bounds the number of distinct logit values of a distribution:
// a token step has three, a plan choice at most six.
const maxLevels = 8

// level is a set of tokens (or plan options) that share one logit.
type level struct {
	logit float64
	count int
}

// dist is a sampling distribution whose tokens are grouped into levels of
// equal logit, sorted by strictly decreasing logit. Working on levels instead
// of on the whole vocabulary makes a step cost a few operations while giving
// exactly the probabilities of the full softmax.
type dist struct {
	n     int
	count [maxLevels]int
	// logp is the log-probability of one token of the level under the
	// distribution sampled from; -Inf for levels removed by min-p, top-k or
	// top-p.
	logp [maxLevels]float64
	// cum is the cumulative probability of levels 0..i.
	cum [maxLevels]float64
}

// newDist applies the sampling settings to levels, the way vLLM's sampler
// does: logits are divided by the temperature, then min-p, top-k and top-p
// remove tokens, and the rest is renormalised. Two rules concern ties: top-k
// keeps every token whose logit equals the k-th largest (as vLLM does), and
// top-p keeps or removes tied tokens together (vLLM leaves their order to its
// sort). Greedy decoding has no distribution worth reporting, so with
// temperature 0 the probabilities are those at temperature 1.
func newDist(levels []level, sp *samplingParams) dist {
	var d dist
	d.n = len(levels)
	t := sp.temperature
	if sp.greedy() {
		t = 1
	}
	var scaled [maxLevels]float64
	for i, l := range levels {
		d.count[i] = l.count
		scaled[i] = (l.logit - levels[0].logit) / t
	}
	kept := d.n
	// min-p: drop tokens less likely than min_p times the most likely one.
	for i := 1; i < kept && sp.minP > 0; i++ {
		if math.Exp(scaled[i]) < sp.minP {
			kept = i
		}
	}
	if sp.topK > 0 {
		seen := 0
		for i := range kept {
			seen += d.count[i]
			if seen >= sp.topK {
				kept = i + 1
				break
			}
		}
	}
	var w [maxLevels]float64
	z := 0.0
	for i := range kept {
		w[i] = float64(d.count[i]) * math.Exp(scaled[i])
		z += w[i]
	}
	if sp.topP < 1 {
		// Remove the least likely levels while the removed mass stays at most
		// 1-top_p; the most likely level always stays.
		removed := 0.0
		for kept > 1 && removed+w[kept-1]/z <= 1-sp.topP {
			removed += w[kept-1] / z
			kept--
		}
		z = 0
		for i := range kept {
			z += w[i]
		}
	}
	logZ := math.Log(z)
	c := 0.0
	for i := range d.n {
		if i >= kept {
			d.logp[i] = math.Inf(-1)
			d.cum[i] = 1
			continue
		}
		d.logp[i] = scaled[i] - logZ
		c += w[i] / z
		d.cum[i] = c
	}
	return d
}

// pick maps a uniform u in [0, 1) to a level and a member of that level by
// inverse-CDF sampling.
func (d *dist) pick(u float64) (lvl, member int) {
	lo := 0.0
	for i := range d.n {
		last := i == d.n-1 || math.IsInf(d.logp[i+1], -1)
		if u < d.cum[i] || last {
			m := int((u - lo) / (d.cum[i] - lo) * float64(d.count[i]))
			return i, min(max(m, 0), d.count[i]-1)
		}
		lo = d.cum[i]
	}
	return 0, 0
}

// sample draws a level and member: the first member of the top level when
// greedy, otherwise from the distribution using one draw of rng.
func (d *dist) sample(sp *samplingParams, rng *rand.PCG) (lvl, member int) {
	if sp.greedy() {
		return 0, 0
	}
	return d.pick(uniform(rng))
}

// uniform returns a float64 in [0, 1) from 53 random bits.
func uniform(rng *rand.PCG) float64 {
	return float64(rng.Uint64()>>11) * 0x1p-53
}

// intN returns an int in [0, n) for n > 0; its bias (at most n/2^32) does not
// matter for this policy.
func intN(rng *rand.PCG, n int) int {
	return int((rng.Uint64() >> 32) * uint64(n) >> 32)
}
