package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// marshalJSONArray writes s as a JSON array, nil included (as []): trainers read these fields
// as lists and must not meet null. elemSize is a guess of an element's length in bytes.
func marshalJSONArray[E any](name string, s []E, elemSize int, appendElem func([]byte, E) ([]byte, error)) ([]byte, error) {
	return appendArray(make([]byte, 0, 2+len(s)*elemSize), name, s, appendElem)
}

// appendArray appends s as a JSON array to b.
func appendArray[E any](b []byte, name string, s []E, appendElem func([]byte, E) ([]byte, error)) ([]byte, error) {
	b = append(b, '[')
	for i, x := range s {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendElem(b, x); err != nil {
			return nil, fmt.Errorf("messages: %s[%d]: %w", name, i, err)
		}
	}
	return append(b, ']'), nil
}

func appendInt32(b []byte, x int32) ([]byte, error) { return strconv.AppendInt(b, int64(x), 10), nil }

// appendFloat32 writes the shortest decimal that reads back as the same float32: exact, yet
// no longer than the value's precision warrants.
func appendFloat32(b []byte, x float32) ([]byte, error) {
	if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v has no JSON representation", x)
	}
	return strconv.AppendFloat(b, float64(x), 'g', -1, 32), nil
}

// appendFloatLiteral writes x as a JSON number that always reads as a float ("1.0", not "1").
func appendFloatLiteral(b []byte, x float64) ([]byte, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, fmt.Errorf("%v has no JSON representation", x)
	}
	start := len(b)
	b = strconv.AppendFloat(b, x, 'g', -1, 64)
	if !bytes.ContainsAny(b[start:], ".e") {
		b = append(b, ".0"...)
	}
	return b, nil
}

func appendRange(b []byte, r Range) ([]byte, error) {
	b = strconv.AppendInt(append(b, '['), int64(r.Start), 10)
	b = strconv.AppendInt(append(b, ','), int64(r.End), 10)
	return append(b, ']'), nil
}

// MarshalJSON writes t as an array of numbers; nil as [].
func (t Tokens) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Tokens", t, 7, appendInt32)
}

// MarshalJSON writes l as an array of numbers, each the shortest decimal that reads back as the
// same float32; nil as []. NaN and infinities are errors: JSON cannot represent them.
func (l Logprobs) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Logprobs", l, 12, appendFloat32)
}

// MarshalJSON writes r as the pair [start, end].
func (r Range) MarshalJSON() ([]byte, error) { return appendRange(nil, r) }

// UnmarshalJSON reads r from the pair [start, end].
func (r *Range) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var pair []int32
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("messages: Range: %w", err)
	}
	if len(pair) != 2 {
		return fmt.Errorf("messages: Range: want [start, end], got %d numbers", len(pair))
	}
	r.Start, r.End = pair[0], pair[1]
	return nil
}

// MarshalJSON writes r as an array of [start, end] pairs; nil as [].
func (r Ranges) MarshalJSON() ([]byte, error) {
	return marshalJSONArray("Ranges", r, 14, appendRange)
}

