package messages

import (
	"errors"
	"math"
	"strings"
	"testing"
)

type validator interface{ Validate() error }

// with returns a fresh sample changed by f.
func with[T any](sample func() *T, f func(*T)) *T {
	v := sample()
	f(v)
	return v
}

var (
	nan     = math.NaN()
	inf     = math.Inf(1)
	longID  = strings.Repeat("x", MaxIDLength+1)
	negZero = math.Copysign(0, -1)
)

func TestValidateAcceptsSamples(t *testing.T) {
	for name, v := range map[string]validator{
		"EpisodeRequest":           sampleEpisode(),
		"EpisodeRequest/minimal":   &EpisodeRequest{V: Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "x", MaxLength: 1},
		"EpisodeRequest/options":   with(sampleEpisode, func(r *EpisodeRequest) { r.EnvOptions = []byte(" \n{}") }),
		"EpisodeRequest/max id":    with(sampleEpisode, func(r *EpisodeRequest) { r.EpisodeID = longID[1:] }),
		"EpisodeRequest/max run":   with(sampleEpisode, func(r *EpisodeRequest) { r.RunID = longID[1:] }),
		"EpisodeRequest/no run":    with(sampleEpisode, func(r *EpisodeRequest) { r.RunID = "" }),
		"SamplingParams/edges":     &SamplingParams{Temperature: 0, TopP: 1, TopK: -1},
		"SamplingParams/zero":      &SamplingParams{},
		"GenerateRequest":          sampleGenerateRequest(),
		"GenerateReply":            sampleGenerateReply(),
		"GenerateReply/error":      &GenerateReply{V: Version, Error: "too long", Code: CodeContextLength},
		"TokenizeRequest/messages": sampleTokenizeRequest(),
		"TokenizeRequest/text":     &TokenizeRequest{V: Version, Text: "x"},
		// An env's empty answer is still a user turn of the template.
		"TokenizeRequest/empty turn": &TokenizeRequest{V: Version, Turn: TurnNext, ChatTemplateKwargs: []byte(`{"enable_thinking":false}`)},
		"TokenizeReply":              sampleTokenizeReply(),
		"TokenizeReply/empty":        &TokenizeReply{V: Version},
		"StepEvent":                  sampleStep(),
		"StepEvent/later turn":       with(sampleStep, func(e *StepEvent) { e.Turn, e.Episode, e.PromptTokens = 1, nil, nil }),
		"StepEvent/end marker":       &StepEvent{V: Version, EpisodeID: "e", Turn: 5, Done: true},
		"StepEvent/end at turn 0": with(sampleStep, func(e *StepEvent) {
			e.ActionTokens, e.ActionLogprobs, e.Done = nil, nil, true
		}),
		"StepEvent/failed": &StepEvent{V: Version, EpisodeID: "e", Error: "boom", Reward: nan},
		"Trajectory":       sampleTrajectory(),
		"Trajectory/exact float sum": with(sampleTrajectory, func(tr *Trajectory) {
			tr.StepRewards = []float64{0.1, 0.2}
			tr.Reward = tr.StepRewards[0] + tr.StepRewards[1] // 0.30000000000000004
		}),
		"Trajectory/-0 outside actions": with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[0] = float32(negZero) }),
		"Trajectory/adjacent ranges": with(sampleTrajectory, func(tr *Trajectory) {
			tr.ActionRanges = Ranges{{3, 5}, {5, 9}}
			tr.RolloutLogProbs = Logprobs{0, 0, 0, -1, -1, -1, -1, -1, -1}
		}),
		"Group":   sampleGroup(),
		"Failure": sampleFailure(),
	} {
		if err := v.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		field string // the path the error must name
		msg   validator
	}{
		// EpisodeRequest
		{"EpisodeRequest.v", with(sampleEpisode, func(r *EpisodeRequest) { r.V = 0 })},
		{"EpisodeRequest.v", with(sampleEpisode, func(r *EpisodeRequest) { r.V = Version + 1 })},
		{"EpisodeRequest.run_id", with(sampleEpisode, func(r *EpisodeRequest) { r.RunID = longID })},
		{"EpisodeRequest.episode_id", with(sampleEpisode, func(r *EpisodeRequest) { r.EpisodeID = "" })},
		{"EpisodeRequest.episode_id", with(sampleEpisode, func(r *EpisodeRequest) { r.EpisodeID = longID })},
		{"EpisodeRequest.group_id", with(sampleEpisode, func(r *EpisodeRequest) { r.GroupID = "" })},
		{"EpisodeRequest.group_id", with(sampleEpisode, func(r *EpisodeRequest) { r.GroupID = longID })},
		{"EpisodeRequest.env", with(sampleEpisode, func(r *EpisodeRequest) { r.Env = "" })},
		{"EpisodeRequest.group_size", with(sampleEpisode, func(r *EpisodeRequest) { r.GroupSize = 0 })},
		{"EpisodeRequest.sample_index", with(sampleEpisode, func(r *EpisodeRequest) { r.SampleIndex = -1 })},
		{"EpisodeRequest.sample_index", with(sampleEpisode, func(r *EpisodeRequest) { r.SampleIndex = r.GroupSize })},
		{"EpisodeRequest.env_options", with(sampleEpisode, func(r *EpisodeRequest) { r.EnvOptions = []byte(`[1]`) })},
		{"EpisodeRequest.env_options", with(sampleEpisode, func(r *EpisodeRequest) { r.EnvOptions = []byte(`{"a":`) })},
		{"EpisodeRequest.env_options", with(sampleEpisode, func(r *EpisodeRequest) { r.EnvOptions = []byte(`"x"`) })},
		{"EpisodeRequest.env_options", with(sampleEpisode, func(r *EpisodeRequest) { r.EnvOptions = []byte(" ") })},
		{"EpisodeRequest.max_length", with(sampleEpisode, func(r *EpisodeRequest) { r.MaxLength = 0 })},
		{"EpisodeRequest.max_turns", with(sampleEpisode, func(r *EpisodeRequest) { r.MaxTurns = -1 })},
		{"EpisodeRequest.sampling.temperature", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.Temperature = -0.1 })},
		{"EpisodeRequest.sampling.temperature", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.Temperature = nan })},
		{"EpisodeRequest.sampling.temperature", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.Temperature = inf })},
		{"EpisodeRequest.sampling.structured_outputs", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.StructuredOutputs = []byte(`[1]`) })},
		{"EpisodeRequest.sampling.structured_outputs", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.StructuredOutputs = []byte(`{"json": {}, "choice": ["a"]}`) })},
		{"EpisodeRequest.sampling.structured_outputs", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.StructuredOutputs = []byte(`{"xml": {}}`) })},
		{"EpisodeRequest.sampling.structured_outputs", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.StructuredOutputs = []byte(`{"json": null}`) })},
		{"EpisodeRequest.sampling.top_p", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.TopP = 1.5 })},
		{"EpisodeRequest.sampling.top_p", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.TopP = -0.5 })},
		{"EpisodeRequest.sampling.top_p", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.TopP = nan })},
		{"EpisodeRequest.sampling.top_k", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.TopK = -2 })},
		{"EpisodeRequest.sampling.max_tokens", with(sampleEpisode, func(r *EpisodeRequest) { r.Sampling.MaxTokens = -1 })},
		{"SamplingParams.top_k", &SamplingParams{TopK: -5}},

		// GenerateRequest
		{"GenerateRequest.v", with(sampleGenerateRequest, func(r *GenerateRequest) { r.V = 0 })},
		{"GenerateRequest.episode_id", with(sampleGenerateRequest, func(r *GenerateRequest) { r.EpisodeID = "" })},
		{"GenerateRequest.turn", with(sampleGenerateRequest, func(r *GenerateRequest) { r.Turn = -1 })},
		{"GenerateRequest.prompt", with(sampleGenerateRequest, func(r *GenerateRequest) { r.Prompt = nil })},
		{"GenerateRequest.sampling.top_p", with(sampleGenerateRequest, func(r *GenerateRequest) { r.Sampling.TopP = 2 })},
		{"GenerateRequest.max_tokens", with(sampleGenerateRequest, func(r *GenerateRequest) { r.MaxTokens = 0 })},

		// GenerateReply
		{"GenerateReply.v", with(sampleGenerateReply, func(r *GenerateReply) { r.V = 9 })},
		{"GenerateReply.tokens", with(sampleGenerateReply, func(r *GenerateReply) { r.Tokens, r.Logprobs = nil, nil })},
		{"GenerateReply.logprobs", with(sampleGenerateReply, func(r *GenerateReply) { r.Logprobs = r.Logprobs[:2] })},
		{"GenerateReply.logprobs[1]", with(sampleGenerateReply, func(r *GenerateReply) { r.Logprobs[1] = float32(nan) })},
		{"GenerateReply.logprobs[2]", with(sampleGenerateReply, func(r *GenerateReply) { r.Logprobs[2] = float32(math.Inf(-1)) })},
		{"GenerateReply.finish_reason", with(sampleGenerateReply, func(r *GenerateReply) { r.FinishReason = "" })},
		{"GenerateReply.code", &GenerateReply{V: Version, Error: "boom"}},

		// TokenizeRequest
		{"TokenizeRequest.v", with(sampleTokenizeRequest, func(r *TokenizeRequest) { r.V = 0 })},
		{"TokenizeRequest.episode_id", with(sampleTokenizeRequest, func(r *TokenizeRequest) { r.EpisodeID = longID })},
		{"TokenizeRequest.text", &TokenizeRequest{V: Version}},
		{"TokenizeRequest.messages", with(sampleTokenizeRequest, func(r *TokenizeRequest) { r.Text = "also" })},
		{"TokenizeRequest.messages[1].role", with(sampleTokenizeRequest, func(r *TokenizeRequest) { r.Messages[1].Role = "" })},
		{"TokenizeRequest.turn", &TokenizeRequest{V: Version, Text: "x", Turn: TurnFinal + 1}},
		{"TokenizeRequest.messages", with(sampleTokenizeRequest, func(r *TokenizeRequest) { r.Turn = TurnNext })},
		{"TokenizeRequest.chat_template_kwargs", &TokenizeRequest{V: Version, Text: "x", Turn: TurnNext, ChatTemplateKwargs: []byte(`[1]`)}},

		// TokenizeReply
		{"TokenizeReply.v", &TokenizeReply{}},
		{"TokenizeReply.code", &TokenizeReply{V: Version, Error: "boom"}},

		// StepEvent
		{"StepEvent.v", with(sampleStep, func(e *StepEvent) { e.V = 0 })},
		{"StepEvent.episode_id", with(sampleStep, func(e *StepEvent) { e.EpisodeID = "" })},
		{"StepEvent.episode_id", &StepEvent{V: Version, Error: "failures still name their episode"}},
		{"StepEvent.turn", with(sampleStep, func(e *StepEvent) { e.Turn = -1 })},
		{"StepEvent.episode", with(sampleStep, func(e *StepEvent) { e.Episode = nil })},
		{"StepEvent.prompt_tokens", with(sampleStep, func(e *StepEvent) { e.PromptTokens = nil })},
		{"StepEvent.episode.max_length", with(sampleStep, func(e *StepEvent) { e.Episode.MaxLength = 0 })},
		{"StepEvent.episode.sampling.top_k", with(sampleStep, func(e *StepEvent) { e.Episode.Sampling.TopK = -3 })},
		{"StepEvent.episode.episode_id", with(sampleStep, func(e *StepEvent) { e.Episode.EpisodeID = "other" })},
		{"StepEvent.action_logprobs", with(sampleStep, func(e *StepEvent) { e.ActionLogprobs = e.ActionLogprobs[:1] })},
		{"StepEvent.action_tokens", with(sampleStep, func(e *StepEvent) { e.ActionTokens, e.ActionLogprobs = nil, nil })},
		{"StepEvent.action_logprobs[0]", with(sampleStep, func(e *StepEvent) { e.ActionLogprobs[0] = float32(inf) })},
		{"StepEvent.action_logprobs[0]", with(sampleStep, func(e *StepEvent) { e.ActionLogprobs[0] = 0.25 })},
		{"StepEvent.action_tokens[0]", with(sampleStep, func(e *StepEvent) { e.ActionTokens[0] = -1 })},
		{"StepEvent.prompt_tokens[0]", with(sampleStep, func(e *StepEvent) { e.PromptTokens[0] = -5 })},
		{"StepEvent.feedback_tokens[0]", with(sampleStep, func(e *StepEvent) { e.FeedbackTokens = Tokens{-2} })},
		{"StepEvent.reward", with(sampleStep, func(e *StepEvent) { e.Reward = nan })},
		{"StepEvent.score", with(sampleStep, func(e *StepEvent) { e.Score = -inf })},
		{`StepEvent.extra_logs["turn_count"]`, with(sampleStep, func(e *StepEvent) { e.ExtraLogs["turn_count"] = nan })},

		// Trajectory
		{"Trajectory.v", with(sampleTrajectory, func(tr *Trajectory) { tr.V = 0 })},
		{"Trajectory.episode_id", with(sampleTrajectory, func(tr *Trajectory) { tr.EpisodeID = "" })},
		{"Trajectory.group_id", with(sampleTrajectory, func(tr *Trajectory) { tr.GroupID = longID })},
		{"Trajectory.env", with(sampleTrajectory, func(tr *Trajectory) { tr.Env = "" })},
		{"Trajectory.group_size", with(sampleTrajectory, func(tr *Trajectory) { tr.GroupSize = -1 })},
		{"Trajectory.sample_index", with(sampleTrajectory, func(tr *Trajectory) { tr.SampleIndex = 4 })},
		{"Trajectory.rollout_log_probs", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs = tr.RolloutLogProbs[:8] })},
		{"Trajectory.turns", with(sampleTrajectory, func(tr *Trajectory) { tr.Turns = -1 })},
		{"Trajectory.action_ranges", with(sampleTrajectory, func(tr *Trajectory) { tr.Turns = 3 })},
		{"Trajectory.policy_versions", with(sampleTrajectory, func(tr *Trajectory) { tr.PolicyVersions = []int64{5} })},
		{"Trajectory.staleness", with(sampleTrajectory, func(tr *Trajectory) { tr.PolicyVersions = []int64{5, 7} })},
		{"Trajectory.staleness", with(sampleTrajectory, func(tr *Trajectory) { tr.Staleness = 1 })},
		{"Trajectory.staleness", with(sampleTrajectory, func(tr *Trajectory) { tr.PolicyVersions, tr.Staleness = nil, 1 })},
		{"Trajectory.restarts", with(sampleTrajectory, func(tr *Trajectory) { tr.Restarts = -1 })},
		{"EpisodeRequest.stale_policy", with(sampleEpisode, func(r *EpisodeRequest) { r.StalePolicy = "forget" })},
		{"Trajectory.step_rewards", with(sampleTrajectory, func(tr *Trajectory) { tr.StepRewards = append(tr.StepRewards, 0) })},
		{"Trajectory.action_ranges[1]", with(sampleTrajectory, func(tr *Trajectory) { tr.ActionRanges[1] = Range{6, 6} })},
		{"Trajectory.action_ranges[1]", with(sampleTrajectory, func(tr *Trajectory) { tr.ActionRanges[1] = Range{7, 6} })},
		{"Trajectory.action_ranges[0]", with(sampleTrajectory, func(tr *Trajectory) { tr.ActionRanges[0] = Range{-1, 5} })},
		{"Trajectory.action_ranges[1]", with(sampleTrajectory, func(tr *Trajectory) { tr.ActionRanges[1] = Range{4, 7} })},
		{"Trajectory.action_ranges[1]", with(sampleTrajectory, func(tr *Trajectory) {
			tr.ActionRanges = Ranges{{6, 7}, {3, 5}} // unsorted
		})},
		{"Trajectory.action_ranges[1]", with(sampleTrajectory, func(tr *Trajectory) { tr.ActionRanges[1] = Range{6, 10} })},
		{"Trajectory.rollout_log_probs[0]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[0] = -0.1 })},
		{"Trajectory.rollout_log_probs[5]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[5] = 1e-45 })},
		{"Trajectory.rollout_log_probs[8]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[8] = float32(nan) })},
		{"Trajectory.rollout_log_probs[3]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[3] = 0.5 })},
		{"Trajectory.observation_tokens[2]", with(sampleTrajectory, func(tr *Trajectory) { tr.ObservationTokens[2] = -7 })},
		{"Trajectory.rollout_log_probs[4]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[4] = float32(nan) })},
		{"Trajectory.rollout_log_probs[6]", with(sampleTrajectory, func(tr *Trajectory) { tr.RolloutLogProbs[6] = float32(-inf) })},
		{"Trajectory.reward", with(sampleTrajectory, func(tr *Trajectory) { tr.Reward = 2 })},
		{"Trajectory.reward", with(sampleTrajectory, func(tr *Trajectory) {
			tr.StepRewards, tr.Reward = []float64{0.1, 0.2}, 0.3 // 0.1+0.2 != 0.3 in float64
		})},
		{"Trajectory.reward", with(sampleTrajectory, func(tr *Trajectory) { tr.Reward, tr.StepRewards[1] = nan, nan })},
		{"Trajectory.scores", with(sampleTrajectory, func(tr *Trajectory) { tr.Scores = inf })},
		{`Trajectory.extra_logs["dummy_scores"]`, with(sampleTrajectory, func(tr *Trajectory) { tr.ExtraLogs["dummy_scores"] = -inf })},

		// Group
		{"Group.v", with(sampleGroup, func(g *Group) { g.V = 0 })},
		{"Group.group_id", with(sampleGroup, func(g *Group) { g.GroupID = "" })},
		{"Group.env", with(sampleGroup, func(g *Group) { g.Env = "" })},
		{"Group.mean_score", with(sampleGroup, func(g *Group) { g.MeanScore = nan })},
		{"Group.trajectories", with(sampleGroup, func(g *Group) { g.Trajectories = nil })},
		{"Group.trajectories[1].group_id", with(sampleGroup, func(g *Group) { g.Trajectories[1].GroupID = "other" })},
		{"Group.trajectories[1].env", with(sampleGroup, func(g *Group) { g.Trajectories[1].Env = "other" })},
		{"Group.trajectories[0].group_size", with(sampleGroup, func(g *Group) { g.Trajectories[0].GroupSize = 3 })},
		{"Group.trajectories[0].group_size", with(sampleGroup, func(g *Group) { g.Trajectories = g.Trajectories[1:] })},
		{"Group.trajectories[1].sample_index", with(sampleGroup, func(g *Group) { g.Trajectories[1].SampleIndex = 0 })},
		{"Group.trajectories[1].reward", with(sampleGroup, func(g *Group) { g.Trajectories[1].Reward = 5 })},

		// Failure
		{"Failure.v", with(sampleFailure, func(f *Failure) { f.V = 0 })},
		{"Failure.kind", with(sampleFailure, func(f *Failure) { f.Kind = "" })},
		{"Failure.reason", with(sampleFailure, func(f *Failure) { f.Reason = "" })},
		{"Failure.episode_id", with(sampleFailure, func(f *Failure) { f.EpisodeID = longID })},
		{"Failure.turn", with(sampleFailure, func(f *Failure) { f.Turn = -1 })},
		{"Failure.payload", with(sampleFailure, func(f *Failure) { f.Payload = make([]byte, MaxFailurePayload+1) })},
	} {
		err := tc.msg.Validate()
		if err == nil {
			t.Errorf("%s: no error", tc.field)
			continue
		}
		var ve *ValidationError
		switch {
		case !errors.Is(err, ErrInvalid):
			t.Errorf("%s: %v does not match ErrInvalid", tc.field, err)
		case !errors.As(err, &ve) || ve.Field != tc.field:
			t.Errorf("%s: error names another field: %v", tc.field, err)
		case !strings.HasPrefix(err.Error(), "messages: "+tc.field+": ") || ve.Reason == "":
			t.Errorf("%s: unexpected text %q", tc.field, err)
		case errors.Is(err, ErrVersion) != strings.HasSuffix(tc.field, ".v"):
			t.Errorf("%s: ErrVersion match is %v: %v", tc.field, errors.Is(err, ErrVersion), err)
		}
	}
}

func TestValidateVersionMessages(t *testing.T) {
	for v, want := range map[uint8]string{
		0:           "messages: StepEvent.v: missing version (0)",
		Version + 1: "messages: StepEvent.v: version 2 is newer than supported 1",
	} {
		e := sampleStep()
		e.V = v
		if err := e.Validate(); err == nil || err.Error() != want {
			t.Errorf("V=%d: got %v, want %q", v, err, want)
		}
	}
}

// TestValidateDoesNotAllocate keeps validation, which runs on every decoded message, free of
// garbage: error paths are built only on failure.
func TestValidateDoesNotAllocate(t *testing.T) {
	for name, v := range map[string]validator{
		"EpisodeRequest": sampleEpisode(), "GenerateRequest": sampleGenerateRequest(),
		"GenerateReply": sampleGenerateReply(), "StepEvent": sampleStep(), "Trajectory": sampleTrajectory(),
	} {
		if n := testing.AllocsPerRun(100, func() { _ = v.Validate() }); n != 0 {
			t.Errorf("%s.Validate allocates %v times", name, n)
		}
	}
}

func TestIsEndMarker(t *testing.T) {
	for _, tc := range []struct {
		e    StepEvent
		want bool
	}{
		{StepEvent{Done: true}, true},
		{StepEvent{Done: true, Truncated: true, FinishReason: "length"}, true},
		{StepEvent{}, false},
		{StepEvent{Done: true, Error: "boom"}, false},
		{StepEvent{Done: true, ActionTokens: Tokens{1}}, false},
	} {
		if got := tc.e.IsEndMarker(); got != tc.want {
			t.Errorf("%+v: IsEndMarker() = %v", tc.e, got)
		}
	}
}

func TestFailurePayload(t *testing.T) {
	data := make([]byte, 3000)
	p := FailurePayload(data)
	if len(p) != MaxFailurePayload {
		t.Fatalf("len %d, want %d", len(p), MaxFailurePayload)
	}
	data[0] = 1
	if p[0] != 0 {
		t.Error("payload aliases the message buffer")
	}
	if got := FailurePayload([]byte("abc")); string(got) != "abc" {
		t.Errorf("short payload: %q", got)
	}
}
