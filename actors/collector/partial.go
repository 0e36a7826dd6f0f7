package collector

import (
	"fmt"
	"slices"
	"time"

	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
)

// partial is one run of an episode being assembled from its steps, in turn
// order.
type partial struct {
	req  *messages.EpisodeRequest
	run  string // the episode's run id, known from any of its steps
	next int32  // next turn to apply

	tokens      []int32
	logprobs    []float32
	ranges      messages.Ranges
	stepRewards []float64
	score       float64
	extra       map[string]float64
	finish      string
	truncated   bool
	versions    []int64
	genNanos    int64
	samples     []messages.Sample // single-turn styles: one per turn
	success     bool
	info        map[string]string
	resumed     int32
	promptCut   int32 // prompt tokens cut to fit the budget
	restarts    int32
	stale       bool
	traceID     string
	timings     []messages.TurnTimings // one per turn
	timed       bool                   // some step carried timings
	texts       []string               // the model's text of each turn
	// promptMessages and feedback make the conversation of a chat style:
	// the first prompt's messages and the env's answer to each turn.
	promptMessages []messages.ChatMessage
	feedback       []string

	outcome *outcome
}

// outcome is exactly one of a trajectory or a failure.
type outcome struct {
	traj    *messages.Trajectory
	encoded []byte // traj on the wire, once it is known to fit
	failure *messages.Failure
}

// kind names the outcome in a decision: "trajectory" or the failure's kind.
func (o *outcome) kind() string {
	if o.traj != nil {
		return "trajectory"
	}
	return o.failure.Kind
}

// assemble builds the outcome of a run whose terminal step is turn last. It
// reports false when a turn before it is missing from r. Steps must have
// been stored in turn order, as an env worker stores them (each after the
// previous one was acknowledged); a run whose steps were not is no honest
// run, and ends as an invariant failure.
func assemble(r run, last int32) (*partial, bool) {
	p := &partial{}
	var prev uint64
	for t := int32(0); t <= last; t++ {
		s, ok := r[t]
		if !ok {
			return nil, false
		}
		if s.seq <= prev {
			p.outcome = &outcome{failure: p.failureAt(messages.FailureInvariant,
				fmt.Sprintf("steps out of order: turn %d was stored before turn %d", t, t-1), t, s.ev.EpisodeID)}
			return p, true
		}
		prev = s.seq
		p.apply(s.ev)
		if p.outcome != nil {
			return p, true
		}
	}
	if p.outcome == nil { // the last step was no terminal one
		return nil, false
	}
	return p, true
}

// apply adds the next step in order; a terminal step decides the outcome.
func (p *partial) apply(ev *messages.StepEvent) {
	p.next = ev.Turn + 1
	if ev.RunID != "" {
		p.run = ev.RunID
	}
	if ev.Episode != nil && p.req == nil {
		p.req = ev.Episode
	}
	if ev.TraceID != "" {
		p.traceID = ev.TraceID
	}
	if ev.Error != "" {
		kind := ev.FailureKind
		if kind == "" {
			kind = messages.FailureEpisode
		}
		p.outcome = &outcome{failure: p.failureAt(kind, ev.Error, ev.Turn, ev.EpisodeID)}
		return
	}
	single := p.req != nil && messages.SingleTurnStyle(p.req.ObsStyle)
	if ev.Turn == 0 && !single {
		p.tokens = append(p.tokens[:0], ev.PromptTokens...)
		p.logprobs = append(p.logprobs[:0], make([]float32, len(ev.PromptTokens))...)
		p.promptCut = ev.PromptTruncated
		p.promptMessages = ev.PromptMessages
	}
	if !ev.IsEndMarker() {
		if single {
			p.samples = append(p.samples, newSample(ev))
			p.promptCut += ev.PromptTruncated
		} else {
			start := int32(len(p.tokens))
			p.tokens = append(p.tokens, ev.ActionTokens...)
			p.logprobs = append(p.logprobs, ev.ActionLogprobs...)
			p.ranges = append(p.ranges, messages.Range{Start: start, End: start + int32(len(ev.ActionTokens))})
			p.tokens = append(p.tokens, ev.FeedbackTokens...)
			p.logprobs = append(p.logprobs, make([]float32, len(ev.FeedbackTokens))...)
			p.feedback = append(p.feedback, ev.FeedbackText)
		}
		p.texts = append(p.texts, ev.ActionText)
		p.success, p.info, p.resumed = ev.Success, ev.Info, ev.Resumed
		p.stepRewards = append(p.stepRewards, ev.Reward)
		p.score, p.extra = ev.Score, ev.ExtraLogs
		p.genNanos += ev.GenerateNanos
		p.versions = append(p.versions, ev.PolicyVersion)
		p.restarts, p.stale = ev.Restarts, ev.Stale
		tm := ev.Timings
		tm.Endpoint = ev.Endpoint
		p.timings = append(p.timings, tm)
		p.timed = p.timed || !ev.Timings.IsZero()
	}
	p.finish = ev.FinishReason
	if ev.Done {
		p.truncated = ev.Truncated
		p.outcome = p.build(ev.EpisodeID)
	}
}

