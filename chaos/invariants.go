package chaos

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"
)

// singleTurnStyle reports whether a trajectory of this observation style
// holds one sample per turn instead of one token sequence.
func singleTurnStyle(style string) bool { return style == "concat" || style == "qwen3_game" }

// checkInvariants checks the trajectory invariants the record alone can
// show, as the harness reads them from the documentation: a version, ids
// and a place in the group; one logprob per token, token ids ≥ 0, action
// ranges sorted, non-empty and inside the tokens, logprobs exactly 0
// outside the actions and finite and ≤ 0 inside; one range and one step
// reward per turn; the reward the sum of the step rewards (left to right);
// and for a single-turn style, one sample per turn, each with one action
// range, its step reward and the return from its turn.
func checkInvariants(t *Trajectory) error {
	switch {
	case t.EpisodeID == "":
		return fmt.Errorf("no episode id")
	case t.GroupID == "":
		return fmt.Errorf("no group id")
	case t.Env == "":
		return fmt.Errorf("no env")
	case t.GroupSize < 1 || t.SampleIndex < 0 || t.SampleIndex >= t.GroupSize:
		return fmt.Errorf("sample %d of a group of %d", t.SampleIndex, t.GroupSize)
	case t.Turns < 0:
		return fmt.Errorf("%d turns", t.Turns)
	case len(t.StepRewards) != int(t.Turns):
		return fmt.Errorf("%d step rewards for %d turns", len(t.StepRewards), t.Turns)
	}
	switch t.ObsStyle {
	case "", "chat":
		switch {
		case len(t.Samples) > 0:
			return fmt.Errorf("%d samples in a chat trajectory", len(t.Samples))
		case len(t.ActionRanges) != int(t.Turns):
			return fmt.Errorf("%d action ranges for %d turns", len(t.ActionRanges), t.Turns)
		}
		if err := checkSequence(t.ObservationTokens, t.ActionRanges, t.RolloutLogProbs); err != nil {
			return err
		}
	case "concat", "qwen3_game":
		switch {
		case len(t.ObservationTokens)+len(t.ActionRanges)+len(t.RolloutLogProbs) > 0:
			return fmt.Errorf("top-level tokens in single-turn style %q", t.ObsStyle)
		case len(t.Samples) != int(t.Turns):
			return fmt.Errorf("%d samples for %d turns", len(t.Samples), t.Turns)
		}
		var ret float64
		for i := len(t.Samples) - 1; i >= 0; i-- {
			s := &t.Samples[i]
			ret += t.StepRewards[i]
			switch {
			case len(s.ActionRanges) != 1:
				return fmt.Errorf("sample %d: %d action ranges, want 1", i, len(s.ActionRanges))
			case s.Reward != t.StepRewards[i]:
				return fmt.Errorf("sample %d: reward %v, step reward %v", i, s.Reward, t.StepRewards[i])
			case s.Return != ret:
				return fmt.Errorf("sample %d: return %v, the step rewards from it sum to %v", i, s.Return, ret)
			}
			if err := checkSequence(s.ObservationTokens, s.ActionRanges, s.RolloutLogProbs); err != nil {
				return fmt.Errorf("sample %d: %w", i, err)
			}
		}
	default:
		return fmt.Errorf("unknown observation style %q", t.ObsStyle)
	}
	var sum float64
	for _, r := range t.StepRewards {
		sum += r
	}
	switch {
	case !finite(t.Reward) || !finite(t.Scores):
		return fmt.Errorf("reward %v, scores %v: not finite", t.Reward, t.Scores)
	case t.Reward != sum:
		return fmt.Errorf("reward %v is not the sum of the step rewards %v", t.Reward, sum)
	}
	for k, v := range t.ExtraLogs {
		if !finite(v) {
			return fmt.Errorf("extra_logs.%s %v: not finite", k, v)
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// checkSequence checks one token sequence with its action ranges and
// logprobs.
func checkSequence(tokens []int32, ranges []Span, lp []float32) error {
	if len(lp) != len(tokens) {
		return fmt.Errorf("%d logprobs for %d tokens", len(lp), len(tokens))
	}
	for i, tok := range tokens {
		if tok < 0 {
			return fmt.Errorf("token id %d at %d", tok, i)
		}
	}
	prev := int32(0)
	for i, r := range ranges {
		switch {
		case r.Start >= r.End:
			return fmt.Errorf("action range %d [%d, %d) is empty", i, r.Start, r.End)
		case r.Start < prev:
			return fmt.Errorf("action range %d [%d, %d) starts before %d", i, r.Start, r.End, prev)
		case int(r.End) > len(tokens):
			return fmt.Errorf("action range %d [%d, %d) ends past the %d tokens", i, r.Start, r.End, len(tokens))
		}
		for j := prev; j < r.Start; j++ {
			if lp[j] != 0 {
				return fmt.Errorf("logprob %v at %d, outside the actions", lp[j], j)
			}
		}
		for j := r.Start; j < r.End; j++ {
			if x := float64(lp[j]); !finite(x) || x > 0 {
				return fmt.Errorf("logprob %v at %d, inside action %d", lp[j], j, i)
			}
		}
		prev = r.End
	}
	for j := int(prev); j < len(lp); j++ {
		if lp[j] != 0 {
			return fmt.Errorf("logprob %v at %d, outside the actions", lp[j], j)
		}
	}
	return nil
}

// A turn's fingerprint identifies what one step contributed to a
// trajectory: at turn 0 (or every turn of a single-turn style) the prompt
// tokens, then the action tokens, their logprobs, the feedback tokens (chat
// style) and the step reward. The collector builds a chat trajectory as the
// first prompt followed by each turn's action and feedback, a single-turn
// sample as the turn's prompt and action, so each turn of a trajectory must
// have the fingerprint of a step stored in the steps stream.
type fingerprint uint64

func fingerprintOf(prompt, action []int32, lp []float32, feedback []int32, reward float64) fingerprint {
	h := fnv.New64a()
	var b [8]byte
	word := func(x uint32) {
		b[0], b[1], b[2], b[3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		h.Write(b[:4])
	}
	part := func(xs []int32) {
		word(uint32(len(xs)))
		for _, x := range xs {
			word(uint32(x))
		}
	}
	part(prompt)
	part(action)
	word(uint32(len(lp)))
	for _, x := range lp {
		word(math.Float32bits(x))
	}
	part(feedback)
	r := math.Float64bits(reward)
	word(uint32(r))
	word(uint32(r >> 32))
	return fingerprint(h.Sum64())
}

// stepFingerprint is the fingerprint of what s adds to a trajectory of the
// given style.
func stepFingerprint(s *Step, singleTurn bool) fingerprint {
	var prompt, feedback []int32
	if s.Turn == 0 || singleTurn {
		prompt = s.PromptTokens
	}
	if !singleTurn {
		feedback = s.FeedbackTokens
	}
	return fingerprintOf(prompt, s.ActionTokens, s.ActionLogprobs, feedback, s.Reward)
}

// turnFingerprints cuts a valid trajectory into its turns' fingerprints.
func turnFingerprints(t *Trajectory) []fingerprint {
	fps := make([]fingerprint, t.Turns)
	if singleTurnStyle(t.ObsStyle) {
		for i, s := range t.Samples {
			r := s.ActionRanges[0]
			fps[i] = fingerprintOf(s.ObservationTokens[:r.Start], s.ObservationTokens[r.Start:r.End],
				s.RolloutLogProbs[r.Start:r.End], nil, t.StepRewards[i])
		}
		return fps
	}
	obs := t.ObservationTokens
	for i, r := range t.ActionRanges {
		var prompt []int32
		if i == 0 {
			prompt = obs[:r.Start]
		}
		end := int32(len(obs))
		if i+1 < len(t.ActionRanges) {
			end = t.ActionRanges[i+1].Start
		}
		fps[i] = fingerprintOf(prompt, obs[r.Start:r.End], t.RolloutLogProbs[r.Start:r.End], obs[r.End:end], t.StepRewards[i])
	}
	return fps
}

// runKey names one run of an episode: a delivery (attempt) of one
// submission (the request's sequence in the episodes stream).
type runKey struct {
	request uint64
	attempt int64
	run     string
}

func (k runKey) String() string {
	if k.request == 0 {
		return fmt.Sprintf("attempt %d", k.attempt)
	}
	if k.run == "" {
		return fmt.Sprintf("request %d attempt %d", k.request, k.attempt)
	}
	return fmt.Sprintf("request %d attempt %d run %s", k.request, k.attempt, k.run)
}

func (k runKey) compare(o runKey) int {
	switch {
	case k.request != o.request:
		return cmpUint(k.request, o.request)
	case k.attempt != o.attempt:
		return int(k.attempt - o.attempt)
	}
	return strings.Compare(k.run, o.run)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// storedStep is where a fingerprint was seen in the steps stream.
type storedStep struct {
	seq    uint64
	run    runKey
	turn   int64
	forged string // the forgery's variant; empty for an honest step
}

// stepIndex holds the fingerprints of every step of the steps stream by
// episode, in both styles' cut (a step does not say its style).
type stepIndex map[string]map[fingerprint][]storedStep

func (x stepIndex) add(s *Step, seq uint64, forged string) {
	byFP := x[s.EpisodeID]
	if byFP == nil {
		byFP = map[fingerprint][]storedStep{}
		x[s.EpisodeID] = byFP
	}
	at := storedStep{seq: seq, run: runKey{s.Request, s.Attempt, s.Run}, turn: s.Turn, forged: forged}
	chat, single := stepFingerprint(s, false), stepFingerprint(s, true)
	byFP[chat] = append(byFP[chat], at)
	if single != chat {
		byFP[single] = append(byFP[single], at)
	}
}

// provenance checks that a valid trajectory was assembled from one run of
// its episode: some attempt has an honest stored step for every turn, at
// that turn, with exactly the turn's tokens, logprobs and reward. It says
// what it found otherwise: a turn taken from a forged message, turns of
// different runs spliced together, or a turn no step produced; forged
// reports whether the trajectory holds content of a forged message.
func (x stepIndex) provenance(t *Trajectory) (forged bool, err error) {
	fps := turnFingerprints(t)
	byFP := x[t.EpisodeID]
	candidates := map[runKey]int{} // run -> turns it covers
	var problems []string
	for i, fp := range fps {
		covered := map[runKey]bool{}
		for _, s := range byFP[fp] {
			switch {
			case s.forged != "":
				forged = true
				problems = append(problems, fmt.Sprintf("turn %d is the forged %s message (steps seq %d)", i, s.forged, s.seq))
			case s.turn == int64(i) && !covered[s.run]:
				covered[s.run] = true
				candidates[s.run]++
			}
		}
		if len(byFP[fp]) == 0 {
			problems = append(problems, fmt.Sprintf("turn %d matches no stored step", i))
		}
	}
	for _, n := range candidates {
		if n == len(fps) && !forged {
			return false, nil
		}
	}
	if len(problems) == 0 {
		var runs []string
		for _, k := range slices.SortedFunc(maps.Keys(candidates), runKey.compare) {
			runs = append(runs, fmt.Sprintf("%s has %d", k, candidates[k]))
		}
		problems = append(problems, fmt.Sprintf("no single run has all %d turns (%s): spliced from several runs", len(fps), strings.Join(runs, ", ")))
	}
	if len(problems) > 4 {
		problems = append(problems[:4], fmt.Sprintf("… %d more", len(problems)-4))
	}
	return forged, errors.New(strings.Join(problems, "; "))
}
