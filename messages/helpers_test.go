package messages

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Valid sample messages, one function per type, so each test can mutate a fresh copy.

func ptr[T any](v T) *T { return &v }

func sampleSampling() SamplingParams {
	return SamplingParams{Temperature: 0.7, TopP: 0.95, TopK: 50, MaxTokens: 256, Stop: []string{"</answer>"}, Seed: ptr[int64](42)}
}

func sampleEpisode() *EpisodeRequest {
	return &EpisodeRequest{
		V:             Version,
		RunID:         "run-7",
		EpisodeID:     "ep-0001",
		GroupID:       "grp-01",
		SampleIndex:   1,
		GroupSize:     4,
		Env:           "game:GuessTheNumber-v0",
		EnvOptions:    []byte(`{"max_turns": 8}`),
		EnvSeed:       ptr[uint64](7),
		Prompt:        "Guess a number between 1 and 20.",
		ChatTemplate:  true,
		Label:         "13",
		Sampling:      sampleSampling(),
		MaxLength:     4096,
		MaxTurns:      8,
		SubmitTime:    1_700_000_000_000_000_000,
		SubmitVersion: 3, MaxStaleness: new(int32(2)), StalePolicy: StaleRestart,
	}
}

func sampleGenerateRequest() *GenerateRequest {
	return &GenerateRequest{V: Version, EpisodeID: "ep-0001", Turn: 2, Prompt: Tokens{151644, 872, 198}, Sampling: sampleSampling(), MaxTokens: 128}
}

func sampleGenerateReply() *GenerateReply {
	return &GenerateReply{
		V: Version, Tokens: Tokens{785, 4226, 151645}, Logprobs: Logprobs{-0.25, -1.5, -0.001},
		Text: "The answer", FinishReason: "stop", Endpoint: "http://vllm-0:8000", PolicyVersion: 5,
	}
}

func sampleTokenizeRequest() *TokenizeRequest {
	return &TokenizeRequest{
		V: Version, EpisodeID: "ep-0001",
		Messages:            []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
		AddGenerationPrompt: true,
	}
}

func sampleTokenizeReply() *TokenizeReply {
	return &TokenizeReply{V: Version, Tokens: Tokens{1, 2, 3}}
}

// sampleStep is turn 0 of the sample episode: it carries the request and the prompt tokens.
func sampleStep() *StepEvent {
	return &StepEvent{
		V: Version, RunID: "run-7", EpisodeID: "ep-0001", Turn: 0, Episode: sampleEpisode(),
		PromptTokens:   Tokens{10, 11, 12},
		ActionTokens:   Tokens{20, 21},
		ActionLogprobs: Logprobs{-0.5, -0.25},
		ActionText:     `\boxed{10}`,
		FeedbackText:   "Too low.",
		FeedbackTokens: Tokens{30},
		Reward:         0, Score: 0,
		FinishReason:  "stop",
		ExtraLogs:     map[string]float64{"dummy_scores": 0, "turn_count": 1},
		EnvState:      []byte(`{"target": 13}`),
		Endpoint:      "http://vllm-0:8000",
		PolicyVersion: 5, GenerateNanos: 1200, StepNanos: 300,
	}
}

// sampleTrajectory is the sample episode after two turns:
// prompt [10 11 12], action [20 21], feedback [30], action [22], feedback [31 32].
func sampleTrajectory() *Trajectory {
	return &Trajectory{
		V: Version, RunID: "run-7", EpisodeID: "ep-0001", GroupID: "grp-01", SampleIndex: 1, GroupSize: 4,
		Env: "game:GuessTheNumber-v0", EnvSeed: ptr[uint64](7),
		Prompt: "Guess a number between 1 and 20.", Label: "13",
		ObservationTokens: Tokens{10, 11, 12, 20, 21, 30, 22, 31, 32},
		ActionRanges:      Ranges{{3, 5}, {6, 7}},
		RolloutLogProbs:   Logprobs{0, 0, 0, -0.5, -0.25, 0, -1, 0, 0},
		Reward:            1, Scores: 1,
		ExtraLogs:      map[string]float64{"dummy_scores": 1, "turn_count": 2},
		Turns:          2,
		StepRewards:    []float64{0, 1},
		FinishReason:   "stop",
		PolicyVersions: []int64{5, 5},
		SubmitTime:     1_700_000_000_000_000_000,
		DoneTime:       1_700_000_000_500_000_000,
		GenerateNanos:  2400,
	}
}

// sampleGroup is a group of two trajectories of the sample episode's prompt.
func sampleGroup() *Group {
	a, b := *sampleTrajectory(), *sampleTrajectory()
	a.EpisodeID, a.SampleIndex, a.GroupSize = "ep-a", 0, 2
	b.EpisodeID, b.SampleIndex, b.GroupSize = "ep-b", 1, 2
	return &Group{V: Version, RunID: "run-7", GroupID: "grp-01", Env: a.Env, MeanScore: 1, Trajectories: []Trajectory{a, b}}
}

func sampleFailure() *Failure {
	return &Failure{
		V: Version, RunID: "run-7", EpisodeID: "ep-0001", GroupID: "grp-01", Env: "game:GuessTheNumber-v0",
		Kind: FailureMalformed, Reason: "messages: decode StepEvent: malformed msgpack", Subject: "rf.steps.run-7.1.1.5.13.ep-0001",
		Turn: 3, Time: 1_700_000_000_000_000_000, Payload: []byte{0xc1, 0x00},
	}
}

// canonical re-encodes msgpack with sorted map keys, so that two encodings of one value compare
// equal byte for byte even though Go randomizes map iteration.
func canonical(t testing.TB, b []byte) []byte {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatalf("canonical: %v", err)
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("canonical: %v", err)
	}
	return buf.Bytes()
}

// mustMarshal is Marshal for values known to encode.
func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%T): %v", v, err)
	}
	return b
}
