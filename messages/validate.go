package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

var (
	// ErrInvalid is matched (errors.Is) by every validation error.
	ErrInvalid = errors.New("invalid message")
	// ErrVersion is matched, besides ErrInvalid, by validation errors about V: a missing version
	// or one newer than Version. A consumer may leave a newer message for an upgraded worker
	// instead of recording it as failed.
	ErrVersion = errors.New("unsupported message version")
)

// ValidationError names the field of a message that breaks a rule.
type ValidationError struct {
	// Field is the path from the message type, e.g. "EpisodeRequest.max_length",
	// "StepEvent.episode.sampling.top_p" or "Group.trajectories[2].reward".
	Field string
	// Reason says which rule the field breaks and with what value.
	Reason string

	version bool
}

// Error returns "messages: <Field>: <Reason>".
func (e *ValidationError) Error() string { return "messages: " + e.Field + ": " + e.Reason }

// Is matches ErrInvalid, and ErrVersion for errors about V.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid || e.version && target == ErrVersion
}

// in prefixes e's field path with parent. The path is built only on failure, so validating a
// good message allocates nothing.
func (e *ValidationError) in(parent string) *ValidationError {
	if e != nil {
		e.Field = parent + "." + e.Field
	}
	return e
}

// asError converts a nil *ValidationError to a nil error.
func asError(e *ValidationError) error {
	if e == nil {
		return nil
	}
	return e
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// first returns the first failed check.
func first(checks ...*ValidationError) *ValidationError {
	for _, e := range checks {
		if e != nil {
			return e
		}
	}
	return nil
}

func checkVersion(v uint8) *ValidationError {
	switch {
	case v == 0:
		return &ValidationError{Field: "v", Reason: "missing version (0)", version: true}
	case v > Version:
		return &ValidationError{Field: "v", Reason: fmt.Sprintf("version %d is newer than supported %d", v, Version), version: true}
	}
	return nil
}

// checkID checks a required id: non-empty and at most MaxIDLength bytes.
func checkID(field, id string) *ValidationError {
	if id == "" {
		return invalid(field, "must not be empty")
	}
	return checkOptionalID(field, id)
}

// checkOptionalID checks an id that may be empty.
func checkOptionalID(field, id string) *ValidationError {
	if len(id) > MaxIDLength {
		return invalid(field, "%d bytes, longer than %d", len(id), MaxIDLength)
	}
	return nil
}

func checkNonEmpty(field, s string) *ValidationError {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	return nil
}

func checkFinite(field string, x float64) *ValidationError {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return invalid(field, "must be finite, got %v", x)
	}
	return nil
}

// checkFiniteLogprobs checks that lp[from:to] are finite and not positive (a log-probability
// is at most 0); errors name the index in lp.
func checkFiniteLogprobs(field string, lp Logprobs, from, to int) *ValidationError {
	const exponent = 0x7f800000 // all ones: infinity or NaN; one test per logprob on the hot path
	for i := from; i < to; i++ {
		switch bits := math.Float32bits(lp[i]); {
		case bits&exponent == exponent:
			return invalid(fmt.Sprintf("%s[%d]", field, i), "must be finite, got %v", lp[i])
		case lp[i] > 0:
			return invalid(fmt.Sprintf("%s[%d]", field, i), "must be <= 0 (a log-probability), got %v", lp[i])
		}
	}
	return nil
}

// checkZeroLogprobs checks that lp[from:to], positions outside every action, are exactly 0.
func checkZeroLogprobs(field string, lp Logprobs, from, to int) *ValidationError {
	for i := from; i < to; i++ {
		if lp[i] != 0 {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "must be 0 outside action ranges, got %v", lp[i])
		}
	}
	return nil
}

func checkFiniteLogs(field string, logs map[string]float64) *ValidationError {
	for k, x := range logs {
		if e := checkFinite(field, x); e != nil {
			e.Field = fmt.Sprintf("%s[%q]", field, k)
			return e
		}
	}
	return nil
}