// build turns the assembled steps into a trajectory, or into an invariant
// failure when the result would violate the trajectory contract.
func (p *partial) build(id string) *outcome {
	if p.req == nil {
		return &outcome{failure: p.failureAt(messages.FailureInvariant, "episode ended without its first step", p.next-1, id)}
	}
	if len(p.stepRewards) == 0 {
		return &outcome{failure: p.failure(messages.FailureInvariant, "episode ended without any model turn")}
	}
	var reward float64
	rewards, declared := envs.Rewards(p.req.Env)
	for i, r := range p.stepRewards {
		if declared && !rewards.Contains(r) {
			return &outcome{failure: p.failure(messages.FailureInvariant,
				fmt.Sprintf("turn %d reward %v is outside %s's range [%v, %v]", i, r, p.req.Env, rewards.Min, rewards.Max))}
		}
		reward += r
	}
	// Each sample is credited with the return from its turn on.
	var ret float64
	for i := len(p.samples) - 1; i >= 0; i-- {
		ret += p.stepRewards[i]
		p.samples[i].Return = ret
	}
	if !slices.ContainsFunc(p.texts, func(s string) bool { return s != "" }) {
		p.texts = nil // no text known: none kept
	}
	req := p.req
	style := req.ObsStyle
	if style == "" {
		style = messages.ObsChat
	}
	t := &messages.Trajectory{
		V: messages.Version, RunID: p.runID(), EpisodeID: req.EpisodeID, GroupID: req.GroupID,
		SampleIndex: req.SampleIndex, GroupSize: req.GroupSize, Env: req.Env, EnvSeed: req.EnvSeed,
		Prompt: req.Prompt, Label: req.Label,
		ObservationTokens: p.tokens, ActionRanges: p.ranges, RolloutLogProbs: p.logprobs,
		Reward: reward, Scores: p.score, ExtraLogs: p.extra, Truncated: p.truncated,
		Turns: int32(len(p.stepRewards)), StepRewards: p.stepRewards, FinishReason: p.finish,
		PolicyVersions: p.versions, SubmitVersion: req.SubmitVersion, Staleness: messages.Staleness(p.versions),
		Stale: p.stale, Restarts: p.restarts, SubmitTime: req.SubmitTime, DoneTime: time.Now().UnixNano(),
		GenerateNanos: p.genNanos,
		ObsStyle:      style, Samples: p.samples, Success: p.success, Info: p.info, TaskIndex: req.TaskIndex, Resumed: p.resumed,
		PromptTruncated: p.promptCut, RolloutIndex: req.RolloutIndex, Responses: p.texts, TraceID: p.trace(),
	}
	if len(p.promptMessages) > 0 && p.texts != nil {
		t.PromptMessages, t.Feedback = p.promptMessages, p.feedback
	}
	if p.timed {
		t.Timings = p.timings
	}
	if t.ExtraLogs == nil {
		t.ExtraLogs = map[string]float64{}
	}
	if err := t.Validate(); err != nil {
		return &outcome{failure: p.failure(messages.FailureInvariant, err.Error())}
	}
	return &outcome{traj: t}
}

// newSample is one single-turn style step as a sample: its prompt, then its
// action, the only range.
func newSample(ev *messages.StepEvent) messages.Sample {
	n := len(ev.PromptTokens) + len(ev.ActionTokens)
	toks := make(messages.Tokens, 0, n)
	toks = append(append(toks, ev.PromptTokens...), ev.ActionTokens...)
	lp := make(messages.Logprobs, len(ev.PromptTokens), n)
	lp = append(lp, ev.ActionLogprobs...)
	start := int32(len(ev.PromptTokens))
	return messages.Sample{
		ObservationTokens: toks, RolloutLogProbs: lp,
		ActionRanges: messages.Ranges{{Start: start, End: start + int32(len(ev.ActionTokens))}},
		Reward:       ev.Reward, PromptTruncated: ev.PromptTruncated,
	}
}

// trace is the episode's trace id: its steps', or its request's.
func (p *partial) trace() string {
	if p.traceID == "" && p.req != nil {
		return p.req.TraceID
	}
	return p.traceID
}

// runID is the episode's run: its request's, or what its steps said.
func (p *partial) runID() string {
	if p.req != nil && p.req.RunID != "" {
		return p.req.RunID
	}
	return p.run
}

func (p *partial) failure(kind, reason string) *messages.Failure {
	return p.failureAt(kind, reason, p.next-1, p.req.EpisodeID)
}

func (p *partial) failureAt(kind, reason string, turn int32, id string) *messages.Failure {
	f := &messages.Failure{
		V: messages.Version, RunID: p.runID(), EpisodeID: id, Kind: kind, Reason: reason,
		Turn: max(turn, 0), Time: time.Now().UnixNano(), TraceID: p.trace(),
	}
	if p.req != nil {
		f.GroupID, f.Env = p.req.GroupID, p.req.Env
	}
	return f
}
