package fleet

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"

	"github.com/rollfleet/rollfleet/envplay"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/nemogym"
	"github.com/rollfleet/rollfleet/toyllm"
)

// Output formats of a run's trajectories (Options.Format).
const (
	// FormatOpenRLHF is one trajectory per line with OpenRLHF's fields (and
	// NeMo Gym's result fields beside them): the default.
	FormatOpenRLHF = "openrlhf"
	// FormatNeMoGym is one result per line as NeMo Gym's rollout collection
	// writes it (see nemogym.Record), with rollfleet's episode_id last.
	FormatNeMoGym = "nemo-gym"
)

// Formats lists the output formats.
var Formats = []string{FormatOpenRLHF, FormatNeMoGym}

// rowKeysKept are the row fields a NeMo Gym record does not repeat among
// its extras: they are written in its own fields
// (episode_id is rollfleet's own, which --resume reads).
var rowKeysKept = map[string]bool{
	"responses_create_params": true, "agent_ref": true, "_ng_task_index": true, "_ng_rollout_index": true, "episode_id": true,
}

// nemoRecord is trajectory t as NeMo Gym's rollout collection writes the
// result of its episode.
func (p *plan) nemoRecord(t *messages.Trajectory) (*nemogym.Record, error) {
	idx, ok := jobs.EpisodeIndex(p.RunID(), t.EpisodeID)
	if !ok || idx >= p.Len() {
		return nil, fmt.Errorf("fleet: trajectory %s is not one of run %s's episodes", t.EpisodeID, p.RunID())
	}
	req, err := p.Request(idx)
	if err != nil {
		return nil, err
	}
	row := p.Row(idx)
	var fields []nemogym.Field
	if row.Raw != nil {
		fields, _ = nemogym.ObjectFields(row.Raw) // read before: an object
	}
	rawField := func(k string) json.RawMessage {
		for _, f := range fields {
			if f.Key == k {
				return f.Value
			}
		}
		return nil
	}

	r := &nemogym.Record{
		CreateParams: rawField("responses_create_params"),
		Temperature:  &req.Sampling.Temperature, TopP: &req.Sampling.TopP,
		ResponseID: "resp_" + idHex(t.EpisodeID), CreatedAt: float64(t.DoneTime) / 1e9, Model: p.modelName(),
		Incomplete: t.FinishReason == "length",
		Reward:     t.Reward, TaskIndex: t.TaskIndex, RolloutIndex: max(t.RolloutIndex, t.SampleIndex),
		AgentRef: rawField("agent_ref"),
	}
	if req.Sampling.MaxTokens > 0 {
		r.MaxOutputTokens = &req.Sampling.MaxTokens
	}
	switch system, user, isMath := envs.MathInput(t.Env, t.Prompt); {
	case len(req.Messages) > 0:
		for _, m := range req.Messages {
			r.Input = append(r.Input, nemogym.Message{Role: m.Role, Content: m.Content})
		}
	case isMath:
		if system != "" {
			r.Input = append(r.Input, nemogym.Message{Role: "system", Content: system})
		}
		r.Input = append(r.Input, nemogym.Message{Role: "user", Content: user})
	case t.Prompt != "":
		r.Input = []nemogym.Message{{Role: "user", Content: t.Prompt}}
	default:
		r.Input = gameInput(t.Env, req)
	}
	r.Output, r.InputTokens, r.OutputTokens = outputMessages(t)

	if spec, err := envs.Lookup(t.Env); err == nil && spec.Family == envs.MathFamily || t.Info["expected_answer"] != "" {
		r.Math = true
		r.ExpectedAnswer = t.Info["expected_answer"]
		if r.ExpectedAnswer == "" {
			r.ExpectedAnswer = t.Label
		}
		if x := t.Info["extracted_answer"]; x != "" {
			r.ExtractedAnswer = &x
		}
		r.LibraryReward = t.ExtraLogs["library_reward"]
		if j := t.Info["judge_evaluations"]; j != "" {
			r.JudgeEvaluations = json.RawMessage(j)
		}
		r.JudgeFailure = t.Info["judge_error"]
	}
	if r.AgentRef == nil && !r.Math {
		r.AgentRef, _ = json.Marshal(map[string]string{"name": t.Env})
	}
	// The question, then the row's other fields, then the episode.
	if q := rawField("question"); q != nil {
		r.Extra = append(r.Extra, nemogym.Field{Key: "question", Value: q})
	} else if t.Prompt != "" {
		q, _ := json.Marshal(t.Prompt)
		r.Extra = append(r.Extra, nemogym.Field{Key: "question", Value: q})
	}
	for _, f := range fields {
		if !rowKeysKept[f.Key] {
			r.Extra = append(r.Extra, f)
		}
	}
	id, _ := json.Marshal(t.EpisodeID)
	r.Extra = append(r.Extra, nemogym.Field{Key: "episode_id", Value: id})
	return r, nil
}