// checkSample checks a sample's place in its group: group_size ≥ 1 and 0 ≤ sample_index < group_size.
func checkSample(index, size int32) *ValidationError {
	if size < 1 {
		return invalid("group_size", "must be >= 1, got %d", size)
	}
	if index < 0 || index >= size {
		return invalid("sample_index", "must be in [0, %d), got %d", size, index)
	}
	return nil
}

// checkReplyError checks that a reply reporting an error also says what kind.
func checkReplyError(errText, code string) *ValidationError {
	if errText != "" && code == "" {
		return invalid("code", "must not be empty when error is set (error: %q)", errText)
	}
	return nil
}

// Validate checks the sampling rules: temperature finite and ≥ 0; top_p 0 (unset) or in (0, 1];
// top_k ≥ -1; max_tokens ≥ 0.
func (p *SamplingParams) Validate() error { return asError(p.validate().in("SamplingParams")) }

func (p *SamplingParams) validate() *ValidationError {
	switch {
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 0):
		return invalid("temperature", "must be finite and >= 0, got %v", p.Temperature)
	case p.TopP != 0 && !(p.TopP > 0 && p.TopP <= 1):
		return invalid("top_p", "must be 0 (unset) or in (0, 1], got %v", p.TopP)
	case p.TopK < -1:
		return invalid("top_k", "must be >= -1, got %d", p.TopK)
	case p.MaxTokens < 0:
		return invalid("max_tokens", "must be >= 0, got %d", p.MaxTokens)
	}
	return checkStructuredOutputs(p.StructuredOutputs)
}

// checkStructuredOutputs checks a structured_outputs object: empty, or a JSON object with
// exactly one of StructuredOutputKinds set to a value other than null.
func checkStructuredOutputs(b json.RawMessage) *ValidationError {
	if len(b) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return invalid("structured_outputs", "must be empty or a JSON object, got %.64q", b)
	}
	kind := ""
	for k, v := range m {
		switch {
		case !slices.Contains(StructuredOutputKinds, k):
			return invalid("structured_outputs", "%.32q is not one of %v", k, StructuredOutputKinds)
		case string(bytes.TrimSpace(v)) == "null":
		case kind != "":
			return invalid("structured_outputs", "sets both %q and %q: one constraint at a time", kind, k)
		default:
			kind = k
		}
	}
	if kind == "" {
		return invalid("structured_outputs", "sets no constraint")
	}
	return nil
}

// Validate checks an episode request: V == Version; episode_id, group_id and env non-empty ids;
// group_size ≥ 1 and 0 ≤ sample_index < group_size; env_options empty or a JSON object;
// sampling valid; max_length > 0; max_turns ≥ 0; obs_style and prompt_overflow empty or known;
// trace_id empty or a W3C trace id (32 lowercase hex digits, not all zeros).
func (r *EpisodeRequest) Validate() error { return asError(r.validate().in("EpisodeRequest")) }

func (r *EpisodeRequest) validate() *ValidationError {
	return first(
		checkVersion(r.V),
		checkOptionalID("run_id", r.RunID),
		checkID("episode_id", r.EpisodeID),
		checkID("group_id", r.GroupID),
		checkID("env", r.Env),
		checkSample(r.SampleIndex, r.GroupSize),
		checkEnvOptions(r.EnvOptions),
		r.Sampling.validate().in("sampling"),
		checkPositive("max_length", r.MaxLength),
		checkNonNegative("max_turns", r.MaxTurns),
		checkObsStyle(r.ObsStyle),
		checkOneOf("chat_template_name", r.ChatTemplateName, ChatTemplateNames),
		checkJSONObject("chat_template_kwargs", r.ChatTemplateKwargs),
		checkMessages(r.Messages),
		checkNonNegative("task_index", r.TaskIndex),
		checkNonNegative("rollout_index", r.RolloutIndex),
		checkOneOf("prompt_overflow", r.PromptOverflow, PromptOverflows),
		checkOneOf("stale_policy", r.StalePolicy, StalePolicies),
		checkTraceID(r.TraceID),
	)
}

