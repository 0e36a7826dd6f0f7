package messages_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
)

// The wire fixtures pin the bytes the Go encoder emits, so that decoders in other languages (the
// Python client's tests read the same files) are checked against the real encoding, and an
// encoding change cannot pass unnoticed: it fails here until the fixtures are rewritten with
//
//	go test ./messages -run TestWireFixtures -update
//
// (or ROLLFLEET_UPDATE_FIXTURES=1), and then fails the other languages' tests until their decoders
// follow.

var updateFixtures = flag.Bool("update", false, "rewrite the wire fixtures from the Go encoder")

// fixtureDir is shared with the Python client, whose tests decode every fixture in it.
const fixtureDir = "../clients/python/tests/fixtures"

// wireFixture is one message encoded into <name>.msgpack, with its expected decoded form in
// <name>.json as {"kind": kind, "value": …}.
type wireFixture struct {
	name, kind string
	msg        any                       // a pointer to the message
	decode     func([]byte) (any, error) // messages.Decode of the message's type
}

func decodeAs[T any, P interface {
	*T
	Validate() error
}]() func([]byte) (any, error) {
	return func(b []byte) (any, error) { return messages.Decode[T, P](b) }
}

func wireFixtures() []wireFixture {
	return []wireFixture{
		{"trajectory_chat", "trajectory", fixtureChatTrajectory(), decodeAs[messages.Trajectory]()},
		{"trajectory_single_turn", "trajectory", fixtureSingleTurnTrajectory(), decodeAs[messages.Trajectory]()},
		{"group", "group", fixtureGroup(), decodeAs[messages.Group]()},
		{"failure", "failure", fixtureFailure(), decodeAs[messages.Failure]()},
		{"step_first", "step", fixtureFirstStep(), decodeAs[messages.StepEvent]()},
		{"step_end_marker", "step", fixtureEndMarker(), decodeAs[messages.StepEvent]()},
		{"episode_request", "episode_request", fixtureEpisodeRequest(), decodeAs[messages.EpisodeRequest]()},
		{"episode_request_minimal", "episode_request", fixtureMinimalRequest(), decodeAs[messages.EpisodeRequest]()},
		{"policy_state", "policy_state", fixturePolicyState(), decodeAs[messages.PolicyState]()},
		{"worker_status", "worker_status", fixtureWorkerStatus(), decodeAs[messages.WorkerStatus]()},
	}
}

// Fixture messages. Every map holds at most one entry: msgpack maps are written in Go's random
// iteration order, and a fixture must have one encoding.

func fixtureSeq(n int, from int32) messages.Tokens {
	t := make(messages.Tokens, n)
	for i := range t {
		t[i] = from + int32(i)
	}
	return t
}

