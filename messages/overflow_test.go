package messages

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// sampleSingleTurn is a two-turn concat trajectory whose prompts were cut by 3 and 2 tokens.
func sampleSingleTurn() *Trajectory {
	return &Trajectory{
		V: Version, EpisodeID: "ep-0002", GroupID: "grp-02", GroupSize: 1, Env: "game:GuessTheNumber-v0",
		ObsStyle: ObsConcat, Turns: 2, StepRewards: []float64{0, 1}, Reward: 1, Scores: 1,
		ExtraLogs: map[string]float64{},
		Samples: []Sample{
			{ObservationTokens: Tokens{10, 11, 20}, ActionRanges: Ranges{{2, 3}}, RolloutLogProbs: Logprobs{0, 0, -0.5}, Reward: 0, Return: 1, PromptTruncated: 3},
			{ObservationTokens: Tokens{12, 13, 21}, ActionRanges: Ranges{{2, 3}}, RolloutLogProbs: Logprobs{0, 0, -1}, Reward: 1, Return: 1, PromptTruncated: 2},
		},
		PromptTruncated: 5,
	}
}

func TestPromptOverflowValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		msg   validator
		field string // the path the error names; empty when valid
	}{
		{"request fail", with(sampleEpisode, func(r *EpisodeRequest) { r.PromptOverflow = PromptOverflowFail }), ""},
		{"request truncate-left", with(sampleEpisode, func(r *EpisodeRequest) { r.PromptOverflow = PromptOverflowTruncateLeft }), ""},
		{"request unknown", with(sampleEpisode, func(r *EpisodeRequest) { r.PromptOverflow = "truncate-right" }), "EpisodeRequest.prompt_overflow"},
		{"step with a cut prompt", with(sampleStep, func(e *StepEvent) { e.PromptTruncated = 7 }), ""},
		{"step with a negative cut", with(sampleStep, func(e *StepEvent) { e.PromptTruncated = -1 }), "StepEvent.prompt_truncated_tokens"},
		{"failed step's kind", &StepEvent{V: Version, EpisodeID: "e", Error: "too long", FailureKind: FailurePromptTooLong}, ""},
		{"episode failure kind", &StepEvent{V: Version, EpisodeID: "e", Error: "boom", FailureKind: FailureEpisode}, ""},
		{"kind without an error", with(sampleStep, func(e *StepEvent) { e.FailureKind = FailurePromptTooLong }), "StepEvent.failure_kind"},
		{"collector's kind", &StepEvent{V: Version, EpisodeID: "e", Error: "x", FailureKind: FailureInvariant}, "StepEvent.failure_kind"},
		{"trajectory with a cut prompt", with(sampleTrajectory, func(tr *Trajectory) { tr.PromptTruncated = 4 }), ""},
		{"trajectory with a negative cut", with(sampleTrajectory, func(tr *Trajectory) { tr.PromptTruncated = -4 }), "Trajectory.prompt_truncated_tokens"},
		{"samples' cuts", sampleSingleTurn(), ""},
		{"samples' cuts miscounted", with(sampleSingleTurn, func(tr *Trajectory) { tr.PromptTruncated = 3 }), "Trajectory.prompt_truncated_tokens"},
		{"sample with a negative cut", with(sampleSingleTurn, func(tr *Trajectory) {
			tr.Samples[1].PromptTruncated, tr.PromptTruncated = -2, 1
		}), "Trajectory.samples[1].prompt_truncated_tokens"},
	} {
		err := tc.msg.Validate()
		var ve *ValidationError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field == "":
		case !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, ErrInvalid):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
}

func TestPromptOverflowRoundTrip(t *testing.T) {
	roundTrip(t, with(sampleEpisode, func(r *EpisodeRequest) { r.PromptOverflow = PromptOverflowTruncateLeft }))
	roundTrip(t, with(sampleStep, func(e *StepEvent) { e.PromptTruncated = 7 }))
	roundTrip(t, &StepEvent{V: Version, EpisodeID: "e", Error: "too long", FailureKind: FailurePromptTooLong})
	roundTrip(t, sampleSingleTurn())

	b := sampleJSON(t, sampleSingleTurn())
	var got Trajectory
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.PromptTruncated != 5 || got.Samples[0].PromptTruncated != 3 || got.Samples[1].PromptTruncated != 2 {
		t.Errorf("prompt_truncated_tokens did not survive JSON: %s", b)
	}
	if b := sampleJSON(t, sampleTrajectory()); strings.Contains(string(b), "prompt_truncated_tokens") {
		t.Errorf("an uncut prompt's trajectory names prompt_truncated_tokens: %s", b)
	}
}