// checkTraceID checks an optional trace id: empty, or 32 lowercase hex digits, not all zeros.
func checkTraceID(id string) *ValidationError {
	if id != "" && !ValidTraceID(id) {
		return invalid("trace_id", "%q is not 32 lowercase hex digits (W3C trace id)", id)
	}
	return nil
}

// checkTimings checks a turn's timings: no negative duration. The error names the duration
// alone; the caller says where the timings are.
func checkTimings(t *TurnTimings) *ValidationError {
	for _, d := range [...]struct {
		name string
		ns   int64
	}{
		{"queue_ns", t.Queue}, {"tokenize_ns", t.Tokenize}, {"generate_ns", t.Generate}, {"model_ns", t.Model},
		{"step_ns", t.Step}, {"publish_ns", t.Publish}, {"wall_ns", t.Wall},
	} {
		if d.ns < 0 {
			return invalid(d.name, "must be >= 0, got %d", d.ns)
		}
	}
	return nil
}

// checkOneOf checks that an optional setting is empty or one of the values allowed.
func checkOneOf(field, v string, allowed []string) *ValidationError {
	if v != "" && !slices.Contains(allowed, v) {
		return invalid(field, "%.64q is not one of %v", v, allowed)
	}
	return nil
}

func checkObsStyle(style string) *ValidationError { return checkOneOf("obs_style", style, ObsStyles) }

func checkMessages(msgs []ChatMessage) *ValidationError {
	for i, m := range msgs {
		if m.Role == "" {
			return invalid(fmt.Sprintf("messages[%d].role", i), "must not be empty")
		}
	}
	return nil
}

func checkEnvOptions(opts []byte) *ValidationError { return checkJSONObject("env_options", opts) }

// IsJSONObject reports whether b is a JSON object.
func IsJSONObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

// checkJSONObject checks that b is empty or a JSON object.
func checkJSONObject(field string, b []byte) *ValidationError {
	if len(b) == 0 {
		return nil
	}
	if !json.Valid(b) || bytes.TrimLeft(b, " \t\r\n")[0] != '{' {
		return invalid(field, "must be empty or a JSON object, got %.64q", b)
	}
	return nil
}

func checkPositive(field string, n int32) *ValidationError {
	if n <= 0 {
		return invalid(field, "must be > 0, got %d", n)
	}
	return nil
}

func checkNonNegative(field string, n int32) *ValidationError {
	return checkNonNegative64(field, int64(n))
}

func checkNonNegative64(field string, n int64) *ValidationError {
	if n < 0 {
		return invalid(field, "must be >= 0, got %d", n)
	}
	return nil
}

// Validate checks a generate request: V == Version; episode_id a non-empty id; turn ≥ 0; prompt
// non-empty; sampling valid; max_tokens > 0.
func (r *GenerateRequest) Validate() error { return asError(r.validate().in("GenerateRequest")) }

func (r *GenerateRequest) validate() *ValidationError {
	var prompt *ValidationError
	if len(r.Prompt) == 0 {
		prompt = invalid("prompt", "must not be empty")
	}
	return first(
		checkVersion(r.V),
		checkID("episode_id", r.EpisodeID),
		checkNonNegative("turn", r.Turn),
		prompt,
		r.Sampling.validate().in("sampling"),
		checkPositive("max_tokens", r.MaxTokens),
		checkTopLogprobs(r.TopLogprobs),
	)
}

func checkTopLogprobs(n int32) *ValidationError {
	if n < 0 || n > MaxTopLogprobs {
		return invalid("top_logprobs", "must be in [0, %d], got %d", MaxTopLogprobs, n)
	}
	return nil
}

// Validate checks a generate reply: V == Version. A successful reply (Error empty) has non-empty
// tokens, one finite logprob per token and a finish_reason; a failed one has a code.
func (r *GenerateReply) Validate() error { return asError(r.validate().in("GenerateReply")) }