// gameInput is the first prompt of a game episode played from the env's
// own instructions, as the env worker made it: the game is reset again
// from the episode's seed. A remote env's is not known here (nil).
func gameInput(id string, req *messages.EpisodeRequest) []nemogym.Message {
	if req.EnvSeed == nil {
		return nil
	}
	spec, err := envs.Lookup(id)
	if err != nil {
		return nil
	}
	_, obs, info, err := envplay.Start(id, req.EnvOptions, *req.EnvSeed, nil)
	if err != nil {
		return nil
	}
	system, user := spec.FirstChat(obs, info)
	var in []nemogym.Message
	if system != "" {
		in = append(in, nemogym.Message{Role: "system", Content: system})
	}
	return append(in, nemogym.Message{Role: "user", Content: user})
}

// modelName is the served model's name as far as the run knows it: --model,
// the stand-in's when it runs here, else empty.
func (p *plan) modelName() string {
	switch {
	case p.opts.Model != "":
		return p.opts.Model
	case len(p.opts.VLLM) == 0 && !p.opts.SubmitOnly:
		if p.opts.ToyLLM.Model != "" {
			return p.opts.ToyLLM.Model
		}
		return toyllm.DefaultModel
	}
	return ""
}

// outputMessages are a trajectory's turns as response output messages: each
// turn's prompt tokens, generated tokens and their log-probabilities, and
// the text the model server decoded. It returns them with the first
// prompt's length and the number of generated tokens.
func outputMessages(t *messages.Trajectory) (out []nemogym.OutputMessage, input, output int) {
	text := func(k int) string {
		if k < len(t.Responses) {
			return t.Responses[k]
		}
		return ""
	}
	id := func(k int) string { return "msg_" + idHex(fmt.Sprintf("%s/%d", t.EpisodeID, k)) }
	if len(t.Samples) > 0 {
		for k, s := range t.Samples {
			r := s.ActionRanges[0]
			out = append(out, nemogym.OutputMessage{
				ID: id(k), Text: text(k), PromptTokenIDs: s.ObservationTokens[:r.Start],
				GenerationTokenIDs: s.ObservationTokens[r.Start:r.End], GenerationLogProbs: s.RolloutLogProbs[r.Start:r.End],
			})
			output += int(r.End - r.Start)
		}
		input = int(t.Samples[0].ActionRanges[0].Start)
		return out, input, output
	}
	for k, r := range t.ActionRanges {
		out = append(out, nemogym.OutputMessage{
			ID: id(k), Text: text(k), PromptTokenIDs: t.ObservationTokens[:r.Start],
			GenerationTokenIDs: t.ObservationTokens[r.Start:r.End], GenerationLogProbs: t.RolloutLogProbs[r.Start:r.End],
		})
		output += int(r.End - r.Start)
	}
	if len(t.ActionRanges) > 0 {
		input = int(t.ActionRanges[0].Start)
	}
	return out, input, output
}

// idHex is a short stable hex id derived from s.
func idHex(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}

// writeNeMoRecord writes trajectory t as one NeMo Gym result line.
func (p *plan) writeNeMoRecord(w io.Writer, t *messages.Trajectory) error {
	r, err := p.nemoRecord(t)
	if err != nil {
		return err
	}
	line := append(nemogym.AppendRecord(make([]byte, 0, 1024+len(t.ObservationTokens)*16), r), '\n')
	if _, err := w.Write(line); err != nil {
		return fmt.Errorf("fleet: write trajectory %s: %w", t.EpisodeID, err)
	}
	return nil
}
