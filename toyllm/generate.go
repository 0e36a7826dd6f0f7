package toyllm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
)

// Streams of the PCG generator, so that the plan and the token draws use
// independent random sequences derived from the same seed.
const (
	planStream  = 0x706c616e // "plan"
	tokenStream = 0x746f6b73 // "toks"
)

// genParams are the validated generation settings of one request.
type genParams struct {
	sampling    samplingParams
	maxTokens   int
	seed        uint64
	seeded      bool
	stop        []string
	stopIDs     []int32
	ignoreEOS   bool
	skipSpecial bool
	includeStop bool
	// topN is the number of most likely tokens to report per position.
	topN int
	// model is the real tokenizer of the tokenizer mode; nil for the byte
	// vocabulary.
	model *ModelTokenizer
	// reasoning makes a reply to a bare generation prompt open a reasoning
	// block itself (see Options.Reasoning).
	reasoning bool
	// constrained, when not nil, is the only reply the request's
	// structured_outputs admits (see constrainedReply): each of its tokens
	// is the one token the grammar leaves, sampled with probability 1.
	constrained []byte
}

// isStopID reports whether tok ends generation as a stop token. Like a Qwen
// model's generation config, the toy model's lists <|im_end|> besides the
// end-of-sequence token (a real model's, its own: see
// ModelTokenizer.stopIDs); ignore_eos turns both off.
func (gp *genParams) isStopID(tok int32) bool {
	if !gp.ignoreEOS && ((gp.model == nil && tok == ImEndID) || (gp.model != nil && gp.model.isStopID(tok))) {
		return true
	}
	return slices.Contains(gp.stopIDs, tok)
}

// eosID is the vocabulary's end-of-sequence token, or -1 when it has none.
func (gp *genParams) eosID() int32 {
	if gp.model != nil {
		return gp.model.eos
	}
	return EndOfTextID
}

// stepTokens maps the members of a step's levels to token ids, in the byte
// vocabulary or a real one.
type stepTokens struct {
	planned int32
	model   *ModelTokenizer // nil: the byte vocabulary
}

// token returns the token of member m of a level of group g.
func (s stepTokens) token(g tokenGroup, m int) int32 {
	if s.model == nil {
		return stepToken(s.planned, g, m)
	}
	return s.model.stepToken(s.planned, g, m)
}

// alt is one entry of a position's most likely tokens.
type alt struct {
	id   int32
	logp float64
}

// stopKind says what stop_reason reports.
type stopKind int8

const (
	stopNone   stopKind = iota // null: length, or the end-of-sequence token
	stopToken                  // a stop token id
	stopString                 // a stop string
)

// genState holds one request's buffers. States are pooled, so that a
// request allocates nothing per token once the pool is warm.
type genState struct {
	body bytes.Buffer
	// rest is the body without its prompt list, for encoding/json.
	rest     []byte
	prompt   []int32
	text     []byte // the decoded prompt, read by the policy
	planText []byte
	plan     []int32

	ids  []int32
	logp []float64 // float32 values, as a GPU engine computes them
	tops []alt     // topN entries per position
	// offsets are the byte offsets of each token's text in the output.
	offsets []int32
	out     []byte

	finish    string
	stopKind  stopKind
	stopID    int32
	stopMatch string

	resp []byte

	kv kvSeq // the request's hold on the prefix cache
}

// maxPooledBytes bounds the buffers kept in the pool, so that one huge
// request does not pin its memory for ever.
const maxPooledBytes = 1 << 20

func (st *genState) oversized() bool {
	return st.body.Cap() > maxPooledBytes || cap(st.rest) > maxPooledBytes || cap(st.prompt) > maxPooledBytes/4 ||
		cap(st.text) > maxPooledBytes || cap(st.resp) > maxPooledBytes || st.kv.oversized()
}

