package chaos

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rollfleet/rollfleet/messages"
)

// The fixtures are encoded by the messages package, the fleet's own
// encoder: the harness's decoder must read exactly what the fleet writes.

func fixtureTrajectory() *messages.Trajectory {
	seed := uint64(1) << 63 // needs all 64 bits
	return &messages.Trajectory{
		V: messages.Version, RunID: "run-1", EpisodeID: "ep-1", GroupID: "g-1", SampleIndex: 2, GroupSize: 4,
		Env: "game:GuessTheNumber-v0", EnvSeed: &seed, Prompt: "", Label: "l",
		ObservationTokens: messages.Tokens{1, 2, 300000, 4, 5, 6, -1 << 31},
		ActionRanges:      messages.Ranges{{Start: 2, End: 4}, {Start: 5, End: 6}},
		RolloutLogProbs:   messages.Logprobs{0, 0, -0.5, -1e-7, 0, float32(math.Inf(-1)), 0},
		Reward:            1.25, Scores: -3, ExtraLogs: map[string]float64{"turn_count": 2, "x": 0.5},
		Truncated: true, Turns: 2, StepRewards: []float64{0.25, 1}, FinishReason: "length",
		SubmitTime: 1 << 60, DoneTime: 7, GenerateNanos: 8, ObsStyle: "chat", Success: true, Resumed: 3,
		Info: map[string]string{"a": "b"}, TaskIndex: 9,
	}
}