func (r *GenerateReply) validate() *ValidationError {
	if e := checkVersion(r.V); e != nil {
		return e
	}
	if r.Error != "" {
		return checkReplyError(r.Error, r.Code)
	}
	switch {
	case len(r.Tokens) == 0:
		return invalid("tokens", "must not be empty")
	case len(r.Logprobs) != len(r.Tokens):
		return invalid("logprobs", "%d logprobs for %d tokens", len(r.Logprobs), len(r.Tokens))
	case len(r.TopLogprobs) != 0 && len(r.TopLogprobs) != len(r.Tokens):
		return invalid("top_logprobs", "%d entries for %d tokens", len(r.TopLogprobs), len(r.Tokens))
	}
	for i, t := range r.TopLogprobs {
		if len(t.IDs) != len(t.Logprobs) {
			return invalid(fmt.Sprintf("top_logprobs[%d]", i), "%d ids for %d logprobs", len(t.IDs), len(t.Logprobs))
		}
	}
	return first(
		checkFiniteLogprobs("logprobs", r.Logprobs, 0, len(r.Logprobs)),
		checkNonEmpty("finish_reason", r.FinishReason),
	)
}

// Validate checks a tokenize request: V == Version; episode_id at most MaxIDLength bytes; exactly
// one of text and messages non-empty; every message has a role.
func (r *TokenizeRequest) Validate() error { return asError(r.validate().in("TokenizeRequest")) }

func (r *TokenizeRequest) validate() *ValidationError {
	if e := first(checkVersion(r.V), checkOptionalID("episode_id", r.EpisodeID)); e != nil {
		return e
	}
	switch {
	case r.Text == "" && len(r.Messages) == 0 && r.Turn == TurnNone:
		return invalid("text", "one of text and messages is required")
	case r.Text != "" && len(r.Messages) != 0:
		return invalid("messages", "must be empty when text is set")
	case r.Turn > TurnFinal:
		return invalid("turn", "%d is not a turn kind", r.Turn)
	case r.Turn != TurnNone && len(r.Messages) != 0:
		return invalid("messages", "must be empty for a turn")
	}
	if e := checkJSONObject("chat_template_kwargs", r.ChatTemplateKwargs); e != nil {
		return e
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return invalid(fmt.Sprintf("messages[%d].role", i), "must not be empty")
		}
	}
	return nil
}

// Validate checks a tokenize reply: V == Version; a failed reply has a code.
func (r *TokenizeReply) Validate() error { return asError(r.validate().in("TokenizeReply")) }

func (r *TokenizeReply) validate() *ValidationError {
	return first(checkVersion(r.V), checkReplyError(r.Error, r.Code))
}

// Validate checks a step event: V == Version; episode_id a non-empty id; turn ≥ 0; failure_kind
// empty, or an episode failure kind on an Error step; trace_id empty or a W3C trace id; no
// negative timing. Unless the event reports an Error: turn 0 carries a valid Episode with the same episode id and non-empty
// prompt_tokens; one logprob per action token; logprobs, reward, score and extra_logs finite; no
// action tokens only in an end marker (Done); prompt_truncated_tokens ≥ 0.
func (e *StepEvent) Validate() error { return asError(e.validate().in("StepEvent")) }

