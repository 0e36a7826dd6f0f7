package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// agentChat is an external agent's multi-turn chat held through the gateway with plain
// OpenAI-style JSON: it sends the whole history each turn, as chat clients do.
type agentChat struct {
	session string
	seed    int64
	history []map[string]any
	turns   []*chatTurn
}

// turn sends the history and appends the model's answer to it.
func (a *agentChat) turn(f *fixture, extra map[string]any) (*chatTurn, *response, error) {
	body := map[string]any{
		"model": toyllm.DefaultModel, "messages": a.history, "max_tokens": 64, "temperature": 1.0,
		"seed": a.seed + int64(len(a.turns)), "logprobs": true, "top_logprobs": 0,
		"return_tokens_as_token_ids": true, "return_token_ids": true,
	}
	for k, v := range extra {
		body[k] = v
	}
	r, err := f.do(http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: a.session}, body)
	if err != nil {
		return nil, nil, err
	}
	if r.status != http.StatusOK {
		return nil, r, fmt.Errorf("session %s turn %d: %s", a.session, len(a.turns), r)
	}
	var ct chatTurn
	if err := r.decode(&ct); err != nil {
		return nil, r, err
	}
	if len(ct.Choices) != 1 {
		return nil, r, fmt.Errorf("%d choices", len(ct.Choices))
	}
	a.turns = append(a.turns, &ct)
	content := ct.Choices[0].Message.Content
	a.history = append(a.history, map[string]any{"role": "assistant", "content": content},
		map[string]any{"role": "user", "content": feedback(len(a.turns), content)})
	return &ct, r, nil
}

// newAgent starts a chat whose system message names the session, so that no two sessions
// send the model the same prompt.
func newAgent(session string, seed int64) *agentChat {
	return &agentChat{session: session, seed: seed, history: []map[string]any{
		{"role": "system", "content": "You are agent " + session + "."},
		{"role": "user", "content": gamePrompt},
	}}
}

// finishReport is the answer of a finish.
type finishReport struct {
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Drift     bool   `json:"drift"`
	Segments  []struct {
		EpisodeID   string `json:"episode_id"`
		Segment     int    `json:"segment"`
		Turns       int    `json:"turns"`
		Tokens      int    `json:"tokens"`
		Drift       bool   `json:"drift"`
		DriftReason string `json:"drift_reason"`
		Published   bool   `json:"published"`
	} `json:"segments"`
}