// fixtureChatTrajectory is a three-turn chat episode whose policy moved on once (versions 4, 5,
// 5) after one restart. Its 70 observation tokens make a bin16, its 300-byte prompt a str16, and
// its token ids need all 32 bits of the packed words.
func fixtureChatTrajectory() *messages.Trajectory {
	obs := append(messages.Tokens{151644, 8948, 198}, fixtureSeq(57, 1000)...) // prompt: 0..59
	obs = append(obs, 785, 4226, 151645)                                       // turn 0: 60..62
	obs = append(obs, 30, 31)                                                  // feedback: 63..64
	obs = append(obs, 22, 151645)                                              // turn 1: 65..66
	obs = append(obs, 32)                                                      // feedback: 67
	obs = append(obs, 23, 151645)                                              // turn 2: 68..69
	lp := make(messages.Logprobs, len(obs))
	copy(lp[60:], messages.Logprobs{-0.1, -2.5e-05, -12.75})
	copy(lp[65:], messages.Logprobs{-0.5, -1e-07})
	copy(lp[68:], messages.Logprobs{-3.1415927, 0})
	return &messages.Trajectory{
		V: messages.Version, RunID: "run/7 α", EpisodeID: "ep.0001", GroupID: "grp-01", SampleIndex: 1, GroupSize: 4,
		Env: "game:GuessTheNumber-v0", EnvSeed: new(uint64(18446744073709551615)),
		Prompt:            strings.Repeat("Guess a number between 1 and 20. ", 9) + "<|im_end|>\n" + strings.Repeat("x", 3),
		Label:             "13",
		ObservationTokens: obs,
		ActionRanges:      messages.Ranges{{60, 63}, {65, 67}, {68, 70}},
		RolloutLogProbs:   lp,
		Reward:            0.5, Scores: -1.25,
		ExtraLogs:       map[string]float64{"turn_count": 3},
		Truncated:       false,
		Turns:           3,
		StepRewards:     []float64{-0.5, 0, 1},
		FinishReason:    "stop",
		PolicyVersions:  []int64{4, 5, 5},
		SubmitVersion:   4,
		Staleness:       1,
		Restarts:        1,
		SubmitTime:      1_700_000_000_000_000_000,
		DoneTime:        1_700_000_000_500_000_000,
		GenerateNanos:   2_400_000_000,
		Success:         true,
		Info:            map[string]string{"extracted_answer": "13"},
		TaskIndex:       17,
		Resumed:         2,
		PromptTruncated: 0,
		RolloutIndex:    9,
		Responses:       []string{"I guess \\boxed{13}"},
		PromptMessages:  []messages.ChatMessage{{Role: "user", Content: "Guess a number between 1 and 20."}},
		Feedback:        []string{"Correct!"},
		TraceID:         "4bf92f3577b34da6a3ce929d0e0e4736",
		Timings: []messages.TurnTimings{
			{Queue: 1_500_000, Tokenize: 210_000, Generate: 800_000_000, Model: 790_000_000, Step: 12_000, Wall: 801_900_000, Endpoint: "http://vllm-0:8000"},
			{Queue: 40_000, Tokenize: 95_000, Generate: 600_000_000, Model: 598_000_000, Step: 9_000, Publish: 700_000, Wall: 601_000_000, Endpoint: "http://vllm-1:8000"},
			{Generate: 1_000_000_000, Model: 999_000_000, Step: 8_000, Publish: 650_000, Wall: 1_000_800_000, Endpoint: "http://vllm-1:8000"},
		},
	}
}

// fixtureSingleTurnTrajectory is a two-turn concat-style episode: one sample per turn, empty
// top-level token fields (msgpack nil), kept although its policy moved on too far.
func fixtureSingleTurnTrajectory() *messages.Trajectory {
	return &messages.Trajectory{
		V: messages.Version, EpisodeID: "ep-st", GroupID: "grp-st", SampleIndex: 0, GroupSize: 1,
		Env: "game:Wordle-v0", Prompt: "Play Wordle.", Label: "",
		Reward: 1, Scores: 1, Turns: 2, StepRewards: []float64{0, 1}, FinishReason: "stop",
		PolicyVersions: []int64{7, 9}, SubmitVersion: 7, Staleness: 2, Stale: true,
		SubmitTime: 1_700_000_001_000_000_000, DoneTime: 1_700_000_002_000_000_000, GenerateNanos: 5000,
		ObsStyle: messages.ObsConcat,
		Samples: []messages.Sample{
			{
				ObservationTokens: messages.Tokens{1, 2, 3, 40, 41},
				ActionRanges:      messages.Ranges{{3, 5}},
				RolloutLogProbs:   messages.Logprobs{0, 0, 0, -0.75, -0.125},
				Reward:            0, Return: 1, PromptTruncated: 1,
			},
			{
				ObservationTokens: messages.Tokens{1, 2, 50, 51, 52},
				ActionRanges:      messages.Ranges{{2, 5}},
				RolloutLogProbs:   messages.Logprobs{0, 0, -0.3, -0.6, -0.9},
				Reward:            1, Return: 1, PromptTruncated: 2,
			},
		},
		PromptTruncated: 3,
	}
}

// fixtureGroupMember is a one-turn chat trajectory of fixtureGroup.
func fixtureGroupMember(index int32, score float64) messages.Trajectory {
	return messages.Trajectory{
		V: messages.Version, RunID: "run-7", EpisodeID: fmt.Sprintf("grp-02/%d", index), GroupID: "grp-02",
		SampleIndex: index, GroupSize: 2, Env: "math:gsm8k", Prompt: "1+1?", Label: "2",
		ObservationTokens: messages.Tokens{16, 10, 16, 30, 17},
		ActionRanges:      messages.Ranges{{4, 5}},
		RolloutLogProbs:   messages.Logprobs{0, 0, 0, 0, -0.0625},
		Reward:            score, Scores: score, Turns: 1, StepRewards: []float64{score}, FinishReason: "stop",
		PolicyVersions: []int64{3}, SubmitVersion: 3,
		SubmitTime: 1_700_000_000_000_000_000, DoneTime: 1_700_000_000_100_000_000, GenerateNanos: 1000,
		Success: score > 0,
	}
}