func (e *StepEvent) validate() *ValidationError {
	if err := first(
		checkVersion(e.V),
		checkID("episode_id", e.EpisodeID),
		checkNonNegative("turn", e.Turn),
		checkFailureKind(e.FailureKind, e.Error),
		checkTraceID(e.TraceID),
		checkTimings(&e.Timings).in("timings"),
	); err != nil || e.Error != "" {
		return err
	}
	if e.Turn == 0 {
		switch {
		case e.Episode == nil:
			return invalid("episode", "required at turn 0")
		case len(e.PromptTokens) == 0:
			return invalid("prompt_tokens", "must not be empty at turn 0")
		}
	}
	if e.Episode != nil {
		if err := e.Episode.validate(); err != nil {
			return err.in("episode")
		}
		if e.Episode.EpisodeID != e.EpisodeID {
			return invalid("episode.episode_id", "%q differs from the event's %q", e.Episode.EpisodeID, e.EpisodeID)
		}
	}
	switch {
	case len(e.ActionLogprobs) != len(e.ActionTokens):
		return invalid("action_logprobs", "%d logprobs for %d action tokens", len(e.ActionLogprobs), len(e.ActionTokens))
	case len(e.ActionTokens) == 0 && !e.Done:
		return invalid("action_tokens", "empty, which only an end marker (done) may be")
	}
	return first(
		checkTokenIDs("prompt_tokens", e.PromptTokens),
		checkTokenIDs("action_tokens", e.ActionTokens),
		checkTokenIDs("feedback_tokens", e.FeedbackTokens),
		checkFiniteLogprobs("action_logprobs", e.ActionLogprobs, 0, len(e.ActionLogprobs)),
		checkFinite("reward", e.Reward),
		checkFinite("score", e.Score),
		checkFiniteLogs("extra_logs", e.ExtraLogs),
		checkNonNegative("prompt_truncated_tokens", e.PromptTruncated),
	)
}

// checkFailureKind checks a step's failure kind: only an error step has one, and only a kind
// that an episode's run can end with (the others are the collector's to record).
func checkFailureKind(kind, errText string) *ValidationError {
	switch {
	case kind == "":
		return nil
	case errText == "":
		return invalid("failure_kind", "%.64q on a step without an error", kind)
	}
	return checkOneOf("failure_kind", kind, stepFailureKinds)
}

// stepFailureKinds are the failure kinds an env worker's error step may ask for.
var stepFailureKinds = []string{FailureEpisode, FailurePromptTooLong, FailureStale}

// Validate checks a trajectory against the invariants that the record alone can show: V ==
// Version; ids, env and the sample's place in its group as for EpisodeRequest; one rollout logprob
// per observation token; action ranges sorted, non-overlapping, non-empty and inside the tokens;
// logprobs exactly 0 outside the ranges and finite inside; one range and one step reward per turn;
// reward equal to the step rewards summed left to right; reward, scores and extra_logs finite;
// prompt_truncated_tokens ≥ 0, in a single-turn style the sum of the samples' counts; restarts
// ≥ 0; policy_versions empty or one per turn, with staleness as Staleness computes it; trace_id
// empty or a W3C trace id; timings empty or one per turn, with no negative duration.
func (t *Trajectory) Validate() error { return asError(t.validate().in("Trajectory")) }

func (t *Trajectory) validate() *ValidationError {
	if e := first(
		checkVersion(t.V),
		checkID("episode_id", t.EpisodeID),
		checkID("group_id", t.GroupID),
		checkID("env", t.Env),
		checkSample(t.SampleIndex, t.GroupSize),
	); e != nil {
		return e
	}
	switch {
	case t.Turns < 0:
		return invalid("turns", "must be >= 0, got %d", t.Turns)
	case t.PromptTruncated < 0:
		return invalid("prompt_truncated_tokens", "must be >= 0, got %d", t.PromptTruncated)
	case t.Restarts < 0:
		return invalid("restarts", "must be >= 0, got %d", t.Restarts)
	}
	if e := checkObsStyle(t.ObsStyle); e != nil {
		return e
	}
	if SingleTurnStyle(t.ObsStyle) {
		if e := t.checkSamples(); e != nil {
			return e
		}
	} else {
		switch {
		case len(t.Samples) > 0:
			return invalid("samples", "only single-turn styles have samples, this is %q", t.ObsStyle)
		case len(t.ActionRanges) != int(t.Turns):
			return invalid("action_ranges", "%d ranges for %d turns", len(t.ActionRanges), t.Turns)
		}
		if e := checkActions(t.ObservationTokens, t.ActionRanges, t.RolloutLogProbs); e != nil {
			return e
		}
	}
	if len(t.StepRewards) != int(t.Turns) {
		return invalid("step_rewards", "%d step rewards for %d turns", len(t.StepRewards), t.Turns)
	}
	if e := t.checkTimings(); e != nil {
		return e
	}
	if e := first(
		t.checkVersions(),
		checkFinite("reward", t.Reward),
		checkFinite("scores", t.Scores),
		checkFiniteLogs("extra_logs", t.ExtraLogs),
	); e != nil {
		return e
	}
	var sum float64
	for _, r := range t.StepRewards {
		sum += r
	}
	if t.Reward != sum {
		return invalid("reward", "%v is not the sum of step_rewards %v", t.Reward, sum)
	}
	return nil
}