// generate samples a response to st.prompt.
//
// The policy first decides a plan from the conversation (see choosePlan);
// then each token is sampled from the step's distribution (see newDist and
// the logits described at DefaultSkill), with the step levels of pol, the
// policy the generation started with. The logprob reported for a token is
// the true log-probability of that token under the distribution it was
// sampled from, after temperature, min-p, top-k and top-p, computed in
// float64 and rounded to float32 as a GPU engine returns it. With temperature
// 0 the token is the most likely one and its logprob is taken at temperature
// 1. The plan is a latent choice made before the tokens, so the logprobs are
// conditional on it.
//
// Stopping follows vLLM's engine, in its order: max_tokens first (finish
// "length"), then the end-of-sequence token (stop_reason null), then a stop
// token id (stop_reason the id; <|im_end|> is one), and last the stop
// strings, checked on the output text (stop_reason the string). A stop token
// is part of the output ids, but its text is left out of the output text
// unless includeStop is set.
//
// With a real tokenizer (gp.model) the policy reads the ChatML view of the
// decoded prompt, and the steps are those of ModelTokenizer.policyTable.
func generate(st *genState, gp *genParams, pol *policy) {
	mt := gp.model
	if mt == nil {
		st.text = appendDecode(st.text[:0], st.prompt, false)
	} else {
		st.text = mt.appendPromptView(st.text[:0], st.prompt)
	}
	game := readGame(st.text)

	seed := gp.seed
	if !gp.seeded {
		seed = rand.Uint64()
	}
	var planRNG, tokRNG rand.PCG
	planRNG.Seed(seed, planStream)
	tokRNG.Seed(seed, tokenStream)

	var ok bool
	if gp.constrained != nil {
		st.planText = append(st.planText[:0], gp.constrained...)
	} else if st.planText, ok = appendToolPlan(st.planText[:0], st.text); ok {
		// Tools are offered: call one, or answer with its result.
	} else if st.planText, ok = appendJudgePlan(st.planText[:0], st.text); ok {
		// A judge prompt: the verdict.
	} else if st.planText, ok = appendMathPlan(st.planText[:0], st.text, &planRNG); !ok {
		if st.planText, ok = appendBoardGamePlan(st.planText[:0], st.text, &planRNG); !ok {
			p := choosePlan(&game, &gp.sampling, &planRNG)
			st.planText = appendPlanText(st.planText[:0], &game, p)
		}
	}
	switch {
	case gp.constrained != nil:
	case bytes.HasSuffix(st.text, thinkingStart):
		st.planText = appendReasoning(nil, st.text, st.planText)
	case gp.reasoning && bytes.HasSuffix(st.text, replyStart):
		// The template left the reasoning block to the model: open it.
		st.planText = appendReasoning([]byte(thinkOpen), st.text, st.planText)
	}
	end, table := ImEndID, &pol.table
	st.plan = st.plan[:0]
	if mt == nil {
		for _, b := range st.planText {
			st.plan = append(st.plan, int32(b))
		}
	} else {
		st.plan = mt.appendPlan(st.plan, st.planText)
		end = mt.endOfTurn
		t := mt.policyTable(pol.skill)
		table = &t
	}
	st.plan = append(st.plan, end)

	// The normalisers depend on the request's sampling settings, so they
	// are computed once per request from the policy's levels.
	var dists [len(pol.table)]dist
	for i := range table {
		dists[i] = newDist(table[i].get(), &gp.sampling)
	}
	eos := gp.eosID()

	st.ids, st.logp, st.tops, st.offsets, st.out = st.ids[:0], st.logp[:0], st.tops[:0], st.offsets[:0], st.out[:0]
	st.finish, st.stopKind, st.stopID, st.stopMatch = "", stopNone, 0, ""
	for step := 0; ; step++ {
		planned := end
		if step < len(st.plan) {
			planned = st.plan[step]
		}
		var kind int
		if mt == nil {
			kind = shapes[planned].nSlips
		} else {
			kind = mt.stepKind(planned)
		}
		d, sl := &dists[kind], &table[kind]
		lvl, m := d.sample(&gp.sampling, &tokRNG)
		steps := stepTokens{planned, mt}
		tok := steps.token(sl.groups[lvl], m)
		if gp.constrained != nil {
			// The grammar masks every other token.
			st.ids, st.logp = append(st.ids, planned), append(st.logp, 0)
			if gp.topN > 0 {
				st.tops = appendForced(st.tops, planned, gp.topN)
			}
			tok = planned
		} else {
			st.ids = append(st.ids, tok)
			st.logp = append(st.logp, float64(float32(d.logp[lvl])))
			if gp.topN > 0 {
				st.tops = appendTop(st.tops, d, sl, steps, gp.topN)
			}
		}
		st.offsets = append(st.offsets, int32(len(st.out)))

		finished, stopTerminated := false, false
		switch {
		case len(st.ids) >= gp.maxTokens:
			finished, st.finish = true, "length"
		case tok == eos && !gp.ignoreEOS:
			finished, stopTerminated, st.finish = true, true, "stop"
		case gp.isStopID(tok):
			finished, stopTerminated, st.finish = true, true, "stop"
			st.stopKind, st.stopID = stopToken, tok
		}
		if !stopTerminated || gp.includeStop {
			before := len(st.out)
			if mt == nil {
				st.out = appendTokenText(st.out, tok, gp.skipSpecial)
			} else {
				st.out = mt.appendTokenText(st.out, tok, gp.skipSpecial)
			}
			if !stopTerminated && len(st.out) > before {
				if s, cut, ok := findStop(st.out, len(st.out)-before, gp.stop, gp.includeStop); ok {
					st.out = st.out[:cut]
					finished, st.finish = true, "stop"
					st.stopKind, st.stopMatch = stopString, s
				}
			}
		}
		if finished {
			return
		}
	}
}

// appendTop appends the n most likely tokens of a step, most likely first
// and ties in id order; tokens removed by the filters come last with logp
// -Inf.
func appendTop(dst []alt, d *dist, sl *stepLevels, steps stepTokens, n int) []alt {
	for lvl := 0; lvl < d.n && n > 0; lvl++ {
		for m := 0; m < d.count[lvl] && n > 0; m++ {
			dst = append(dst, alt{steps.token(sl.groups[lvl], m), float64(float32(d.logp[lvl]))})
			n--
		}
	}
	return dst
}

// appendForced appends the top entries of a step the grammar forced: the
// planned token with logprob 0, then tokens the mask removed, with -Inf.
func appendForced(dst []alt, planned int32, n int) []alt {
	dst = append(dst, alt{planned, 0})
	for id := int32(0); n > 1; id++ {
		if id != planned {
			dst = append(dst, alt{id, math.Inf(-1)})
			n--
		}
	}
	return dst
}

// findStop looks for a stop string in out, whose last newChars bytes are
// new, as vLLM's stop checker does: the stop strings are tried in order and
// the first one found wins. It returns the string and the length to cut out
// to: before the string, or after it with includeStop.
func findStop(out []byte, newChars int, stop []string, includeStop bool) (string, int, bool) {
	for _, s := range stop {
		start := max(len(out)-newChars-len(s)+1, 0)
		i := bytes.Index(out[start:], []byte(s))
		if i < 0 {
			continue
		}
		cut := start + i
		if includeStop {
			cut += len(s)
		}
		return s, cut, true
	}
	return "", 0, false
}
