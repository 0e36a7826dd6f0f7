package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// threeTurns is a 3-turn episode as an env worker publishes it, and the
// trajectory it must become.
func threeTurns() ([]*messages.StepEvent, *messages.Trajectory) {
	req := request("ep-1", "grp-1", 0, 1)
	req.RunID = "run-3"
	id := req.EpisodeID
	steps := []*messages.StepEvent{
		{
			V: messages.Version, EpisodeID: id, Turn: 0, Episode: req, PromptTokens: messages.Tokens{1, 2, 3},
			ActionTokens: messages.Tokens{10, 11}, ActionLogprobs: messages.Logprobs{-0.5, -0.25},
			FeedbackTokens: messages.Tokens{20, 21, 22}, Reward: 0, Score: 0,
			ExtraLogs: map[string]float64{"turn_count": 1}, FinishReason: "stop", PolicyVersion: 3, GenerateNanos: 100,
		},
		{
			V: messages.Version, EpisodeID: id, Turn: 1,
			ActionTokens: messages.Tokens{12}, ActionLogprobs: messages.Logprobs{-1},
			FeedbackTokens: messages.Tokens{23}, Reward: 0.25, Score: 0.25,
			ExtraLogs: map[string]float64{"turn_count": 2}, FinishReason: "stop", PolicyVersion: 3, GenerateNanos: 20,
		},
		{
			V: messages.Version, EpisodeID: id, Turn: 2,
			ActionTokens: messages.Tokens{13, 14, 258}, ActionLogprobs: messages.Logprobs{-0.125, -2, -0.0625},
			FeedbackTokens: messages.Tokens{24, 25}, Reward: 1, Score: 0.75,
			ExtraLogs: map[string]float64{"dummy_scores": 1, "turn_count": 3}, FinishReason: "stop",
			PolicyVersion: 4, GenerateNanos: 3, Done: true,
		},
	}
	want := &messages.Trajectory{
		V: messages.Version, RunID: req.RunID, EpisodeID: id, GroupID: "grp-1", SampleIndex: 0, GroupSize: 1,
		Env: req.Env, EnvSeed: req.EnvSeed, Prompt: req.Prompt, Label: req.Label,
		//                          prompt   | turn 0 action, feedback | turn 1 | turn 2 action, feedback
		ObservationTokens: messages.Tokens{1, 2, 3, 10, 11, 20, 21, 22, 12, 23, 13, 14, 258, 24, 25},
		ActionRanges:      messages.Ranges{{Start: 3, End: 5}, {Start: 8, End: 9}, {Start: 10, End: 13}},
		RolloutLogProbs:   messages.Logprobs{0, 0, 0, -0.5, -0.25, 0, 0, 0, -1, 0, -0.125, -2, -0.0625, 0, 0},
		Reward:            1.25, Scores: 0.75,
		ExtraLogs: map[string]float64{"dummy_scores": 1, "turn_count": 3},
		Turns:     3, StepRewards: []float64{0, 0.25, 1}, FinishReason: "stop",
		PolicyVersions: []int64{3, 3, 4}, Staleness: 1, SubmitTime: 123, GenerateNanos: 123,
		ObsStyle: messages.ObsChat, Success: true, Info: map[string]string{"note": "won"},
	}
	steps[2].Success, steps[2].Info = true, map[string]string{"note": "won"}
	for _, ev := range steps {
		ev.RunID = req.RunID // as the env worker sets it on every step
	}
	return steps, want
}