// checkTimings checks the trace id and the timings: none, or one entry per turn.
func (t *Trajectory) checkTimings() *ValidationError {
	if e := checkTraceID(t.TraceID); e != nil {
		return e
	}
	if len(t.Timings) > 0 && len(t.Timings) != int(t.Turns) {
		return invalid("timings", "%d entries for %d turns", len(t.Timings), t.Turns)
	}
	for i := range t.Timings {
		if e := checkTimings(&t.Timings[i]); e != nil {
			return e.in(fmt.Sprintf("timings[%d]", i))
		}
	}
	return nil
}

// checkVersions checks the policy versions: none, or one per turn, and the staleness what they
// say (see Staleness). Versions may step back: a worker that has not yet seen an update tags
// with the version before it.
func (t *Trajectory) checkVersions() *ValidationError {
	v := t.PolicyVersions
	if len(v) == 0 {
		if t.Staleness != 0 {
			return invalid("staleness", "%d without policy_versions", t.Staleness)
		}
		return nil
	}
	if len(v) != int(t.Turns) {
		return invalid("policy_versions", "%d versions for %d turns", len(v), t.Turns)
	}
	if want := Staleness(v); t.Staleness != want {
		return invalid("staleness", "%d, but the versions say %d", t.Staleness, want)
	}
	return nil
}

// checkSamples checks a single-turn style's samples: none of the top-level token fields; one
// sample per turn, each with one action range and valid logprobs, rewarded with its step reward
// and the return from it; the trajectory's prompt_truncated_tokens the sum of the samples'.
func (t *Trajectory) checkSamples() *ValidationError {
	switch {
	case len(t.ObservationTokens) > 0 || len(t.ActionRanges) > 0 || len(t.RolloutLogProbs) > 0:
		return invalid("observation_tokens", "must be empty in style %q: the samples hold the tokens", t.ObsStyle)
	case len(t.Samples) != int(t.Turns):
		return invalid("samples", "%d samples for %d turns", len(t.Samples), t.Turns)
	case len(t.StepRewards) != int(t.Turns):
		return invalid("step_rewards", "%d step rewards for %d turns", len(t.StepRewards), t.Turns)
	}
	var ret float64
	var cut int64
	for i := len(t.Samples) - 1; i >= 0; i-- {
		s := &t.Samples[i]
		ret += t.StepRewards[i]
		cut += int64(s.PromptTruncated)
		field := fmt.Sprintf("samples[%d]", i)
		switch {
		case s.PromptTruncated < 0:
			return invalid(field+".prompt_truncated_tokens", "must be >= 0, got %d", s.PromptTruncated)
		case len(s.ActionRanges) != 1:
			return invalid(field+".action_ranges", "%d ranges, want 1", len(s.ActionRanges))
		case s.Reward != t.StepRewards[i]:
			return invalid(field+".reward", "%v differs from step_rewards[%d] %v", s.Reward, i, t.StepRewards[i])
		case s.Return != ret:
			return invalid(field+".return", "%v is not the sum of the step rewards from turn %d, %v", s.Return, i, ret)
		}
		if e := checkActions(s.ObservationTokens, s.ActionRanges, s.RolloutLogProbs); e != nil {
			return e.in(field)
		}
	}
	if cut != int64(t.PromptTruncated) {
		return invalid("prompt_truncated_tokens", "%d is not the sum of the samples' %d", t.PromptTruncated, cut)
	}
	return nil
}