// TestSessionsEndToEnd holds several 3-turn chats through the gateway at once, finishes the
// sessions and checks the published trajectories token for token against what the model
// server produced.
func TestSessionsEndToEnd(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const sessions, turns = 6, 3
	agents := make([]*agentChat, sessions)
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	for i := range agents {
		agents[i] = newAgent(fmt.Sprintf("agent-%d", i), int64(100*i+1))
		wg.Go(func() {
			a := agents[i]
			for range turns {
				if _, _, err := a.turn(f, nil); err != nil {
					errs <- err
					return
				}
			}
			r, err := f.do(http.MethodPost, "/v1/sessions/"+a.session+"/finish", nil, map[string]any{
				"reward": float64(i) / 2, "extra_logs": map[string]float64{"agent": float64(i)}, "label": "7",
			})
			switch {
			case err != nil:
				errs <- err
			case r.status != http.StatusOK:
				errs <- fmt.Errorf("finish %s: %s", a.session, r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	trajs := f.trajectories(t, DefaultEnv)
	if len(trajs) != sessions {
		t.Fatalf("%d trajectories stored, want %d", len(trajs), sessions)
	}
	for i, a := range agents {
		tr := trajs[a.session]
		if tr == nil {
			t.Fatalf("no trajectory for %s", a.session)
		}
		checkTrajectory(t, f, tr, a, float64(i)/2)
		if tr.Label != "7" || tr.ExtraLogs["agent"] != float64(i) {
			t.Errorf("%s: label %q extra_logs %v, want the finish's", a.session, tr.Label, tr.ExtraLogs)
		}
	}
	if st := f.gw.Stats(); st.Finished != sessions || st.Trajectories != sessions || st.Drifts != 0 || st.OpenSessions != 0 {
		t.Errorf("stats %+v", st)
	}
}

// checkTrajectory checks a one-segment trajectory against the agent's turns and the model
// server's record.
func checkTrajectory(t *testing.T, f *fixture, tr *messages.Trajectory, a *agentChat, reward float64) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if int(tr.Turns) != len(a.turns) || len(tr.ActionRanges) != len(a.turns) {
		t.Fatalf("%s: %d turns, %d action ranges; want one per call, %d", a.session, tr.Turns, len(tr.ActionRanges), len(a.turns))
	}
	wantSteps := make([]float64, len(a.turns))
	wantSteps[len(wantSteps)-1] = reward
	if tr.Reward != reward || tr.Scores != reward || !slices.Equal(tr.StepRewards, wantSteps) {
		t.Errorf("%s: reward %v scores %v steps %v, want %v on the last call", a.session, tr.Reward, tr.Scores, tr.StepRewards, reward)
	}
	last := a.turns[len(a.turns)-1].Choices[0].FinishReason
	if tr.FinishReason != last || tr.Truncated != (last == "length") {
		t.Errorf("%s: finish_reason %q truncated %v, last call finished %q", a.session, tr.FinishReason, tr.Truncated, last)
	}
	if tr.ExtraLogs["turn_count"] != float64(len(a.turns)) || tr.ExtraLogs["drift"] != 0 || tr.Info["session_id"] != a.session {
		t.Errorf("%s: extra_logs %v info %v", a.session, tr.ExtraLogs, tr.Info)
	}
	if tr.Prompt != gamePrompt {
		t.Errorf("%s: prompt %q, want the first user message", a.session, tr.Prompt)
	}
	// The first prompt opens the trajectory: prompt tokens are included.
	first := a.turns[0].PromptTokenIDs
	if len(first) == 0 || !slices.Equal(tr.ObservationTokens[:len(first)], first) || tr.ActionRanges[0].Start != int32(len(first)) {
		t.Errorf("%s: trajectory does not start with the first prompt's %d tokens", a.session, len(first))
	}
	for k, turn := range a.turns {
		rg := tr.ActionRanges[k]
		ch := turn.Choices[0]
		// Each call's prompt is exactly the trajectory up to its action.
		if !slices.Equal(turn.PromptTokenIDs, tr.ObservationTokens[:rg.Start]) {
			t.Errorf("%s call %d: prompt is not the trajectory before the action", a.session, k)
		}
		action := []int32(tr.ObservationTokens[rg.Start:rg.End])
		if !slices.Equal(action, ch.TokenIDs) {
			t.Errorf("%s call %d: action tokens %v, the call returned %v", a.session, k, action, ch.TokenIDs)
		}
		gen, ok := f.generatedFor(turn.PromptTokenIDs)
		if !ok || len(gen) != 1 || !slices.Equal(gen[0], action) {
			t.Errorf("%s call %d: action tokens %v, the model server generated %v", a.session, k, action, gen)
		}
		lps, err := turn.logprobs()
		if err != nil {
			t.Fatal(err)
		}
		if got := []float32(tr.RolloutLogProbs[rg.Start:rg.End]); !slices.Equal(got, lps) {
			t.Errorf("%s call %d: logprobs %v, the call returned %v", a.session, k, got, lps)
		}
		for i, e := range ch.Logprobs.Content {
			if want := "token_id:" + strconv.Itoa(int(ch.TokenIDs[i])); e.Token != want || len(e.TopLogprobs) != 0 {
				t.Errorf("%s call %d token %d: %q with %d alternatives, want %q and none", a.session, k, i, e.Token, len(e.TopLogprobs), want)
			}
		}
		if turn.Usage.PromptTokens != len(turn.PromptTokenIDs) || turn.Usage.CompletionTokens != len(ch.TokenIDs) {
			t.Errorf("%s call %d: usage %+v", a.session, k, turn.Usage)
		}
	}
}

// TestLogprobsMatchModel replays a session's calls straight against the model server with the
// same seeds: the recorded logprobs are the model's own.
func TestLogprobsMatchModel(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a := newAgent("replay", 42)
	for range 2 {
		if _, _, err := a.turn(f, nil); err != nil {
			t.Fatal(err)
		}
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/replay/finish", nil, map[string]any{"reward": 1})
	tr := f.trajectories(t, DefaultEnv)["replay"]
	for k, turn := range a.turns {
		body, _ := json.Marshal(map[string]any{
			"prompt": turn.PromptTokenIDs, "max_tokens": 64, "temperature": 1.0, "seed": a.seed + int64(k),
			"logprobs": 0, "return_token_ids": true,
		})
		resp, err := http.Post(f.model+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var direct struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
				Logprobs struct {
					TokenLogprobs []json.Number `json:"token_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&direct)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		rg := tr.ActionRanges[k]
		if !slices.Equal(direct.Choices[0].TokenIDs, tr.ObservationTokens[rg.Start:rg.End]) {
			t.Fatalf("call %d: the model generates %v from the same prompt and seed, the trajectory has %v",
				k, direct.Choices[0].TokenIDs, tr.ObservationTokens[rg.Start:rg.End])
		}
		for i, n := range direct.Choices[0].Logprobs.TokenLogprobs {
			want, err := parseFloat32(string(n))
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.RolloutLogProbs[int(rg.Start)+i]; got != want {
				t.Errorf("call %d token %d: logprob %v, the model gives %v", k, i, got, want)
			}
		}
	}
}

// TestDrift re-sends an edited history: the call starts a new segment, flagged, and the
// finish publishes one trajectory per segment.
func TestDrift(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a := newAgent("drifty", 7)
	if _, r, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	} else if r.header.Get(HeaderDrift) != "false" || r.header.Get(HeaderSegment) != "0" {
		t.Fatalf("first call headers %v", r.header)
	}
	// The agent rewrites the model's answer before sending the history back.
	a.history[2]["content"] = "I think it is \\boxed{3}."
	_, r, err := a.turn(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.header.Get(HeaderDrift) != "true" || r.header.Get(HeaderSegment) != "1" || r.header.Get(HeaderCall) != "1" {
		t.Fatalf("edited history: headers %v, want a flagged new segment", r.header)
	}
	if _, r, err = a.turn(f, nil); err != nil {
		t.Fatal(err)
	} else if r.header.Get(HeaderDrift) != "false" || r.header.Get(HeaderSegment) != "1" {
		t.Fatalf("third call headers %v, want it to extend segment 1", r.header)
	}

	fin := f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/drifty/finish", nil, map[string]any{"reward": 1})
	var rep finishReport
	if err := fin.decode(&rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Drift || len(rep.Segments) != 2 || rep.Segments[1].EpisodeID != "drifty/seg1" || !rep.Segments[1].Drift ||
		rep.Segments[1].DriftReason == "" || rep.Segments[0].Turns != 1 || rep.Segments[1].Turns != 2 {
		t.Fatalf("finish report %s", fin.body)
	}
	trajs := f.trajectories(t, DefaultEnv)
	seg0, seg1 := trajs["drifty"], trajs["drifty/seg1"]
	if len(trajs) != 2 || seg0 == nil || seg1 == nil {
		t.Fatalf("stored %d trajectories: %v", len(trajs), trajs)
	}
	checkTrajectory(t, f, seg0, &agentChat{session: "drifty", turns: a.turns[:1]}, 1)
	for _, tr := range []*messages.Trajectory{seg0, seg1} {
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		if tr.ExtraLogs["segment_count"] != 2 {
			t.Errorf("%s: extra_logs %v", tr.EpisodeID, tr.ExtraLogs)
		}
	}
	if seg1.ExtraLogs["drift"] != 1 || seg1.ExtraLogs["segment_index"] != 1 || seg1.Info["drift_reason"] == "" || seg1.Turns != 2 {
		t.Errorf("segment 1: extra_logs %v info %v turns %d", seg1.ExtraLogs, seg1.Info, seg1.Turns)
	}
	// The new segment starts with the edited prompt, whole.
	if p := a.turns[1].PromptTokenIDs; !slices.Equal(seg1.ObservationTokens[:len(p)], p) || seg1.ActionRanges[0].Start != int32(len(p)) {
		t.Errorf("segment 1 does not start with the edited prompt")
	}
	if st := f.gw.Stats(); st.Drifts != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestFinishTwice finishes a session twice: the second is refused and nothing is stored twice.
func TestFinishTwice(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a := newAgent("twice", 3)
	if _, _, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/twice/finish", nil, map[string]any{"reward": 1})
	r := f.must(t, http.StatusConflict, http.MethodPost, "/v1/sessions/twice/finish", nil, map[string]any{"reward": 1})
	if !strings.Contains(r.errorMessage(), "already ended") {
		t.Errorf("second finish: %s", r)
	}
	// A late call cannot reopen the session.
	if _, r, err := a.turn(f, nil); err == nil || r == nil || r.status != http.StatusConflict {
		t.Errorf("call after finish: %v %v, want 409", r, err)
	}
	f.must(t, http.StatusConflict, http.MethodDelete, "/v1/sessions/twice", nil, nil)
	if n := len(stored[messages.Trajectory](t, f, f.subj.StreamTrajectories(), f.subj.Trajectories(f.run, DefaultEnv))); n != 1 {
		t.Errorf("%d trajectories stored, want 1", n)
	}
}

// TestFinishOptions publishes under the finish's env, group and scores.
func TestFinishOptions(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a := newAgent("opts", 5)
	if _, _, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]any{
		{}, {"reward": "high"}, {"reward": 1, "group_size": 0}, {"reward": 1, "group_size": 2, "sample_index": 2},
	} {
		f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/sessions/opts/finish", nil, bad)
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/opts/finish", nil, map[string]any{
		"reward": 0.5, "scores": 2, "env": "math:gsm8k", "group_id": "g1", "sample_index": 1, "group_size": 4,
		"info": map[string]string{"expected_answer": "7"},
	})
	tr := f.trajectories(t, "math:gsm8k")["opts"]
	if tr == nil {
		t.Fatal("no trajectory on the finish's env")
	}
	if tr.Env != "math:gsm8k" || tr.GroupID != "g1" || tr.SampleIndex != 1 || tr.GroupSize != 4 || tr.Scores != 2 ||
		tr.Reward != 0.5 || tr.Info["expected_answer"] != "7" {
		t.Errorf("trajectory %+v", tr)
	}
}

// TestDiscard ends a session with a failure record.
func TestDiscard(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a := newAgent("bin", 9)
	if _, _, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	f.must(t, http.StatusOK, http.MethodDelete, "/v1/sessions/bin", nil, nil)
	f.must(t, http.StatusConflict, http.MethodDelete, "/v1/sessions/bin", nil, nil)
	f.must(t, http.StatusNotFound, http.MethodDelete, "/v1/sessions/never", nil, nil)
	fails := f.failures(t)
	if len(fails) != 1 || fails[0].EpisodeID != "bin" || !strings.Contains(fails[0].Reason, "discarded") || fails[0].Turn != 1 {
		t.Fatalf("failures %+v", fails)
	}
	if n := len(f.trajectories(t, DefaultEnv)); n != 0 {
		t.Errorf("%d trajectories stored for a discarded session", n)
	}
}

// TestRunID publishes a gateway's trajectories and failure records under its run id, on
// that run's subjects, which its trainer reads apart from every other run's.
func TestRunID(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{Run: "trainer-7"}})
	if f.run != "trainer-7" {
		t.Fatalf("fixture run %q", f.run)
	}
	a := newAgent("kept", 3)
	if _, _, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	var fin struct {
		Subject string `json:"subject"`
	}
	if err := f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/kept/finish", nil, map[string]any{"reward": 1}).decode(&fin); err != nil {
		t.Fatal(err)
	}
	if want := f.subj.Trajectories("trainer-7", DefaultEnv); fin.Subject != want {
		t.Errorf("finish names subject %q, want %q", fin.Subject, want)
	}
	b := newAgent("dropped", 4)
	if _, _, err := b.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	f.must(t, http.StatusOK, http.MethodDelete, "/v1/sessions/dropped", nil, nil)
	if trajs := f.trajectories(t, DefaultEnv); len(trajs) != 1 || trajs["kept"] == nil {
		t.Errorf("trajectories of the run %v, want the finished session's", trajs)
	}
	if fails := f.failures(t); len(fails) != 1 || fails[0].EpisodeID != "dropped" {
		t.Errorf("failures of the run %+v, want the discarded session's", fails)
	}
	// Nothing under the default run, and everything under this one.
	for stream, filter := range map[string]string{
		f.subj.StreamTrajectories(): f.subj.TrajectoriesOfRun(DefaultRun),
		f.subj.StreamFailures():     f.subj.FailuresOfRun(DefaultRun),
	} {
		if n := len(bustest.StoredMessages(t, f.js, stream, filter)); n != 0 {
			t.Errorf("%d records on %s", n, filter)
		}
	}
	if n := len(bustest.StoredMessages(t, f.js, f.subj.StreamTrajectories(), "")); n != 1 {
		t.Errorf("%d trajectories stored, want 1", n)
	}
}

// TestSessionExpiry lets a session idle past its TTL: it ends as a failure record.
func TestSessionExpiry(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{SessionTTL: 200 * time.Millisecond, JanitorInterval: 10 * time.Millisecond}})
	a := newAgent("idle", 11)
	if _, _, err := a.turn(f, nil); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if st := f.gw.Stats(); st.Expired != 1 {
			return fmt.Errorf("%d sessions expired", st.Expired)
		}
		return nil
	})
	fails := f.failures(t)
	if len(fails) != 1 || fails[0].EpisodeID != "idle" || !strings.Contains(fails[0].Reason, "session abandoned") ||
		fails[0].Env != DefaultEnv || fails[0].Kind != messages.FailureEpisode {
		t.Fatalf("failures %+v", fails)
	}
	f.must(t, http.StatusConflict, http.MethodPost, "/v1/sessions/idle/finish", nil, map[string]any{"reward": 1})
	f.must(t, http.StatusConflict, http.MethodGet, "/v1/sessions/idle", nil, nil)
}

// TestBusySession sends a second call while the first is running on the same session.
func TestBusySession(t *testing.T) {
	f := newFixture(t, fixtureOptions{toy: toyllm.Options{TokenLatency: 50 * time.Millisecond}})
	a := newAgent("busy", 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := a.turn(f, nil)
		done <- err
	}()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		r, err := f.do(http.MethodGet, "/v1/sessions/busy", nil, nil)
		if err != nil {
			return err
		}
		var s summary
		if r.status != http.StatusOK || r.decode(&s) != nil || !s.Busy {
			return fmt.Errorf("session not busy: %s", r)
		}
		return nil
	})
	r := f.must(t, http.StatusConflict, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "busy"},
		map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 4})
	if !strings.Contains(r.errorMessage(), "in progress") {
		t.Errorf("concurrent call: %s", r)
	}
	f.must(t, http.StatusConflict, http.MethodPost, "/v1/sessions/busy/finish", nil, map[string]any{"reward": 1})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/busy", nil, nil).decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.Busy || s.Calls != 1 || s.Segments != 1 || s.Tokens == 0 {
		t.Errorf("summary %+v", s)
	}
}

// TestRequestErrors checks the answers to bad requests: each has its status and OpenAI's
// error body, with a message in the client's terms that names no internal address, subject or
// Go type, the model server's own refusals included.
func TestRequestErrors(t *testing.T) {
	// The gateway takes bodies larger than the model server does (1 MiB plus 16 bytes a token).
	f := newFixture(t, fixtureOptions{toy: toyllm.Options{MaxModelLen: 1024}, gateway: Options{MaxBodyBytes: 2 << 20}})
	msgs := []map[string]any{{"role": "user", "content": gamePrompt}}
	chatBody := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": msgs, "max_tokens": 16}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	longText := strings.Repeat("guess ", 200_000) // 1.2 MB: over the model server's limit, within the gateway's
	for _, tc := range []struct {
		name   string
		method string // POST when empty
		path   string
		header map[string]string
		body   any
		status int
		want   string
		param  string // the error's param; empty for null
		allow  string // the Allow header of a 405
	}{
		{name: "n=0", path: "/v1/chat/completions", body: chatBody(map[string]any{"n": 0}), status: 400, want: "n must be at least 1, got 0"},
		{name: "n too large", path: "/v1/completions", body: map[string]any{"prompt": "hi", "n": MaxChoices + 1}, status: 400,
			want: fmt.Sprintf("n must be at most %d, got %d", MaxChoices, MaxChoices+1)},
		{name: "bad JSON", path: "/v1/chat/completions", body: []byte(`{"messages": [`), status: 400, want: "invalid JSON"},
		{name: "not an object", path: "/v1/chat/completions", body: []byte(`[1,2]`), status: 400, want: "request body must be a JSON object, got an array"},
		{name: "wrong type", path: "/v1/chat/completions", body: chatBody(map[string]any{"temperature": "hot"}), status: 400,
			want: "temperature: expected a number, got a string", param: "temperature"},
		{name: "messages not a list", path: "/v1/chat/completions", body: map[string]any{"messages": "hi"}, status: 400,
			want: "messages: expected an array of objects, got a string", param: "messages"},
		{name: "model not a string", path: "/v1/completions", body: map[string]any{"prompt": "hi", "model": 7}, status: 400,
			want: "model: expected a string, got a number", param: "model"},
		{name: "nested wrong type", path: "/v1/chat/completions", body: chatBody(map[string]any{"extra_body": map[string]any{"session_id": []int{1}}}),
			status: 400, want: "extra_body.session_id: expected a string, got an array", param: "extra_body.session_id"},
		{name: "list element", path: "/v1/chat/completions", body: chatBody(map[string]any{"stop_token_ids": []any{1, "2"}}), status: 400,
			want: "stop_token_ids[1]: expected an integer, got a string", param: "stop_token_ids[1]"},
		{name: "fraction", path: "/v1/completions", body: map[string]any{"prompt": "hi", "max_tokens": 1.5}, status: 400,
			want: "max_tokens: expected an integer, got the number 1.5", param: "max_tokens"},
		{name: "map value", path: "/v1/sessions/nobody/finish", body: map[string]any{"reward": 1, "extra_logs": map[string]any{"a": "b"}}, status: 400,
			want: "extra_logs.a: expected a number, got a string", param: "extra_logs.a"},
		{name: "finish by metadata", path: "/v1/sessions/finish", body: map[string]any{"reward": true}, status: 400,
			want: "reward: expected a number, got a boolean", param: "reward"},
		{name: "no messages", path: "/v1/chat/completions", body: map[string]any{"max_tokens": 4}, status: 400, want: "messages must not be empty"},
		{name: "oversize body", path: "/v1/chat/completions", body: chatBody(map[string]any{"pad": strings.Repeat("x", 3<<20)}), status: 413, want: "exceeds"},
		{name: "unknown model", path: "/v1/chat/completions", body: chatBody(map[string]any{"model": "gpt-9"}), status: 404, want: "does not exist"},
		{name: "context length", path: "/v1/chat/completions", body: chatBody(map[string]any{"max_tokens": 5000}), status: 400, want: "maximum context length"},
		{name: "long prompt", path: "/v1/completions", body: map[string]any{"prompt": make([]int, 2000), "max_tokens": 1}, status: 400, want: "maximum context length"},
		{name: "prompt too long for the model server", path: "/v1/completions", body: map[string]any{"prompt": longText, "max_tokens": 1}, status: 400,
			want: "the prompt is too long for the model"},
		{name: "text too long for the model server", path: "/tokenize", body: map[string]any{"prompt": longText}, status: 400,
			want: "the prompt is too long for the model"},
		{name: "refused by the model server", path: "/v1/completions", body: map[string]any{"prompt": "hi", "presence_penalty": 0.5}, status: 400,
			want: "the model server refused the request: presence, frequency and repetition penalties are not supported by toyllm"},
		{name: "top_logprobs", path: "/v1/chat/completions", body: chatBody(map[string]any{"logprobs": true, "top_logprobs": 21}), status: 400, want: "top_logprobs"},
		{name: "completion logprobs", path: "/v1/completions", body: map[string]any{"prompt": "hi", "logprobs": 21}, status: 400, want: "logprobs"},
		{name: "stream_options without stream", path: "/v1/chat/completions", body: chatBody(map[string]any{"stream_options": map[string]any{}}), status: 400, want: "stream_options"},
		{name: "tools", path: "/v1/chat/completions", body: chatBody(map[string]any{"tools": []any{map[string]any{"type": "function"}}}), status: 400, want: "tools"},
		{name: "both template flags", path: "/v1/chat/completions", body: chatBody(map[string]any{"continue_final_message": true}), status: 400, want: "continue_final_message"},
		{name: "top_p", path: "/v1/chat/completions", body: chatBody(map[string]any{"top_p": 0}), status: 400, want: "top_p"},
		{name: "max_tokens 0", path: "/v1/completions", body: map[string]any{"prompt": "hi", "max_tokens": 0}, status: 400, want: "max_tokens"},
		{name: "batch", path: "/v1/completions", body: map[string]any{"prompt": []string{"a", "b"}}, status: 400, want: "batched"},
		{name: "negative token", path: "/v1/completions", body: map[string]any{"prompt": []int{1, -2}}, status: 400, want: "out of range"},
		{name: "out of vocabulary", path: "/v1/completions", body: map[string]any{"prompt": []int{1, 5000}}, status: 400,
			want: "the model server refused the request: Token id 5000 is out of vocabulary"},
		{name: "bad session id", path: "/v1/chat/completions", header: map[string]string{HeaderSessionID: "a/b"}, body: chatBody(nil), status: 400, want: "session id"},
		{name: "session ids differ", path: "/v1/chat/completions", header: map[string]string{HeaderSessionID: "a"}, body: chatBody(map[string]any{"session_id": "b"}), status: 400, want: "differ"},
		{name: "unknown session finish", path: "/v1/sessions/nobody/finish", body: map[string]any{"reward": 1}, status: 404, want: "no such session"},
		{name: "finish without reward", path: "/v1/sessions/nobody/finish", body: map[string]any{}, status: 400, want: "reward"},
		{name: "unknown path", path: "/v1/nothing", body: chatBody(nil), status: 404, want: "unknown endpoint POST /v1/nothing"},
		{name: "unknown GET path", method: http.MethodGet, path: "/", status: 404, want: "unknown endpoint GET /"},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions", status: 405,
			want: "method GET is not allowed on /v1/chat/completions", allow: "POST"},
		{name: "wrong method on a session", method: http.MethodPut, path: "/v1/sessions/s1", status: 405,
			want: "method PUT is not allowed on /v1/sessions/s1", allow: "DELETE, GET, HEAD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := f.do(cmp.Or(tc.method, http.MethodPost), tc.path, tc.header, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			msg, param := checkError(t, r, tc.status)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("message %q, want it to contain %q", msg, tc.want)
			}
			if got := cmp.Or(param, new(string)); *got != tc.param {
				t.Errorf("param %q, want %q", *got, tc.param)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
	// A failed first call leaves no session behind.
	if st := f.gw.Stats(); st.OpenSessions != 0 {
		t.Errorf("%d sessions open after failed calls", st.OpenSessions)
	}
}

// TestNoWorker answers 503 when no LLM worker is running.
func TestNoWorker(t *testing.T) {
	f := newFixture(t, fixtureOptions{noWorker: true})
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}}},
		{http.MethodPost, "/v1/completions", map[string]any{"prompt": []int{1, 2}}},
		{http.MethodGet, "/v1/models", nil},
		{http.MethodPost, "/tokenize", map[string]any{"prompt": "hi"}},
	} {
		r, err := f.do(tc.method, tc.path, map[string]string{HeaderSessionID: "s"}, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if msg, _ := checkError(t, r, http.StatusServiceUnavailable); msg != "the model server is unavailable: no LLM worker answered" {
			t.Errorf("%s: %s", tc.path, r)
		}
	}
	f.must(t, http.StatusNotFound, http.MethodPost, "/v1/sessions/s/finish", nil, map[string]any{"reward": 1})
	// The process itself is healthy: it is connected to NATS.
	f.must(t, http.StatusOK, http.MethodGet, "/health", nil, nil)
}

// TestTimeout answers 504 when the LLM workers do not answer in time.
func TestTimeout(t *testing.T) {
	f := newFixture(t, fixtureOptions{
		toy:     toyllm.Options{TokenLatency: time.Second},
		gateway: Options{RequestTimeout: 300 * time.Millisecond, Model: "toy", MaxModelLen: 4096},
	})
	r, err := f.do(http.MethodPost, "/v1/completions", nil, map[string]any{"prompt": []int{65, 66}, "max_tokens": 8})
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := checkError(t, r, http.StatusGatewayTimeout); msg != "the model server did not answer in time" {
		t.Errorf("%s", r)
	}
}

func TestModelsAndHealth(t *testing.T) {
	f := newFixture(t, fixtureOptions{toy: toyllm.Options{MaxModelLen: 2048}})
	f.must(t, http.StatusOK, http.MethodGet, "/health", nil, nil)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/models", nil, nil).decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != toyllm.DefaultModel || list.Data[0].MaxModelLen != 2048 || list.Data[0].Object != "model" {
		t.Errorf("models %+v", list)
	}
}

// TestServedModelName serves the workers' model under a configured name.
func TestServedModelName(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{Model: "policy"}})
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/models", nil, nil).decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 1 || list.Data[0].ID != "policy" || list.Data[0].MaxModelLen != toyllm.DefaultMaxModelLen {
		t.Errorf("models %+v", list)
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", nil, map[string]any{"model": "policy", "prompt": "hi", "max_tokens": 2})
	f.must(t, http.StatusNotFound, http.MethodPost, "/v1/completions", nil, map[string]any{"model": toyllm.DefaultModel, "prompt": "hi"})
}

// TestCompletions covers /v1/completions with a token-id prompt and a text prompt, in one
// session.
func TestCompletions(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	tok := toyllm.Tokenizer{}
	prompt := tok.Encode(chat.Render([]chat.Message{{Role: "user", Content: gamePrompt}}, true))
	type completion struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason string  `json:"finish_reason"`
			TokenIDs     []int32 `json:"token_ids"`
			PromptIDs    []int32 `json:"prompt_token_ids"`
			Logprobs     struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float32            `json:"token_logprobs"`
				TopLogprobs   []map[string]float32 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
		Object string `json:"object"`
	}
	hdr := map[string]string{HeaderSessionID: "cmpl"}
	var c1 completion
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", hdr, map[string]any{
		"prompt": prompt, "max_tokens": 48, "seed": 1, "logprobs": 0, "return_token_ids": true, "skip_special_tokens": false,
	})
	if err := r.decode(&c1); err != nil {
		t.Fatal(err)
	}
	ch := c1.Choices[0]
	if c1.Object != "text_completion" || !slices.Equal(ch.PromptIDs, prompt) {
		t.Fatalf("completion %s", r.body)
	}
	gen, ok := f.generatedFor(prompt)
	if !ok || !slices.Equal(gen[0], ch.TokenIDs) {
		t.Errorf("token_ids %v, the model generated %v", ch.TokenIDs, gen)
	}
	n := len(ch.TokenIDs)
	if len(ch.Logprobs.Tokens) != n || len(ch.Logprobs.TokenLogprobs) != n || len(ch.Logprobs.TopLogprobs) != n || len(ch.Logprobs.TextOffset) != n {
		t.Fatalf("logprobs %+v for %d tokens", ch.Logprobs, n)
	}
	// Without return_tokens_as_token_ids tokens are their texts, which make up the text.
	if joined := strings.Join(ch.Logprobs.Tokens, ""); ch.FinishReason == "stop" && joined != ch.Text+chat.ImEnd {
		t.Errorf("tokens %q do not spell the text %q and the stop token", joined, ch.Text)
	}
	for i, tk := range ch.Logprobs.Tokens {
		if lp, ok := ch.Logprobs.TopLogprobs[i][tk]; !ok || lp != ch.Logprobs.TokenLogprobs[i] || len(ch.Logprobs.TopLogprobs[i]) != 1 {
			t.Errorf("top_logprobs[%d] = %v, want only the sampled token", i, ch.Logprobs.TopLogprobs[i])
		}
	}

	// The next call's text prompt extends the first call's prompt and completion.
	text := tok.Decode(append(slices.Clone(prompt), ch.TokenIDs...)) + "\n" + chat.ImStart + "user\nHigher.\n" + chat.ImEnd + "\n" + chat.ImStart + "assistant\n"
	var c2 completion
	r = f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", hdr, map[string]any{
		"prompt": text, "max_tokens": 48, "seed": 2, "return_token_ids": true,
	})
	if err := r.decode(&c2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c2.Choices[0].PromptIDs, tok.Encode(text)) || r.header.Get(HeaderDrift) != "false" {
		t.Fatalf("text prompt: prompt ids %v, drift %q", c2.Choices[0].PromptIDs, r.header.Get(HeaderDrift))
	}
	if c2.Choices[0].Logprobs.Tokens != nil {
		t.Errorf("logprobs without asking for them")
	}
	f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/cmpl/finish", nil, map[string]any{"reward": 1})
	tr := f.trajectories(t, DefaultEnv)["cmpl"]
	if tr == nil || tr.Turns != 2 || !slices.Equal([]int32(tr.ObservationTokens[:tr.ActionRanges[1].Start]), c2.Choices[0].PromptIDs) ||
		!slices.Equal([]int32(tr.ObservationTokens[tr.ActionRanges[1].Start:tr.ActionRanges[1].End]), c2.Choices[0].TokenIDs) {
		t.Fatalf("trajectory %+v", tr)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestChatTemplateSettings continues a final message and passes chat_template_kwargs.
func TestChatTemplateSettings(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	msgs := []chat.Message{{Role: "user", Content: gamePrompt}, {Role: "assistant", Content: "My guess is"}}
	var ct chatTurn
	err := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, map[string]any{
		"messages": msgs, "add_generation_prompt": false, "continue_final_message": true,
		"chat_template_kwargs": map[string]any{"enable_thinking": false}, "max_tokens": 8, "return_token_ids": true,
	}).decode(&ct)
	if err != nil {
		t.Fatal(err)
	}
	want := toyllm.Tokenizer{}.Encode(strings.TrimSuffix(chat.Render(msgs, false), chat.ImEnd+"\n"))
	if !slices.Equal(ct.PromptTokenIDs, want) {
		t.Errorf("prompt %v, want the open final message %v", ct.PromptTokenIDs, want)
	}
	if ct.Choices[0].FinishReason != "length" && ct.Choices[0].FinishReason != "stop" {
		t.Errorf("finish_reason %q", ct.Choices[0].FinishReason)
	}
}

// TestTokenizeRoundTrip tokenizes text and messages and detokenizes the result.
func TestTokenizeRoundTrip(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	type tokens struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int32  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	text := "Héllo <|im_start|>world"
	var tk tokens
	if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, map[string]any{"prompt": text, "return_token_strs": true}).decode(&tk); err != nil {
		t.Fatal(err)
	}
	if want := (toyllm.Tokenizer{}).Encode(text); !slices.Equal(tk.Tokens, want) || tk.Count != len(want) || tk.MaxModelLen != toyllm.DefaultMaxModelLen {
		t.Fatalf("tokenize %+v, want %v", tk, want)
	}
	if len(tk.TokenStrs) != len(tk.Tokens) || !slices.Contains(tk.TokenStrs, chat.ImStart) {
		t.Errorf("token_strs %q", tk.TokenStrs)
	}
	var dt struct {
		Prompt string `json:"prompt"`
	}
	if err := f.must(t, http.StatusOK, http.MethodPost, "/detokenize", nil, map[string]any{"tokens": tk.Tokens}).decode(&dt); err != nil {
		t.Fatal(err)
	}
	if dt.Prompt != text {
		t.Errorf("detokenize %q, want %q", dt.Prompt, text)
	}

	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, map[string]any{"messages": msgs}).decode(&tk); err != nil {
		t.Fatal(err)
	}
	if want := (toyllm.Tokenizer{}).Encode(chat.Render(msgs, true)); !slices.Equal(tk.Tokens, want) || tk.TokenStrs != nil {
		t.Errorf("tokenize messages %+v, want %v", tk, want)
	}
	if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, map[string]any{"prompt": ""}).decode(&tk); err != nil {
		t.Fatal(err)
	}
	if tk.Count != 0 || tk.Tokens == nil || len(tk.Tokens) != 0 {
		t.Errorf("tokenize empty %+v", tk)
	}
	f.must(t, http.StatusBadRequest, http.MethodPost, "/tokenize", nil, map[string]any{})
	f.must(t, http.StatusBadRequest, http.MethodPost, "/detokenize", nil, map[string]any{})
	f.must(t, http.StatusBadRequest, http.MethodPost, "/detokenize", nil, map[string]any{"tokens": []int{99999}})
}

// TestSessionTokenLimit refuses a call that would take a session past its token bound.
func TestSessionTokenLimit(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{MaxSessionTokens: 200}})
	a := newAgent("long", 1)
	r := f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "long"},
		map[string]any{"messages": a.history, "max_tokens": 500})
	if !strings.Contains(r.errorMessage(), "token limit") {
		t.Errorf("%s", r)
	}
	if st := f.gw.Stats(); st.OpenSessions != 0 {
		t.Errorf("%d sessions open", st.OpenSessions)
	}
}

// TestTooManySessions refuses a new session beyond the bound.
func TestTooManySessions(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{MaxSessions: 1}})
	if _, _, err := newAgent("one", 1).turn(f, nil); err != nil {
		t.Fatal(err)
	}
	_, r, err := newAgent("two", 2).turn(f, nil)
	if err == nil || r == nil || r.status != http.StatusTooManyRequests {
		t.Fatalf("second session: %v %v, want 429", r, err)
	}
}

func TestSessionIDSources(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": []map[string]any{{"role": "user", "content": gamePrompt}}, "max_tokens": 8}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, tc := range []struct {
		header map[string]string
		body   map[string]any
		want   string
	}{
		{map[string]string{HeaderSessionID: "h"}, body(nil), "h"},
		{nil, body(map[string]any{"session_id": "b"}), "b"},
		{nil, body(map[string]any{"extra_body": map[string]any{"session_id": "x"}}), "x"},
		{nil, body(nil), "auto-"}, // a call without an id opens a session of its own
	} {
		r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", tc.header, tc.body)
		if got := r.header.Get(HeaderSessionID); got != tc.want && !(tc.want == "auto-" && strings.HasPrefix(got, tc.want)) {
			t.Errorf("session %q, want %q", got, tc.want)
		}
	}
	for _, id := range []string{"h", "b", "x"} {
		f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/"+id, nil, nil)
	}
	if st := f.gw.Stats(); st.OpenSessions != 4 {
		t.Errorf("%d sessions open, want 4", st.OpenSessions)
	}
}

// TestSamplingPassThrough checks that a request's own sampling fields reach the model: a
// penalty the stand-in does not implement is refused by it, not dropped on the way.
func TestSamplingPassThrough(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	r := f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/completions", nil,
		map[string]any{"prompt": "hi", "presence_penalty": 0.5})
	if !strings.Contains(r.errorMessage(), "penalties are not supported by toyllm") {
		t.Errorf("%s", r)
	}
	// Greedy decoding is deterministic and stop strings cut the text.
	var out [2]struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason string  `json:"finish_reason"`
			TokenIDs     []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	prompt := toyllm.Tokenizer{}.Encode(chat.Render([]chat.Message{{Role: "user", Content: gamePrompt}}, true))
	for i := range out {
		if err := f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", nil, map[string]any{
			"prompt": prompt, "temperature": 0, "max_tokens": 64, "return_token_ids": true, "stop": "boxed",
		}).decode(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(out[0].Choices[0].TokenIDs, out[1].Choices[0].TokenIDs) {
		t.Errorf("greedy completions differ: %v, %v", out[0].Choices[0].TokenIDs, out[1].Choices[0].TokenIDs)
	}
	if c := out[0].Choices[0]; c.FinishReason != "stop" || strings.Contains(c.Text, "boxed") {
		t.Errorf("stop string: %+v", c)
	}
	// skip_special_tokens false keeps special tokens in the text.
	var ct chatTurn
	if err := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, map[string]any{
		"messages": []map[string]any{{"role": "user", "content": gamePrompt}}, "temperature": 0, "max_tokens": 64,
		"skip_special_tokens": false, "include_stop_str_in_output": true, "return_token_ids": true,
	}).decode(&ct); err != nil {
		t.Fatal(err)
	}
	if ids := ct.Choices[0].TokenIDs; ids[len(ids)-1] == toyllm.ImEndID && !strings.HasSuffix(ct.Choices[0].Message.Content, chat.ImEnd) {
		t.Errorf("content %q lacks the stop token's text", ct.Choices[0].Message.Content)
	}
}

// TestStopWhileServing shuts a gateway down with a session open: Serve returns, and the
// session ends as a failure record rather than vanishing.
func TestStopWhileServing(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	gw, err := New(f.nc, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := gw.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := f.url
	f.url = url // the agent talks to the second gateway
	if _, _, err := newAgent("open", 1).turn(f, nil); err != nil {
		t.Fatal(err)
	}
	f.url = first
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fails := f.failures(t)
	if len(fails) != 1 || fails[0].EpisodeID != "open" || !strings.Contains(fails[0].Reason, "gateway stopped") {
		t.Fatalf("failures %+v", fails)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New without a connection succeeded")
	}
}