// checkTrajectory compares got with want, except for the time it was
// assembled, which only has to be set.
func checkTrajectory(t *testing.T, got, want *messages.Trajectory) {
	t.Helper()
	if got.DoneTime <= got.SubmitTime {
		t.Errorf("done time %d not after submit time %d", got.DoneTime, got.SubmitTime)
	}
	cp := *got
	cp.DoneTime = want.DoneTime
	if !reflect.DeepEqual(&cp, want) {
		t.Errorf("trajectory\n got %+v\nwant %+v", &cp, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

func TestAssemblesTrajectory(t *testing.T) {
	// A retried publish outside the stream's duplicate window repeats steps.
	for _, tc := range []struct {
		name  string
		order []int
	}{
		{"in order", []int{0, 1, 2}},
		{"every turn twice", []int{0, 0, 1, 1, 2, 2}},
		{"repeats after the end", []int{0, 1, 2, 1, 0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			steps, want := threeTurns()
			for _, i := range tc.order {
				f.publish(t, steps[i])
			}
			f.settled(t, "collector")
			checkTrajectory(t, f.outputs(t).only(t), want)
			if st := c.Stats(); st.Trajectories != 1 || st.Failures != 0 || st.InFlight != 0 {
				t.Errorf("stats %+v, want one trajectory and nothing in flight", st)
			}
		})
	}
}

// TestStepsOutOfOrder: an env worker stores each step after the previous
// one was acknowledged, so a run whose steps were stored out of turn order
// was not played by one; it ends as an invariant failure, not a trajectory.
func TestStepsOutOfOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int
	}{
		{"turn 2 before turn 1", []int{0, 2, 1}},
		{"last turn first", []int{2, 1, 0}},
		{"pending turn twice", []int{0, 2, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			steps, want := threeTurns()
			for _, i := range tc.order {
				f.publish(t, steps[i])
			}
			c := f.start(t, Options{})
			f.settled(t, "collector")
			fail := f.outputs(t).onlyFailure(t)
			if fail.EpisodeID != want.EpisodeID || fail.Kind != messages.FailureInvariant || !strings.Contains(fail.Reason, "out of order") {
				t.Errorf("failure %+v, want an invariant failure naming the order", fail)
			}
			if st := c.Stats(); st.Failures != 1 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestSingleTurnStyleSamples(t *testing.T) {
	// In a single-turn style every step brings its own fresh prompt and no
	// feedback tokens: each turn becomes one sample, credited with the
	// return from that turn on.
	f := newFixture(t, bus.ServerOptions{})
	f.start(t, Options{})
	steps, want := threeTurns()
	steps[0].Episode.ObsStyle = messages.ObsConcat
	prompts := []messages.Tokens{{1, 2, 3}, {1, 2, 3, 30}, {1, 2, 3, 30, 31}}
	for i, ev := range steps {
		ev.PromptTokens, ev.FeedbackTokens = prompts[i], nil
	}
	f.publish(t, steps...)
	f.settled(t, "collector")

	want.ObsStyle = messages.ObsConcat
	want.ObservationTokens, want.ActionRanges, want.RolloutLogProbs = nil, nil, nil
	want.Samples = []messages.Sample{
		{ObservationTokens: messages.Tokens{1, 2, 3, 10, 11}, ActionRanges: messages.Ranges{{Start: 3, End: 5}},
			RolloutLogProbs: messages.Logprobs{0, 0, 0, -0.5, -0.25}, Reward: 0, Return: 1.25},
		{ObservationTokens: messages.Tokens{1, 2, 3, 30, 12}, ActionRanges: messages.Ranges{{Start: 4, End: 5}},
			RolloutLogProbs: messages.Logprobs{0, 0, 0, 0, -1}, Reward: 0.25, Return: 1.25},
		{ObservationTokens: messages.Tokens{1, 2, 3, 30, 31, 13, 14, 258}, ActionRanges: messages.Ranges{{Start: 5, End: 8}},
			RolloutLogProbs: messages.Logprobs{0, 0, 0, 0, 0, -0.125, -2, -0.0625}, Reward: 1, Return: 1},
	}
	checkTrajectory(t, f.outputs(t).only(t), want)
}

func TestEndMarkerTruncates(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	f.start(t, Options{})
	steps, want := threeTurns()
	steps[2] = &messages.StepEvent{
		V: messages.Version, EpisodeID: want.EpisodeID, Turn: 2, ActionTokens: messages.Tokens{},
		ActionLogprobs: messages.Logprobs{}, FeedbackTokens: messages.Tokens{},
		Done: true, Truncated: true, FinishReason: "context_length",
	}
	f.publish(t, steps...)
	f.settled(t, "collector")

	// Two turns; score and extra logs are the last model turn's.
	want.ObservationTokens = want.ObservationTokens[:10]
	want.RolloutLogProbs = want.RolloutLogProbs[:10]
	want.ActionRanges = want.ActionRanges[:2]
	want.StepRewards = want.StepRewards[:2]
	want.Turns, want.Reward, want.Scores = 2, 0.25, 0.25
	want.ExtraLogs = map[string]float64{"turn_count": 2}
	want.Truncated, want.FinishReason = true, "context_length"
	want.PolicyVersions, want.Staleness, want.GenerateNanos = []int64{3, 3}, 0, 120
	want.Success, want.Info = false, nil
	checkTrajectory(t, f.outputs(t).only(t), want)
}

func TestErrorStepBecomesOneFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		// turn of the error step; the steps before it are published first
		turn int32
		// whether the error step carries the episode request, as the env
		// worker's do, or relies on turn 0's
		withRequest bool
		// published before the error step: steps[:published]
		published int32
	}{
		{"at turn 0", 0, true, 0},
		{"at turn 2", 2, true, 2},
		{"at turn 2 without request", 2, false, 2},
		// A step that failed to publish leaves a gap: the error decides anyway.
		{"after a gap", 2, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			steps, want := threeTurns()
			const reason = "generate turn 2 (unavailable): no model endpoint left to try"
			ev := errorStep(steps[0].Episode, tc.turn, reason)
			if !tc.withRequest {
				ev.Episode = nil
			}
			f.publish(t, append(steps[:tc.published], ev)...)
			f.settled(t, "collector")
			fail := f.outputs(t).onlyFailure(t)
			if fail.Kind != messages.FailureEpisode || fail.Reason != reason || fail.EpisodeID != want.EpisodeID ||
				fail.GroupID != want.GroupID || fail.Env != want.Env || fail.Turn != tc.turn {
				t.Errorf("failure %+v", fail)
			}
			if st := c.Stats(); st.Failures != 1 || st.Trajectories != 0 || st.Invariant != 0 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestNoModelTurnIsInvariantFailure(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	c := f.start(t, Options{})
	req := request("ep-1", "grp-1", 0, 1)
	f.publish(t, &messages.StepEvent{
		V: messages.Version, EpisodeID: req.EpisodeID, Episode: req, PromptTokens: messages.Tokens{1, 2},
		ActionTokens: messages.Tokens{}, ActionLogprobs: messages.Logprobs{}, Done: true, Truncated: true,
		FinishReason: "context_length",
	})
	f.settled(t, "collector")
	fail := f.outputs(t).onlyFailure(t)
	if fail.Kind != messages.FailureInvariant || !strings.Contains(fail.Reason, "without any model turn") ||
		fail.EpisodeID != req.EpisodeID || fail.GroupID != req.GroupID || fail.Env != req.Env {
		t.Errorf("failure %+v, want an invariant failure of the episode", fail)
	}
	if st := c.Stats(); st.Failures != 1 || st.Invariant != 1 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

// bigEpisode is a 3-turn episode whose steps hold perTurn action tokens
// each.
func bigEpisode(perTurn int) []*messages.StepEvent {
	req := request("big", "big", 0, 1)
	steps := make([]*messages.StepEvent, 3)
	for i := range steps {
		steps[i] = &messages.StepEvent{
			V: messages.Version, EpisodeID: req.EpisodeID, Turn: int32(i),
			ActionTokens: make(messages.Tokens, perTurn), ActionLogprobs: make(messages.Logprobs, perTurn),
			FeedbackTokens: messages.Tokens{7}, Done: i == 2, FinishReason: "stop",
		}
	}
	steps[0].Episode, steps[0].PromptTokens = req, messages.Tokens{1}
	return steps
}

func TestTooLargeTrajectoryFails(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPayload int32
		perTurn    int // action tokens per step: each step fits, the whole does not
	}{
		// Over the server's max payload but within the codec's limit.
		{"server limit", 64 << 10, 5000},
		// Over the codec's own limit, which the server's default matches:
		// 8 bytes a token (id and logprob), 10% over across three steps.
		{"codec limit", 0, messages.MaxMessageSize / 8 / 3 * 11 / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{MaxPayload: tc.maxPayload})
			c := f.start(t, Options{})
			f.publish(t, bigEpisode(tc.perTurn)...)
			f.settled(t, "collector")
			fail := f.outputs(t).onlyFailure(t)
			if fail.Kind != messages.FailureInvariant || !strings.Contains(fail.Reason, "too large") || fail.EpisodeID != "big" {
				t.Errorf("failure %+v", fail)
			}
			if st := c.Stats(); st.Failures != 1 || st.Invariant != 1 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestMalformedStep(t *testing.T) {
	noVersion, err := messages.Marshal(&messages.StepEvent{EpisodeID: "ep-x", Done: true})
	if err != nil {
		t.Fatal(err)
	}
	long := bytes.Repeat([]byte{0xc1}, 3000)
	for _, tc := range []struct {
		name    string
		data    []byte
		reason  string // in the failure's reason
		payload []byte // the failure's payload
	}{
		{"not msgpack", []byte("\xc1 not msgpack"), "StepEvent", []byte("\xc1 not msgpack")},
		{"invalid field", noVersion, "version", noVersion},
		{"long garbage", long, "StepEvent", long[:messages.MaxFailurePayload]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			subject := f.stepsOf("run-x", "ep-x")
			f.publishRaw(t, subject, tc.data)
			f.settled(t, "collector")
			fail := f.outputs(t).onlyFailure(t)
			if fail.Kind != messages.FailureMalformed || fail.Subject != subject || fail.RunID != "run-x" ||
				!strings.Contains(fail.Reason, tc.reason) || !bytes.Equal(fail.Payload, tc.payload) {
				t.Errorf("failure %+v", fail)
			}
			// Filed under the run its subject names.
			if n := len(bustest.StoredMessages(t, f.js, f.subj.StreamFailures(), f.subj.Failures("run-x", messages.FailureMalformed))); n != 1 {
				t.Errorf("%d records on the run's malformed subject, want 1", n)
			}
			if st := c.Stats(); st.Malformed != 1 {
				t.Errorf("stats %+v", st)
			}

			// The collector carries on.
			steps, want := threeTurns()
			f.publish(t, steps...)
			f.settled(t, "collector")
			out := f.outputs(t)
			if len(out.trajs) != 1 || len(out.failures) != 1 {
				t.Fatalf("got %d trajectories and failures %s after the malformed step", len(out.trajs), describe(out.failures))
			}
			checkTrajectory(t, out.trajs[0], want)
		})
	}
}

// unreadable returns ev as a newer env worker would publish it, which
// this collector cannot decode.
func unreadable(t *testing.T, ev *messages.StepEvent) []byte {
	t.Helper()
	bad := *ev
	bad.V = messages.Version + 1
	data, err := messages.Marshal(&bad)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestMalformedStepDecidesEpisode makes one step of an episode
// undecodable: the episode can never be assembled, so the malformed record
// must be its one outcome instead of the episode waiting forever. A
// malformed message after the episode ended leaves its outcome alone.
func TestMalformedStepDecidesEpisode(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  int // the unreadable turn; 3 is an extra message after the end
	}{
		{"turn 0", 0},
		{"turn 1", 1},
		{"last turn", 2},
		{"after the end", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			steps, want := threeTurns()
			var payload []byte
			for i := range 4 {
				switch {
				case i == tc.bad:
					payload = unreadable(t, steps[min(i, 2)])
					f.publishRaw(t, f.stepsOf(want.RunID, want.EpisodeID), payload)
				case i < 3:
					f.publish(t, steps[i])
				}
			}
			f.settled(t, "collector")
			out := f.outputs(t)
			if len(out.failures) != 1 || out.failures[0].Kind != messages.FailureMalformed ||
				!bytes.Equal(out.failures[0].Payload, payload) || !strings.Contains(out.failures[0].Reason, "version") {
				t.Fatalf("failures %s, want one malformed record", describe(out.failures))
			}
			fail, st := out.failures[0], c.Stats()
			if tc.bad == 3 {
				if len(out.trajs) != 1 || fail.EpisodeID != "" {
					t.Errorf("%d trajectories, failure of episode %q: the ended episode's outcome must stand alone", len(out.trajs), fail.EpisodeID)
				}
				return
			}
			if len(out.trajs) != 0 || fail.EpisodeID != want.EpisodeID {
				t.Errorf("%d trajectories, failure of episode %q, want the failure as the episode's only outcome", len(out.trajs), fail.EpisodeID)
			}
			// The group is known once turn 0 has been read.
			if known := tc.bad > 0; known != (fail.GroupID == want.GroupID && fail.Env == want.Env && st.GroupsIncomplete == 1) {
				t.Errorf("failure %+v, group stats %+v", fail, st)
			}
			if st.Failures != 1 || st.Malformed != 1 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestGroups(t *testing.T) {
	// failed in a group's scores stands for a sample that failed.
	const failed = -1
	for _, tc := range []struct {
		name   string
		filter *ScoreRange
		groups map[string][]float64
		kept   map[string]float64 // published groups and their mean score
		want   Stats              // group counters
	}{
		{
			name:   "complete group",
			groups: map[string][]float64{"g": {1, 0, 0.5, 0.25}},
			kept:   map[string]float64{"g": 0.4375},
			want:   Stats{Groups: 1, GroupsKept: 1},
		},
		{
			name:   "failed member",
			groups: map[string][]float64{"g": {1, failed, 0.5, 0.25}},
			want:   Stats{Groups: 1, GroupsIncomplete: 1},
		},
		{
			name:   "no filter keeps uniform groups",
			groups: map[string][]float64{"ones": {1, 1, 1, 1}, "zeros": {0, 0, 0, 0}},
			kept:   map[string]float64{"ones": 1, "zeros": 0},
			want:   Stats{Groups: 2, GroupsKept: 2},
		},
		{
			name:   "dynamic filtering",
			filter: &ScoreRange{Low: 0, High: 1},
			groups: map[string][]float64{"ones": {1, 1, 1, 1}, "zeros": {0, 0, 0, 0}, "mixed": {1, 0, 0, 1}},
			kept:   map[string]float64{"mixed": 0.5},
			want:   Stats{Groups: 3, GroupsKept: 1, GroupsFiltered: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{Filter: tc.filter})
			episodes := 0
			for g, scores := range tc.groups {
				for i, s := range scores {
					req := request(fmt.Sprintf("%s-%d", g, i), g, int32(i), int32(len(scores)))
					if s == failed {
						f.publish(t, errorStep(req, 0, "env crashed"))
					} else {
						f.publish(t, oneTurn(req, s))
					}
					episodes++
				}
			}
			f.settled(t, "collector")
			out := f.outputs(t)
			if len(out.trajs)+len(out.failures) != episodes {
				t.Errorf("%d trajectories and %d failures for %d episodes", len(out.trajs), len(out.failures), episodes)
			}
			got := map[string]float64{}
			for _, g := range out.groups {
				got[g.GroupID] = g.MeanScore
				if g.Env != "game:GuessTheNumber-v0" || len(g.Trajectories) != len(tc.groups[g.GroupID]) {
					t.Errorf("group %s: env %q, %d trajectories", g.GroupID, g.Env, len(g.Trajectories))
				}
			}
			if len(out.groups) != len(tc.kept) || !maps.Equal(got, tc.kept) {
				t.Errorf("published groups (mean scores) %v, want %v", got, tc.kept)
			}
			st := c.Stats()
			gst := Stats{Groups: st.Groups, GroupsKept: st.GroupsKept, GroupsFiltered: st.GroupsFiltered, GroupsIncomplete: st.GroupsIncomplete}
			if !reflect.DeepEqual(gst, tc.want) {
				t.Errorf("group stats %+v, want %+v", gst, tc.want)
			}
			if want := tc.want.PassRate(); st.PassRate() != want {
				t.Errorf("pass rate %v, want %v", st.PassRate(), want)
			}
		})
	}
}

func TestPassRate(t *testing.T) {
	for _, tc := range []struct {
		st   Stats
		want float64
	}{
		{Stats{}, 0},
		{Stats{GroupsKept: 1, GroupsFiltered: 2, GroupsIncomplete: 5}, 1.0 / 3},
		{Stats{GroupsKept: 4}, 1},
		{Stats{GroupsFiltered: 4}, 0},
	} {
		if got := tc.st.PassRate(); got != tc.want {
			t.Errorf("%+v.PassRate() = %v, want %v", tc.st, got, tc.want)
		}
	}
}

func TestScoreRangeKeeps(t *testing.T) {
	r := ScoreRange{Low: 0, High: 1}
	for mean, want := range map[float64]bool{-0.5: false, 0: false, 1e-9: true, 0.5: true, 1: false, 2: false} {
		if got := r.Keeps(mean); got != want {
			t.Errorf("Keeps(%v) = %v, want %v", mean, got, want)
		}
	}
}

// TestRetriesFailedPublish makes the trajectories stream refuse the
// collector's publish, then accept it again: the step that decided the
// episode must come back and yield exactly one trajectory.
func TestRetriesFailedPublish(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	if _, err := f.js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	_, filler := threeTurns()
	filler.EpisodeID, filler.DoneTime = "filler", 124
	data, err := messages.Marshal(filler)
	if err != nil {
		t.Fatal(err)
	}
	f.publishRaw(t, f.subj.Trajectories(filler.RunID, filler.Env), data)

	c := f.start(t, Options{})
	steps, want := threeTurns()
	f.publish(t, steps...)
	// The last step comes back after a failed publish.
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		cons, err := f.js.Consumer(ctx, f.subj.StreamSteps(), "collector")
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumRedelivered == 0 {
			return fmt.Errorf("no redelivery yet (%d unacknowledged)", ci.NumAckPending)
		}
		return nil
	})
	if st := c.Stats(); st.Trajectories != 0 || st.InFlight != 1 || !slices.Equal(st.FullStreams, []string{"trajectory"}) {
		t.Fatalf("stats %+v while the stream refuses publishes", st)
	}
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f.settled(t, "collector")
	out := f.outputs(t)
	var got []*messages.Trajectory
	for _, tr := range out.trajs {
		if tr.EpisodeID == want.EpisodeID {
			got = append(got, tr)
		}
	}
	if len(got) != 1 || len(out.failures) != 0 {
		t.Fatalf("got %d trajectories of the episode and failures %s", len(got), describe(out.failures))
	}
	checkTrajectory(t, got[0], want)
	if st := c.Stats(); st.Trajectories != 1 || st.InFlight != 0 || len(st.FullStreams) != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRestartResumesEpisode stops the collector after it has acknowledged
// the first turns of an episode: its successor must still assemble the
// whole episode, from the steps the stream keeps.
func TestRestartResumesEpisode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []int // turns the first collector handles
		after  []int // turns published after the restart
	}{
		{"after turn 0", []int{0}, []int{1, 2}},
		{"after turn 1", []int{0, 1}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			first := f.start(t, Options{})
			steps, want := threeTurns()
			for _, i := range tc.before {
				f.publish(t, steps[i])
			}
			f.settled(t, "collector")
			if st := first.Stats(); st.InFlight != 1 {
				t.Fatalf("stats %+v, want the episode in flight", st)
			}
			first.stop()

			second := f.start(t, Options{})
			for _, i := range tc.after {
				f.publish(t, steps[i])
			}
			f.settled(t, "collector")
			checkTrajectory(t, f.outputs(t).only(t), want)
			if st := second.Stats(); st.Trajectories != 1 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestShutdownRecordsDrainedOutcome stops the collector while it is
// publishing an episode's outcome: the shutdown must let the publish
// finish rather than hand the step back.
func TestShutdownRecordsDrainedOutcome(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	ctx := context.Background()
	// Without the trajectories stream the publish retries, which holds the
	// collector in the middle of recording the outcome.
	if err := f.js.DeleteStream(ctx, f.subj.StreamTrajectories()); err != nil {
		t.Fatal(err)
	}
	c := f.start(t, Options{})
	steps, want := threeTurns()
	f.publish(t, steps...)
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		cons, err := f.js.Consumer(ctx, f.subj.StreamSteps(), "collector")
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 1 || ci.AckFloor.Stream != 2 {
			return fmt.Errorf("last step not in progress: %+v", ci)
		}
		return nil
	})
	stopped := make(chan struct{})
	go func() { c.stop(); close(stopped) }()
	if err := bus.EnsureStreams(ctx, f.js, f.subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	<-stopped
	cons, err := f.js.Consumer(ctx, f.subj.StreamSteps(), "collector")
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := cons.Info(ctx); err != nil || ci.NumAckPending != 0 || ci.AckFloor.Stream < 3 {
		t.Fatalf("the last step was not acknowledged before Run returned: %+v %v", ci, err)
	}
	checkTrajectory(t, f.outputs(t).only(t), want)
}

// TestRestartAfterMalformedStep restarts the collector after a malformed
// step decided an episode: the successor must not assemble the episode
// from its remaining steps.
func TestRestartAfterMalformedStep(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	first := f.start(t, Options{})
	steps, want := threeTurns()
	f.publish(t, steps[0])
	f.publishRaw(t, f.stepsOf(want.RunID, want.EpisodeID), unreadable(t, steps[1]))
	f.settled(t, "collector")
	first.stop()

	second := f.start(t, Options{})
	f.publish(t, steps[2])
	f.settled(t, "collector")
	if fail := f.outputs(t).onlyFailure(t); fail.EpisodeID != want.EpisodeID || fail.Kind != messages.FailureMalformed {
		t.Errorf("failure %+v", fail)
	}
	if st := second.Stats(); st.Trajectories != 0 || st.Failures != 0 || st.InFlight != 0 {
		t.Errorf("stats %+v of the second collector, want nothing", st)
	}
}

func TestRecentIsBounded(t *testing.T) {
	r := newRecent(2)
	for _, id := range []string{"a", "b", "c"} {
		r.add(id)
	}
	if r.has("a") || !r.has("b") || !r.has("c") || len(r.set) != 2 {
		t.Errorf("after adding a, b, c to a set of 2: a %v, b %v, c %v, size %d", r.has("a"), r.has("b"), r.has("c"), len(r.set))
	}
}

// TestLatestAttemptWins: an episode delivered again starts over, and its
// steps carry the new attempt. Whatever the first run stored, however far
// it got, the trajectory is built from one run only.
// TestDeletesFirstRunsPurgesOthers: a decided episode's first run, held
// whole, has its steps deleted one by one by sequence; a run that is not
// the episode's first (a redelivery, whose earlier steps may have gone to
// another collector) has the episode's steps purged by subject. Either way
// the steps stream ends empty.
func TestDeletesFirstRunsPurgesOthers(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{}, bus.StreamOptions{})
	c := f.start(t, Options{})
	empty := func(want Stats) {
		t.Helper()
		bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
			st, err := f.js.Stream(context.Background(), f.subj.StreamSteps())
			if err != nil {
				return err
			}
			got := c.Stats()
			if n := st.CachedInfo().State.Msgs; n != 0 || got.StepsDeleted != want.StepsDeleted || got.Purges != want.Purges {
				return fmt.Errorf("%d steps stored, %d deleted, %d purges; want 0, %d, %d", n, got.StepsDeleted, got.Purges, want.StepsDeleted, want.Purges)
			}
			return nil
		})
	}
	first, _ := threeTurns()
	for _, ev := range first {
		f.publish(t, ev)
	}
	empty(Stats{StepsDeleted: 3})

	again, _ := threeTurns()
	for _, ev := range again {
		ev.EpisodeID = "ep-2"
		ev.Attempt = 2
		if ev.Episode != nil {
			ev.Episode.EpisodeID, ev.Episode.GroupID = "ep-2", "grp-2"
		}
		f.publish(t, ev)
	}
	empty(Stats{StepsDeleted: 3, Purges: 1})
}

// TestFirstFinishedAttemptWins: runs of one episode are assembled apart and
// never spliced; the first to finish is the episode's outcome, whichever
// attempt it is.
func TestFirstFinishedAttemptWins(t *testing.T) {
	stale := func(turns int) []*messages.StepEvent {
		steps, _ := threeTurns()
		out := steps[:turns]
		for i, ev := range out {
			cp := *ev
			cp.Attempt = 1
			cp.ActionTokens = messages.Tokens{99, 98} // the first run sampled something else
			cp.ActionLogprobs = messages.Logprobs{-3, -3}
			out[i] = &cp
		}
		return out
	}
	rerun := func() []*messages.StepEvent {
		steps, _ := threeTurns()
		for _, ev := range steps {
			ev.Attempt = 2
		}
		return steps
	}
	for _, tc := range []struct {
		name  string
		steps func() []*messages.StepEvent
	}{
		{"first run stopped after turn 1", func() []*messages.StepEvent { return append(stale(2), rerun()...) }},
		{"runs interleaved", func() []*messages.StepEvent {
			s, r := stale(2), rerun()
			return []*messages.StepEvent{s[0], r[0], s[1], r[1], r[2]}
		}},
		{"old run's steps arrive late", func() []*messages.StepEvent {
			r := rerun()
			return append([]*messages.StepEvent{r[0], r[1]}, append(stale(2), r[2])...)
		}},
		{"old run finishes while the new one stalls", func() []*messages.StepEvent {
			// A worker cut off from the server was taken over, but came
			// back and finished; the taker-over then died.
			old := rerun()
			for _, ev := range old {
				ev.Attempt = 1
			}
			stalled := stale(2)
			for _, ev := range stalled {
				ev.Attempt = 2
			}
			return []*messages.StepEvent{old[0], stalled[0], old[1], stalled[1], old[2]}
		}},
		{"later steps of a run after the outcome", func() []*messages.StepEvent {
			return append(rerun(), stale(2)...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			c := f.start(t, Options{})
			f.publish(t, tc.steps()...)
			f.settled(t, "collector")
			_, want := threeTurns()
			checkTrajectory(t, f.outputs(t).only(t), want)
			if st := c.Stats(); st.Trajectories != 1 || st.Failures != 0 || st.InFlight != 0 {
				t.Errorf("stats %+v, want one trajectory and nothing in flight", st)
			}
		})
	}
}

// TestTwoCollectorsOneDurable: a second collector on the same durable is a
// standby, so no episode's steps are split between two processes, and it
// takes over when the first stops.
func TestTwoCollectorsOneDurable(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	first := f.start(t, Options{})
	second := f.start(t, Options{})
	const episodes = 30
	publishAll := func(prefix string) {
		for i := range episodes {
			steps, _ := threeTurns()
			id := fmt.Sprintf("%s-%d", prefix, i)
			for _, ev := range steps {
				ev.EpisodeID = id
			}
			req := *steps[0].Episode
			req.EpisodeID, req.GroupID = id, id
			steps[0].Episode = &req
			f.publish(t, steps...)
		}
	}
	publishAll("a")
	f.settled(t, "collector")
	st1, st2 := first.Stats(), second.Stats()
	if st1.Trajectories+st2.Trajectories != episodes || st1.InFlight+st2.InFlight != 0 {
		t.Fatalf("want %d trajectories and nothing stuck, got %+v and %+v", episodes, st1, st2)
	}
	if st1.Trajectories != 0 && st2.Trajectories != 0 {
		t.Fatalf("both collectors assembled episodes: %d and %d", st1.Trajectories, st2.Trajectories)
	}
	// The active one stops; the standby carries on.
	active, standby := first, second
	if st1.Trajectories == 0 {
		active, standby = second, first
	}
	active.stop()
	publishAll("b")
	f.settled(t, "collector")
	if got := standby.Stats().Trajectories; got != episodes {
		t.Fatalf("standby assembled %d of %d episodes after the active collector stopped", got, episodes)
	}
}

func TestWaitGroups(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	c := f.start(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c.WaitGroups(ctx, 1) {
		t.Fatal("no group has ended, yet WaitGroups reported one")
	}
	f.publish(t, oneTurn(request("w-1", "w-g", 0, 1), 1))
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer wcancel()
	if !c.WaitGroups(wctx, 1) || c.Stats().Groups != 1 {
		t.Fatalf("WaitGroups did not see the group end: %+v", c.Stats())
	}
}

// TestCompactsEmptySteps: once every episode is decided, the emptied steps
// stream is compacted (what the per-episode purges leave in the file store,
// deleted steps and tombstones, is dropped with its blocks; scripts/fleet.sh
// shows the disk it saves), once, and an episode stored afterwards is
// still assembled. Compaction at a 10 ms interval runs throughout.
func TestCompactsEmptySteps(t *testing.T) {
	// Small blocks (a quarter of the stream's bytes), so the episodes span
	// several.
	f := newFixture(t, bus.ServerOptions{}, bus.StreamOptions{StepsMaxBytes: 512 << 10})
	c := f.start(t, Options{CompactInterval: 10 * time.Millisecond})
	episode := func(i int) []*messages.StepEvent {
		steps, _ := threeTurns()
		id := fmt.Sprintf("ep-%d", i)
		for _, ev := range steps {
			ev.EpisodeID = id
			if ev.Episode != nil {
				ev.Episode.EpisodeID, ev.Episode.GroupID = id, "grp-"+id
			}
		}
		return steps
	}
	wantTrajectories := func(n uint64) {
		t.Helper()
		bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
			if st := c.Stats(); st.Trajectories != n {
				return fmt.Errorf("%d trajectories, want %d", st.Trajectories, n)
			}
			return nil
		})
	}
	// Episodes played side by side and ending last first, as a fleet's do:
	// their steps are interleaved and the blocks empty out of order.
	const episodes = 200
	played := make([][]*messages.StepEvent, episodes)
	for i := range played {
		played[i] = episode(i)
	}
	for turn := range 3 {
		for i := range episodes {
			if turn == 2 {
				i = episodes - 1 - i
			}
			f.publish(t, played[i][turn])
		}
	}
	wantTrajectories(episodes)
	var first uint64
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if first = c.Stats().Compactions; first == 0 {
			return errors.New("the emptied steps stream was not compacted")
		}
		return nil
	})
	for _, ev := range episode(episodes) {
		f.publish(t, ev)
	}
	wantTrajectories(episodes + 1)
	// Emptied again, the stream is compacted again.
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if n := c.Stats().Compactions; n <= first {
			return fmt.Errorf("%d compactions after one more episode, want more than %d", n, first)
		}
		return nil
	})
	// An idle stream is compacted once, not every interval: a compaction
	// that knows the last one leaves it alone.
	ctx := context.Background()
	seq := c.compactSteps(ctx, 0)
	n := c.Stats().Compactions
	if again := c.compactSteps(ctx, seq); again != seq || c.Stats().Compactions != n {
		t.Errorf("compacting an idle stream again: sequence %d → %d, compactions %d → %d", seq, again, n, c.Stats().Compactions)
	}
}