func TestDecodeTrajectory(t *testing.T) {
	in := fixtureTrajectory()
	data, err := messages.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTrajectory(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &Trajectory{
		V: 1, RunID: "run-1", EpisodeID: "ep-1", GroupID: "g-1", SampleIndex: 2, GroupSize: 4, Env: in.Env, EnvSeed: in.EnvSeed,
		ObservationTokens: []int32(in.ObservationTokens), ActionRanges: []Span{{2, 4}, {5, 6}},
		RolloutLogProbs: []float32(in.RolloutLogProbs), Reward: 1.25, Scores: -3, ExtraLogs: in.ExtraLogs,
		Truncated: true, Turns: 2, StepRewards: in.StepRewards, FinishReason: "length", ObsStyle: "chat",
		Success: true, Resumed: 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
	}

	// A single-turn style with samples, and zero values left out.
	in = &messages.Trajectory{V: messages.Version, EpisodeID: "ep-2", GroupID: "g", GroupSize: 1, Env: "e",
		Turns: 2, StepRewards: []float64{0, 1}, Reward: 1, ObsStyle: "concat", Samples: []messages.Sample{
			{ObservationTokens: messages.Tokens{7, 8, 9}, ActionRanges: messages.Ranges{{Start: 1, End: 3}}, RolloutLogProbs: messages.Logprobs{0, -1, -2}, Reward: 0, Return: 1},
			{ObservationTokens: messages.Tokens{7, 9}, ActionRanges: messages.Ranges{{Start: 1, End: 2}}, RolloutLogProbs: messages.Logprobs{0, -3}, Reward: 1, Return: 1},
		}}
	data, err = messages.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = DecodeTrajectory(data); err != nil {
		t.Fatal(err)
	}
	wantSamples := []Sample{
		{ObservationTokens: []int32{7, 8, 9}, ActionRanges: []Span{{1, 3}}, RolloutLogProbs: []float32{0, -1, -2}, Reward: 0, Return: 1},
		{ObservationTokens: []int32{7, 9}, ActionRanges: []Span{{1, 2}}, RolloutLogProbs: []float32{0, -3}, Reward: 1, Return: 1},
	}
	if !reflect.DeepEqual(got.Samples, wantSamples) || got.EnvSeed != nil || got.Resumed != 0 || got.ObservationTokens != nil {
		t.Errorf("decoded %+v", got)
	}
	if err := checkInvariants(got); err != nil {
		t.Errorf("valid concat trajectory: %v", err)
	}
}

func TestDecodeFailureAndStep(t *testing.T) {
	data, err := messages.Marshal(&messages.Failure{V: messages.Version, RunID: "run-1", EpisodeID: "ep", Kind: "invariant",
		Reason: "why", Subject: "rf.steps.run-1.1.1.5.13.ep", Turn: 3, Time: 5, Payload: []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFailure(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Failure{V: 1, RunID: "run-1", EpisodeID: "ep", Kind: "invariant", Reason: "why", Subject: "rf.steps.run-1.1.1.5.13.ep", Turn: 3}); !reflect.DeepEqual(f, want) {
		t.Errorf("failure %+v, want %+v", f, want)
	}

	seed := uint64(42)
	req := &messages.EpisodeRequest{V: messages.Version, EpisodeID: "ep", GroupID: "g", GroupSize: 1, Env: "e",
		EnvSeed: &seed, MaxLength: 10, Sampling: messages.SamplingParams{Temperature: 1}}
	data, err = messages.Marshal(&messages.StepEvent{V: messages.Version, RunID: "run-1", EpisodeID: "ep", Turn: 0, Attempt: 3, Episode: req,
		PromptTokens: messages.Tokens{1, 2}, ActionTokens: messages.Tokens{3}, ActionLogprobs: messages.Logprobs{-0.5},
		FeedbackTokens: messages.Tokens{4, 5}, Reward: 0.5, Done: true, Truncated: true, Resumed: 2, Error: "e",
		EnvState: []byte(`{"x":1}`), ExtraLogs: map[string]float64{"a": 1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeStep(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &Step{V: 1, RunID: "run-1", EpisodeID: "ep", Attempt: 3, HasEpisode: true, EnvSeed: &seed, PromptTokens: []int32{1, 2},
		ActionTokens: []int32{3}, ActionLogprobs: []float32{-0.5}, FeedbackTokens: []int32{4, 5}, Reward: 0.5,
		Done: true, Truncated: true, Resumed: 2, Error: "e"}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("step %+v, want %+v", s, want)
	}
}

// TestDecodeGroup reads a group as the collector publishes it: its run and
// the episodes of its trajectories; a member that does not decode makes the
// group undecodable.
func TestDecodeGroup(t *testing.T) {
	a, b := *fixtureTrajectory(), *fixtureTrajectory()
	b.EpisodeID, b.SampleIndex = "ep-2", 3
	in := &messages.Group{V: messages.Version, RunID: "run-1", GroupID: "g-1", Env: a.Env, MeanScore: 0.5, Trajectories: []messages.Trajectory{a, b}}
	data, err := messages.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	g, err := DecodeGroup(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &Group{V: 1, RunID: "run-1", GroupID: "g-1", Env: a.Env, MeanScore: 0.5, Episodes: []string{"ep-1", "ep-2"}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("group %+v, want %+v", g, want)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["t"].([]any)[1].(map[string]any)["ot"] = "not packed tokens"
	bad, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeGroup(bad); !errors.Is(err, errWire) || !strings.Contains(err.Error(), "t[1].ot") {
		t.Errorf("a group with a broken member: %v", err)
	}
}

// TestDecodeRejects feeds the decoder what the wire format does not allow.
func TestDecodeRejects(t *testing.T) {
	good, err := messages.Marshal(fixtureTrajectory())
	if err != nil {
		t.Fatal(err)
	}
	enc := func(v any) []byte {
		var b bytes.Buffer
		if err := msgpack.NewEncoder(&b).Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for name, data := range map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)-3],
		"trailing bytes": append(append([]byte(nil), good...), 0xc0),
		"an array":       enc([]int{1, 2}),
		"no version":     enc(map[string]any{"id": "x"}),
		"newer version":  enc(map[string]any{"v": 2, "id": "x"}),
		"id a number":    enc(map[string]any{"v": 1, "id": 5}),
		"turns a string": enc(map[string]any{"v": 1, "tn": "2"}),
		"tokens odd bin": enc(map[string]any{"v": 1, "ot": []byte{1, 2, 3}}),
		"tokens array":   enc(map[string]any{"v": 1, "ot": []int{1, 2}}),
		"ranges 1 word":  enc(map[string]any{"v": 1, "ar": []byte{1, 0, 0, 0}}),
		"sample no map":  enc(map[string]any{"v": 1, "sm": []any{1}}),
		"seed negative":  enc(map[string]any{"v": 1, "es": -1}),
	} {
		if _, err := DecodeTrajectory(data); err == nil || !errors.Is(err, errWire) {
			t.Errorf("%s: err %v, want errWire", name, err)
		}
	}
}

// validChat is a small chat trajectory that keeps every invariant.
func validChat() *Trajectory {
	seed := uint64(1)
	return &Trajectory{V: 1, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "game:x", EnvSeed: &seed,
		ObservationTokens: []int32{1, 2, 3, 4, 5, 6, 7},
		ActionRanges:      []Span{{2, 4}, {5, 6}},
		RolloutLogProbs:   []float32{0, 0, -1, -0.5, 0, -2, 0},
		Turns:             2, StepRewards: []float64{0.5, 0.25}, Reward: 0.75}
}

func TestInvariants(t *testing.T) {
	if err := checkInvariants(validChat()); err != nil {
		t.Fatalf("valid trajectory: %v", err)
	}
	for name, mutate := range map[string]func(t *Trajectory){
		"negative token id":      func(t *Trajectory) { t.ObservationTokens[0] = -3 },
		"positive logprob":       func(t *Trajectory) { t.RolloutLogProbs[2] = 0.5 },
		"NaN logprob":            func(t *Trajectory) { t.RolloutLogProbs[3] = float32(math.NaN()) },
		"infinite logprob":       func(t *Trajectory) { t.RolloutLogProbs[5] = float32(math.Inf(-1)) },
		"logprob outside":        func(t *Trajectory) { t.RolloutLogProbs[4] = -1 },
		"logprob after the last": func(t *Trajectory) { t.RolloutLogProbs[6] = -1 },
		"one logprob short":      func(t *Trajectory) { t.RolloutLogProbs = t.RolloutLogProbs[:6] },
		"empty range":            func(t *Trajectory) { t.ActionRanges[1] = Span{5, 5} },
		"overlapping ranges":     func(t *Trajectory) { t.ActionRanges[1] = Span{3, 6} },
		"range past the end":     func(t *Trajectory) { t.ActionRanges[1] = Span{5, 8} },
		"a range short":          func(t *Trajectory) { t.ActionRanges = t.ActionRanges[:1] },
		"a step reward short":    func(t *Trajectory) { t.StepRewards = t.StepRewards[:1] },
		"reward not the sum":     func(t *Trajectory) { t.Reward = 1e6 },
		"reward infinite":        func(t *Trajectory) { t.Reward, t.StepRewards = math.Inf(1), []float64{math.Inf(1), 0} },
		"samples in chat":        func(t *Trajectory) { t.Samples = []Sample{{}} },
		"no episode id":          func(t *Trajectory) { t.EpisodeID = "" },
		"sample outside group":   func(t *Trajectory) { t.SampleIndex = 1 },
		"unknown style":          func(t *Trajectory) { t.ObsStyle = "prose" },
		"concat with tokens":     func(t *Trajectory) { t.ObsStyle = "concat" },
	} {
		tr := validChat()
		mutate(tr)
		if err := checkInvariants(tr); err == nil {
			t.Errorf("%s: not caught", name)
		}
	}
	single := func() *Trajectory {
		return &Trajectory{V: 1, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "game:x", ObsStyle: "qwen3_game",
			Turns: 2, StepRewards: []float64{0.5, 1}, Reward: 1.5, Samples: []Sample{
				{ObservationTokens: []int32{1, 2}, ActionRanges: []Span{{1, 2}}, RolloutLogProbs: []float32{0, -1}, Reward: 0.5, Return: 1.5},
				{ObservationTokens: []int32{1, 2}, ActionRanges: []Span{{1, 2}}, RolloutLogProbs: []float32{0, -1}, Reward: 1, Return: 1},
			}}
	}
	if err := checkInvariants(single()); err != nil {
		t.Fatalf("valid single-turn trajectory: %v", err)
	}
	for name, mutate := range map[string]func(t *Trajectory){
		"wrong return":        func(t *Trajectory) { t.Samples[0].Return = 1 },
		"wrong sample reward": func(t *Trajectory) { t.Samples[1].Reward = 0 },
		"two ranges":          func(t *Trajectory) { t.Samples[0].ActionRanges = []Span{{0, 1}, {1, 2}} },
		"sample logprob":      func(t *Trajectory) { t.Samples[1].RolloutLogProbs[1] = 2 },
		"a sample short":      func(t *Trajectory) { t.Samples = t.Samples[:1] },
	} {
		tr := single()
		mutate(tr)
		if err := checkInvariants(tr); err == nil {
			t.Errorf("single-turn %s: not caught", name)
		}
	}
}

// TestForgedSteps checks that every forgery is a well-formed step event for
// the episode, after the honest step it follows. Whether the fleet rejects
// it at its decoder or in assembly is the fleet's business.
func TestForgedSteps(t *testing.T) {
	for v, name := range forgeries {
		steps := forgedSteps("chaos-1", "chaos-1-000001", 7, 2, 3, v)
		if len(steps) == 0 {
			t.Fatalf("%s: no steps", name)
		}
		for _, s := range steps {
			data, err := messages.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			mine, err := DecodeStep(data)
			if err != nil {
				t.Fatal(err)
			}
			if mine.EpisodeID != "chaos-1-000001" || mine.RunID != "chaos-1" || mine.Request != 7 || mine.Turn <= 3 || mine.Attempt < 2 || len(mine.ActionTokens) == 0 ||
				len(mine.ActionTokens) != len(mine.ActionLogprobs) {
				t.Errorf("%s: %+v is not a step after attempt 2 turn 3", name, mine)
			}
		}
	}
	if !strings.Contains(forgeries[3], "attempt") || forgedSteps("r", "e", 7, 2, 3, 3)[0].Attempt != 3 {
		t.Error("the attempt forgery does not use a higher attempt")
	}
	if s := forgedSteps("r", "e", 7, 2, 3, 4); len(s) != 2 || s[0].Turn != 5 || s[1].Turn != 4 {
		t.Error("the out-of-order forgery does not publish turn 5 before turn 4")
	}
}