func fixtureGroup() *messages.Group {
	return &messages.Group{
		V: messages.Version, RunID: "run-7", GroupID: "grp-02", Env: "math:gsm8k", MeanScore: 0.5,
		Trajectories: []messages.Trajectory{fixtureGroupMember(0, 1), fixtureGroupMember(1, 0)},
	}
}

func fixtureFailure() *messages.Failure {
	return &messages.Failure{
		V: messages.Version, RunID: "run-7", EpisodeID: "ep-0002", GroupID: "grp-03", Env: "game:GuessTheNumber-v0",
		Kind: messages.FailureMalformed, Reason: "messages: decode StepEvent: malformed msgpack",
		Subject: "rf.steps.run-7.1.1.5.13.ep-0002", Turn: 2, Time: 1_700_000_003_000_000_000, Payload: []byte{0xc1, 0xff, 0x00},
		TraceID: "0af7651916cd43dd8448eb211c80319c",
	}
}

// fixtureEpisodeRequest sets every field, to show each key on the wire.
func fixtureEpisodeRequest() *messages.EpisodeRequest {
	return &messages.EpisodeRequest{
		V: messages.Version, RunID: "run-7", EpisodeID: "ep-0003", GroupID: "grp-04", SampleIndex: 2, GroupSize: 8,
		Env: "game:GuessTheNumber-v0", EnvOptions: []byte(`{"max_turns":8}`), EnvSeed: new(uint64(0)),
		Prompt: "Guess a number between 1 and 20.", ChatTemplate: true, Label: "7",
		ChatTemplateName: messages.TemplateChatML, ChatTemplateKwargs: []byte(`{"enable_thinking":false}`),
		Sampling: messages.SamplingParams{
			Temperature: 0.7, TopP: 0.95, TopK: -1, MaxTokens: 256, Stop: []string{"</answer>"}, Seed: new(int64(-4242)),
			MinP: 0.05, PresencePenalty: 0.5, FrequencyPenalty: -0.5, RepetitionPenalty: 1.1, MinTokens: 2,
			StopTokenIDs: messages.Tokens{151643, 151645}, IgnoreEOS: true, SkipSpecialTokens: true, IncludeStopStrInOutput: true,
			StructuredOutputs: json.RawMessage(`{"json":{"type":"object"}}`),
		},
		MaxLength: 4096, MaxTurns: 8, SubmitTime: 1_700_000_004_000_000_000,
		SubmitVersion: 9, MaxStaleness: new(int32(-1)), StalePolicy: messages.StaleKeep,
		ObsStyle:  messages.ObsQwen3Game,
		Messages:  []messages.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Play."}},
		TaskIndex: 3, RolloutIndex: 5, PromptOverflow: messages.PromptOverflowTruncateLeft,
		TraceID: "0af7651916cd43dd8448eb211c80319c",
	}
}

// fixtureMinimalRequest sets only what validation requires, to show what omitempty leaves out.
func fixtureMinimalRequest() *messages.EpisodeRequest {
	return &messages.EpisodeRequest{
		V: messages.Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "math:gsm8k", MaxLength: 1024,
	}
}

// fixtureFirstStep is turn 0 of an episode: it carries the request and the prompt tokens.
func fixtureFirstStep() *messages.StepEvent {
	req := fixtureEpisodeRequest()
	req.MaxStaleness, req.StalePolicy = new(int32(2)), messages.StaleRestart
	return &messages.StepEvent{
		V: messages.Version, RunID: "run-7", EpisodeID: "ep-0003", Turn: 0, Attempt: 2, Request: 12_345_678_901,
		Run: "n0nce", Episode: req,
		PromptTokens: messages.Tokens{151644, 872, 198}, ActionTokens: messages.Tokens{20, 21},
		PromptMessages: []messages.ChatMessage{{Role: "user", Content: "Play."}},
		ActionLogprobs: messages.Logprobs{-0.5, -0.25}, ActionText: `\boxed{10}`,
		FeedbackText: "Too low.", FeedbackTokens: messages.Tokens{30},
		Reward: -0.5, Score: 0, FinishReason: "stop",
		ExtraLogs: map[string]float64{"turn_count": 1}, Info: map[string]string{"hint": "higher"},
		PromptTruncated: 4, Resumed: 1, EnvState: []byte(`{"target":13}`), Endpoint: "http://vllm-0:8000",
		PolicyVersion: 6, Restarts: 1, Stale: false, GenerateNanos: 1200, StepNanos: 300,
		TraceID: "0af7651916cd43dd8448eb211c80319c",
		Timings: messages.TurnTimings{Queue: 5_000_000, Tokenize: 150, Generate: 1000, Model: 900, Step: 250, Wall: 5_001_600},
	}
}