// checkActions checks one token sequence: one logprob per token, then the action ranges, then
// the logprobs they delimit.
func checkActions(tokens Tokens, ranges Ranges, lp Logprobs) *ValidationError {
	if e := checkTokenIDs("observation_tokens", tokens); e != nil {
		return e
	}
	if len(lp) != len(tokens) {
		return invalid("rollout_log_probs", "%d logprobs for %d observation tokens", len(lp), len(tokens))
	}
	prevEnd := 0
	for i, r := range ranges {
		start, end := int(r.Start), int(r.End)
		var reason string
		switch {
		case start >= end:
			reason = "is empty"
		case start < 0:
			reason = "starts before 0"
		case start < prevEnd:
			reason = fmt.Sprintf("starts before the previous range ends at %d", prevEnd)
		case end > len(lp):
			reason = fmt.Sprintf("ends past the %d observation tokens", len(lp))
		}
		if reason != "" {
			return invalid(fmt.Sprintf("action_ranges[%d]", i), "[%d, %d) %s", start, end, reason)
		}
		prevEnd = end
	}
	const field = "rollout_log_probs"
	prevEnd = 0
	for _, r := range ranges {
		if e := first(
			checkZeroLogprobs(field, lp, prevEnd, int(r.Start)),
			checkFiniteLogprobs(field, lp, int(r.Start), int(r.End)),
		); e != nil {
			return e
		}
		prevEnd = int(r.End)
	}
	return checkZeroLogprobs(field, lp, prevEnd, len(lp))
}

// Validate checks a group: V == Version; group_id and env non-empty ids; mean_score finite; at
// least one trajectory; every trajectory valid, of this group and env, with group_size equal to
// the number of trajectories, and each sample index present once.
func (g *Group) Validate() error { return asError(g.validate().in("Group")) }

func (g *Group) validate() *ValidationError {
	if e := first(
		checkVersion(g.V),
		checkID("group_id", g.GroupID),
		checkID("env", g.Env),
		checkFinite("mean_score", g.MeanScore),
	); e != nil {
		return e
	}
	if len(g.Trajectories) == 0 {
		return invalid("trajectories", "must not be empty")
	}
	seen := make([]bool, len(g.Trajectories))
	for i := range g.Trajectories {
		if e := g.checkMember(&g.Trajectories[i], seen); e != nil {
			return e.in(fmt.Sprintf("trajectories[%d]", i))
		}
	}
	return nil
}

// checkMember checks one trajectory of g and marks its sample index in seen.
func (g *Group) checkMember(t *Trajectory, seen []bool) *ValidationError {
	if e := t.validate(); e != nil {
		return e
	}
	switch {
	case t.GroupID != g.GroupID:
		return invalid("group_id", "%q differs from the group's %q", t.GroupID, g.GroupID)
	case t.Env != g.Env:
		return invalid("env", "%q differs from the group's %q", t.Env, g.Env)
	case int(t.GroupSize) != len(seen):
		return invalid("group_size", "%d, but the group has %d trajectories", t.GroupSize, len(seen))
	case seen[t.SampleIndex]:
		return invalid("sample_index", "%d appears twice in the group", t.SampleIndex)
	}
	seen[t.SampleIndex] = true
	return nil
}

// Validate checks a failure record: V == Version; kind and reason non-empty; ids and env at most
// MaxIDLength bytes; turn ≥ 0; payload at most MaxFailurePayload bytes; trace_id empty or a W3C
// trace id.
func (f *Failure) Validate() error { return asError(f.validate().in("Failure")) }

func (f *Failure) validate() *ValidationError {
	var payload *ValidationError
	if len(f.Payload) > MaxFailurePayload {
		payload = invalid("payload", "%d bytes, longer than %d", len(f.Payload), MaxFailurePayload)
	}
	return first(
		checkVersion(f.V),
		checkNonEmpty("kind", f.Kind),
		checkNonEmpty("reason", f.Reason),
		checkOptionalID("episode_id", f.EpisodeID),
		checkOptionalID("group_id", f.GroupID),
		checkOptionalID("env", f.Env),
		checkNonNegative("turn", f.Turn),
		checkTraceID(f.TraceID),
		payload,
	)
}