// MarshalJSON writes t with OpenRLHF's field names. A nil extra_logs or step_rewards is written
// as {} or [] rather than null, which Python consumers would otherwise have to special-case.
// Strings keep <, > and & unescaped so chat markup such as <|im_end|> stays readable. The token
// arrays are written directly: encoding them through encoding/json (which re-validates every
// Marshaler's output) would dominate the cost of writing a run's JSONL.
func (t Trajectory) MarshalJSON() ([]byte, error) {
	w := jsonWriter{b: make([]byte, 0, 256+len(t.ObservationTokens)*7+len(t.RolloutLogProbs)*12+len(t.Prompt)+len(t.Label))}
	if t.RunID != "" {
		w.field("run_id", t.RunID)
	}
	w.field("episode_id", t.EpisodeID)
	w.field("group_id", t.GroupID)
	w.field("sample_index", t.SampleIndex)
	w.field("group_size", t.GroupSize)
	w.field("env", t.Env)
	if t.EnvSeed != nil {
		w.field("env_seed", *t.EnvSeed)
	}
	w.field("prompt", t.Prompt)
	w.field("label", t.Label)
	w.raw("observation_tokens", func(b []byte) ([]byte, error) { return appendArray(b, "Tokens", t.ObservationTokens, appendInt32) })
	w.raw("action_ranges", func(b []byte) ([]byte, error) { return appendArray(b, "Ranges", t.ActionRanges, appendRange) })
	w.raw("rollout_log_probs", func(b []byte) ([]byte, error) {
		return appendArray(b, "Logprobs", t.RolloutLogProbs, appendFloat32)
	})
	w.field("reward", t.Reward)
	w.field("scores", t.Scores)
	extra := t.ExtraLogs
	if extra == nil {
		extra = map[string]float64{}
	}
	w.field("extra_logs", extra)
	w.field("truncated", t.Truncated)
	w.field("turns", t.Turns)
	rewards := t.StepRewards
	if rewards == nil {
		rewards = []float64{}
	}
	w.field("step_rewards", rewards)
	w.field("finish_reason", t.FinishReason)
	if len(t.PolicyVersions) > 0 {
		w.field("policy_versions", t.PolicyVersions)
	}
	w.field("submit_policy_version", t.SubmitVersion)
	w.field("staleness", t.Staleness)
	w.field("stale", t.Stale)
	w.field("restarts", t.Restarts)
	w.field("resumed", t.Resumed)
	w.field("submit_time_ns", t.SubmitTime)
	w.field("done_time_ns", t.DoneTime)
	w.field("generate_ns", t.GenerateNanos)
	if t.TraceID != "" {
		w.field("trace_id", t.TraceID)
	}
	if len(t.Timings) > 0 {
		w.raw("timings", func(b []byte) ([]byte, error) { return appendArray(b, "Timings", t.Timings, appendTimings) })
	}
	if t.ObsStyle != "" {
		w.field("obs_style", t.ObsStyle)
	}
	if len(t.Samples) > 0 {
		w.raw("samples", func(b []byte) ([]byte, error) { return appendArray(b, "Samples", t.Samples, appendSample) })
	}
	w.field("success", t.Success)
	if t.PromptTruncated > 0 {
		w.field("prompt_truncated_tokens", t.PromptTruncated)
	}
	if len(t.Info) > 0 {
		w.field("info", t.Info)
	}
	if len(t.PromptMessages) > 0 {
		w.field("messages", t.Conversation())
	}
	// NeMo Gym's result fields, so its tooling reads the same lines.
	if r, ok := t.ExtraLogs["library_reward"]; ok {
		w.raw("library_reward", func(b []byte) ([]byte, error) { return appendFloatLiteral(b, r) }) // 1.0, never 1, as NeMo Gym
	}
	for _, k := range []string{"expected_answer", "extracted_answer"} {
		if v, ok := t.Info[k]; ok {
			if k == "extracted_answer" && v == "" { // nothing extracted: null, as NeMo Gym
				w.raw(k, func(b []byte) ([]byte, error) { return append(b, "null"...), nil })
				continue
			}
			w.field(k, v)
		}
	}
	w.field("_ng_task_index", t.TaskIndex)
	w.field("_ng_rollout_index", max(t.RolloutIndex, t.SampleIndex))
	if w.err != nil {
		return nil, w.err
	}
	return append(w.b, '}'), nil
}

// appendSample writes one single-turn sample with the same array encodings as a trajectory.
func appendSample(b []byte, s Sample) ([]byte, error) {
	w := jsonWriter{b: b}
	w.b = append(w.b, '{')
	w.first = true
	w.raw("observation_tokens", func(b []byte) ([]byte, error) { return appendArray(b, "Tokens", s.ObservationTokens, appendInt32) })
	w.raw("action_ranges", func(b []byte) ([]byte, error) { return appendArray(b, "Ranges", s.ActionRanges, appendRange) })
	w.raw("rollout_log_probs", func(b []byte) ([]byte, error) { return appendArray(b, "Logprobs", s.RolloutLogProbs, appendFloat32) })
	w.field("reward", s.Reward)
	w.field("return", s.Return)
	if s.PromptTruncated > 0 {
		w.field("prompt_truncated_tokens", s.PromptTruncated)
	}
	if w.err != nil {
		return nil, w.err
	}
	return append(w.b, '}'), nil
}

// appendTimings writes one turn's timings as an object of named fields, the endpoint last and
// only when known.
func appendTimings(b []byte, t TurnTimings) ([]byte, error) {
	for i, f := range [...]struct {
		name string
		ns   int64
	}{
		{"queue_ns", t.Queue}, {"tokenize_ns", t.Tokenize}, {"generate_ns", t.Generate}, {"model_ns", t.Model},
		{"step_ns", t.Step}, {"publish_ns", t.Publish}, {"wall_ns", t.Wall},
	} {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), f.name...), '"', ':')
		b = strconv.AppendInt(b, f.ns, 10)
	}
	if t.Endpoint != "" {
		q, err := json.Marshal(t.Endpoint)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"endpoint":`...), q...)
	}
	return append(b, '}'), nil
}

// jsonWriter appends the fields of one JSON object, keeping the first error.
type jsonWriter struct {
	b   []byte
	err error
	// first is set when b already holds the object's opening brace but no member.
	first bool
}

func (w *jsonWriter) key(name string) {
	switch {
	case w.first:
		w.first = false
	case len(w.b) == 0:
		w.b = append(w.b, '{')
	default:
		w.b = append(w.b, ',')
	}
	w.b = append(append(append(w.b, '"'), name...), '"', ':')
}

// field appends a small value through encoding/json, without HTML escaping.
func (w *jsonWriter) field(name string, v any) {
	if w.err != nil {
		return
	}
	w.key(name)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		w.err = fmt.Errorf("messages: Trajectory.%s: %w", name, err)
		return
	}
	w.b = append(w.b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// raw appends a value written by appendValue.
func (w *jsonWriter) raw(name string, appendValue func([]byte) ([]byte, error)) {
	if w.err != nil {
		return
	}
	w.key(name)
	w.b, w.err = appendValue(w.b)
}