// fixtureEndMarker ends an episode without a model turn: no action tokens (msgpack nil).
func fixtureEndMarker() *messages.StepEvent {
	return &messages.StepEvent{
		V: messages.Version, EpisodeID: "ep-0003", Turn: 3, Done: true, Truncated: true, FinishReason: "length",
		Success: true, Stale: true,
	}
}

func fixturePolicyState() *messages.PolicyState {
	return &messages.PolicyState{
		V: messages.Version, Epoch: 3, Version: 12, Paused: true, OnPause: messages.OnPauseAbort, Time: 1_700_000_005_000_000_000,
	}
}

func fixtureWorkerStatus() *messages.WorkerStatus {
	return &messages.WorkerStatus{
		V: messages.Version, Kind: messages.WorkerLLM, ID: "llm-0", Epoch: 3, Version: 12, Paused: true, InFlight: 0, Held: 4,
		Endpoints: []messages.EndpointStatus{{URL: "http://10.0.0.7:8000", Healthy: true, InFlight: 0, Max: 64}},
	}
}

// TestWireFixtures checks that every fixture message encodes to its checked-in bytes, that the
// bytes decode back to the message, and that its .json holds the expected decoded form.
func TestWireFixtures(t *testing.T) {
	update := *updateFixtures || os.Getenv("ROLLFLEET_UPDATE_FIXTURES") != ""
	if update {
		if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, fx := range wireFixtures() {
		t.Run(fx.name, func(t *testing.T) {
			if err := fx.msg.(interface{ Validate() error }).Validate(); err != nil {
				t.Fatalf("fixture message is invalid: %v", err)
			}
			data, err := messages.Marshal(fx.msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fx.decode(data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, fx.msg) {
				t.Fatalf("round trip changed the message\n got %+v\nwant %+v", got, fx.msg)
			}
			view := fixtureJSON(t, map[string]any{"kind": fx.kind, "value": wireView(t, reflect.ValueOf(fx.msg))})
			binPath := filepath.Join(fixtureDir, fx.name+".msgpack")
			jsonPath := filepath.Join(fixtureDir, fx.name+".json")
			if update {
				for path, b := range map[string][]byte{binPath: data, jsonPath: view} {
					if err := os.WriteFile(path, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			for path, want := range map[string][]byte{binPath: data, jsonPath: view} {
				have, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (rewrite the fixtures with -update)", err)
				}
				if !bytes.Equal(have, want) {
					t.Errorf("%s differs from what the encoder writes now; if the change is meant, rewrite the fixtures with -update and update every decoder of the wire format", path)
				}
			}
		})
	}
}

// fixtureJSON writes v indented, keeping chat markup such as <|im_end|> readable.
func fixtureJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wireNames are the decoded names of the fields of the messages that have no JSON form: the
// names of their validation errors where those name them.
var wireNames = map[string]string{
	"EpisodeRequest.RunID": "run_id", "EpisodeRequest.EpisodeID": "episode_id", "EpisodeRequest.GroupID": "group_id",
	"EpisodeRequest.SampleIndex": "sample_index", "EpisodeRequest.GroupSize": "group_size", "EpisodeRequest.Env": "env",
	"EpisodeRequest.EnvOptions": "env_options", "EpisodeRequest.EnvSeed": "env_seed", "EpisodeRequest.Prompt": "prompt",
	"EpisodeRequest.ChatTemplate": "chat_template", "EpisodeRequest.ChatTemplateName": "chat_template_name",
	"EpisodeRequest.ChatTemplateKwargs": "chat_template_kwargs", "EpisodeRequest.Label": "label", "EpisodeRequest.Sampling": "sampling",
	"EpisodeRequest.MaxLength": "max_length", "EpisodeRequest.MaxTurns": "max_turns",
	"EpisodeRequest.SubmitTime": "submit_time_ns", "EpisodeRequest.SubmitVersion": "submit_policy_version",
	"EpisodeRequest.MaxStaleness": "max_staleness", "EpisodeRequest.StalePolicy": "stale_policy",
	"EpisodeRequest.ObsStyle": "obs_style", "EpisodeRequest.Messages": "messages", "EpisodeRequest.TaskIndex": "task_index",
	"EpisodeRequest.RolloutIndex": "rollout_index", "EpisodeRequest.PromptOverflow": "prompt_overflow", "EpisodeRequest.TraceID": "trace_id",

	"StepEvent.RunID": "run_id", "StepEvent.EpisodeID": "episode_id", "StepEvent.Turn": "turn",
	"StepEvent.Attempt": "attempt", "StepEvent.Request": "request", "StepEvent.Run": "run", "StepEvent.Episode": "episode",
	"StepEvent.PromptTokens": "prompt_tokens", "StepEvent.PromptMessages": "prompt_messages", "StepEvent.ActionTokens": "action_tokens",
	"StepEvent.ActionLogprobs": "action_logprobs", "StepEvent.ActionText": "action_text",
	"StepEvent.FeedbackText": "feedback_text", "StepEvent.FeedbackTokens": "feedback_tokens",
	"StepEvent.Reward": "reward", "StepEvent.Score": "score", "StepEvent.Done": "done", "StepEvent.Truncated": "truncated",
	"StepEvent.FinishReason": "finish_reason", "StepEvent.ExtraLogs": "extra_logs", "StepEvent.Info": "info",
	"StepEvent.Success": "success", "StepEvent.PromptTruncated": "prompt_truncated_tokens", "StepEvent.Resumed": "resumed",
	"StepEvent.EnvState": "env_state", "StepEvent.Endpoint": "endpoint", "StepEvent.PolicyVersion": "policy_version",
	"StepEvent.Restarts": "restarts", "StepEvent.Stale": "stale", "StepEvent.GenerateNanos": "generate_ns",
	"StepEvent.StepNanos": "step_ns", "StepEvent.Error": "error", "StepEvent.FailureKind": "failure_kind",
	"StepEvent.TraceID": "trace_id", "StepEvent.Timings": "timings",
}

var (
	tokensType   = reflect.TypeFor[messages.Tokens]()
	logprobsType = reflect.TypeFor[messages.Logprobs]()
	rangesType   = reflect.TypeFor[messages.Ranges]()
	bytesType    = reflect.TypeFor[[]byte]()
	rawJSONType  = reflect.TypeFor[json.RawMessage]()
)

// wireView is the decoded form of v that other languages compare their decoders' results with:
// every field present under its JSON name (wireNames for types without one), the version left
// out (decoders check it), nil pointers as null, nil slices and maps as [] and {}, token ids and
// ranges as numbers, log-probabilities as the float64 values of the float32s (so that the JSON
// decimal reads back as exactly that value), and byte strings in base64.
func wireView(t *testing.T, v reflect.Value) any {
	t.Helper()
	switch v.Type() {
	case tokensType:
		out := make([]int64, v.Len())
		for i := range out {
			out[i] = v.Index(i).Int()
		}
		return out
	case logprobsType:
		out := make([]float64, v.Len())
		for i := range out {
			out[i] = v.Index(i).Float() // float32 to float64 is exact
		}
		return out
	case rangesType:
		out := make([][2]int64, v.Len())
		for i := range out {
			out[i] = [2]int64{v.Index(i).Field(0).Int(), v.Index(i).Field(1).Int()}
		}
		return out
	case bytesType, rawJSONType:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return wireView(t, v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Tag.Get("msgpack") == "v" {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = wireNames[v.Type().Name()+"."+f.Name]
			}
			if name == "" || name == "-" {
				t.Fatalf("%s.%s has no decoded name: add it to wireNames and to the decoders", v.Type().Name(), f.Name)
			}
			out[name] = wireView(t, v.Field(i))
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = wireView(t, v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = wireView(t, it.Value())
		}
		return out
	}
	return v.Interface()
}
