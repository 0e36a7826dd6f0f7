package gateway

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

func rg(start, end int32) messages.Range { return messages.Range{Start: start, End: end} }

func reply(finish string, tokens ...int32) *messages.GenerateReply {
	lp := make(messages.Logprobs, len(tokens))
	for i := range lp {
		lp[i] = -0.25 * float32(i+1)
	}
	return &messages.GenerateReply{V: messages.Version, Tokens: tokens, Logprobs: lp, FinishReason: finish}
}

// TestTraceSegments records calls that extend the trace, one that does not, and checks the
// trajectories built from them.
func TestTraceSegments(t *testing.T) {
	st := newStore(4, 1000, time.Minute)
	now := time.Unix(1000, 0)
	l, err := st.acquire("s", true, now)
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		prompt []int32
		reply  *messages.GenerateReply
		seg    int
		drift  bool
	}{
		{[]int32{1, 2, 3}, reply("stop", 10, 11), 0, false},
		{[]int32{1, 2, 3, 10, 11, 4, 5}, reply("length", 12), 0, false},
		{[]int32{1, 2, 3, 10, 11, 4, 5, 12}, reply("stop", 13), 0, false}, // nothing between the calls
		{[]int32{1, 2, 9}, reply("stop", 14, 15, 16), 1, true},            // edited history
		{[]int32{1, 2, 9, 14}, reply("length", 17), 2, true},              // shorter than the trace
	}
	for i, c := range calls {
		if err := l.reserve(c.prompt, 8); err != nil {
			t.Fatal(err)
		}
		rec := l.record(c.prompt, c.reply, "p", 5, now)
		if rec.segment != c.seg || (rec.drift != "") != c.drift || rec.call != i {
			t.Errorf("call %d: %+v, want segment %d drift %v", i, rec, c.seg, c.drift)
		}
	}
	trajs := l.trajectories(&outcome{reward: 2, scores: 2, env: "e", groupID: "s", size: 1}, now)
	if len(trajs) != 3 {
		t.Fatalf("%d trajectories", len(trajs))
	}
	want := []struct {
		id     string
		tokens []int32
		ranges messages.Ranges
		finish string
	}{
		{"s", []int32{1, 2, 3, 10, 11, 4, 5, 12, 13}, messages.Ranges{rg(3, 5), rg(7, 8), rg(8, 9)}, "stop"},
		{"s/seg1", []int32{1, 2, 9, 14, 15, 16}, messages.Ranges{rg(3, 6)}, "stop"},
		{"s/seg2", []int32{1, 2, 9, 14, 17}, messages.Ranges{rg(4, 5)}, "length"},
	}
	for k, tr := range trajs {
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		w := want[k]
		if tr.EpisodeID != w.id || !slices.Equal([]int32(tr.ObservationTokens), w.tokens) || !slices.Equal(tr.ActionRanges, w.ranges) ||
			tr.FinishReason != w.finish || tr.Truncated != (w.finish == "length") || tr.Turns != int32(len(w.ranges)) {
			t.Errorf("segment %d: %+v", k, tr)
		}
		if tr.StepRewards[len(tr.StepRewards)-1] != 2 || tr.Reward != 2 {
			t.Errorf("segment %d: step rewards %v", k, tr.StepRewards)
		}
		if (tr.ExtraLogs["drift"] == 1) != (k > 0) || tr.ExtraLogs["segment_index"] != float64(k) || tr.ExtraLogs["segment_count"] != 3 {
			t.Errorf("segment %d: extra_logs %v", k, tr.ExtraLogs)
		}
	}
	// Logprobs: 0 outside the actions, each action's own inside.
	if got := trajs[0].RolloutLogProbs; !slices.Equal(got, messages.Logprobs{0, 0, 0, -0.25, -0.5, 0, 0, -0.25, -0.25}) {
		t.Errorf("logprobs %v", got)
	}
	if !strings.Contains(trajs[2].Info["drift_reason"], "shorter") || !strings.Contains(trajs[1].Info["drift_reason"], "at token 2") {
		t.Errorf("drift reasons %q, %q", trajs[1].Info["drift_reason"], trajs[2].Info["drift_reason"])
	}
	l.release(true, now)
	if s, err := st.summary("s", now); err != nil || s.Calls != 5 || s.Segments != 3 || s.Tokens != 9+6+5 {
		t.Errorf("summary %+v, %v", s, err)
	}
}

func TestStoreLifecycle(t *testing.T) {
	st := newStore(2, 10, time.Minute)
	now := time.Unix(1000, 0)
	if _, err := st.acquire("x", false, now); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	a, err := st.acquire("a", true, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.acquire("a", true, now); !errors.Is(err, ErrSessionBusy) {
		t.Errorf("busy session: %v", err)
	}
	// A first call that records nothing leaves no session.
	a.release(true, now)
	if st.open() != 0 {
		t.Fatalf("%d sessions open after an empty first call", st.open())
	}
	a, _ = st.acquire("a", true, now)
	a.record([]int32{1}, reply("stop", 2), "", 0, now)
	if err := a.reserve([]int32{1, 2, 3}, 8); !errors.Is(err, ErrSessionTooLong) {
		t.Errorf("over the token bound: %v", err)
	}
	a.release(true, now)
	b, _ := st.acquire("b", true, now)
	b.record([]int32{1}, reply("stop", 2), "", 0, now)
	b.release(true, now.Add(time.Hour))
	if _, err := st.acquire("c", true, now); !errors.Is(err, ErrTooManySessions) {
		t.Errorf("third session: %v", err)
	}
	// Only a is idle long enough.
	idle := st.idle(now.Add(time.Minute), now.Add(time.Minute))
	if len(idle) != 1 || idle[0].s.id != "a" {
		t.Fatalf("idle %v", idle)
	}
	if _, err := st.acquire("a", false, now); !errors.Is(err, ErrSessionBusy) {
		t.Errorf("session being expired: %v", err)
	}
	idle[0].end(now)
	if _, err := st.acquire("a", true, now); !errors.Is(err, ErrSessionFinished) {
		t.Errorf("ended session: %v", err)
	}
	if _, err := st.summary("a", now); !errors.Is(err, ErrSessionFinished) {
		t.Errorf("ended session summary: %v", err)
	}
	// The ended id is forgotten after finishedTTL.
	later := now.Add(2 * time.Minute)
	st.idle(later.Add(-time.Hour), later)
	if _, err := st.acquire("a", true, later); err != nil {
		t.Errorf("after finishedTTL: %v", err)
	}
}

func TestEndedIDsBounded(t *testing.T) {
	st := newStore(1, 10, time.Hour)
	now := time.Unix(1000, 0)
	for i := range 10 {
		l, err := st.acquire(string(rune('a'+i)), true, now)
		if err != nil {
			t.Fatal(err)
		}
		l.end(now)
	}
	if len(st.ended) != 4 || len(st.endedOrder) != 4 {
		t.Errorf("%d ended ids remembered, want the bound 4", len(st.ended))
	}
	if _, err := st.acquire("a", true, now); err != nil {
		t.Errorf("the oldest ended id is still refused: %v", err)
	}
}

func TestCheckSessionID(t *testing.T) {
	for _, ok := range []string{"a", "agent-1", "ünï", strings.Repeat("x", 256), "a.b:c"} {
		if err := checkSessionID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "a\nb", strings.Repeat("x", 257), "\x7f"} {
		if err := checkSessionID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		requested         *int64
		prompt, window    int
		fallback          int64
		fill              bool
		want              int32
		wantErrSubstrings string
	}{
		{nil, 10, 100, 16, false, 16, ""},
		{nil, 10, 100, 16, true, 90, ""},
		{nil, 10, 0, 4096, true, 4096, ""},
		{n(90), 10, 100, 16, false, 90, ""},
		{n(91), 10, 100, 16, false, 0, "maximum context length is 100"},
		{nil, 100, 100, 16, true, 0, "100 input tokens"},
		{n(0), 10, 100, 16, false, 0, "at least 1"},
		{n(1 << 40), 10, 0, 16, false, 1<<31 - 1, ""},
	} {
		got, err := maxTokens(tc.requested, tc.prompt, tc.window, tc.fallback, tc.fill)
		if tc.wantErrSubstrings != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstrings) {
				t.Errorf("%+v: %v, want an error with %q", tc, err, tc.wantErrSubstrings)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %d, %v; want %d", tc, got, err, tc.want)
		}
	}
}

// TestInterchangeableSessions: id-less sessions whose traces are the same
// (samples of a group whose turns came out alike) are interchangeable: a
// call extending that trace goes to a free one while another is busy, and
// a finish by trace takes the oldest free one instead of refusing them all
// as ambiguous.
func TestInterchangeableSessions(t *testing.T) {
	st := newStore(8, 100, time.Minute)
	now := time.Unix(1000, 0)
	ids := 0
	newID := func() string { ids++; return fmt.Sprintf("auto-%d", ids) }
	first := []int32{1, 2}
	for i := range 2 {
		l, err := st.attach("scope", first, nil, newID, now.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l.record(first, reply("stop", 3), "", 0, now)
		l.release(true, now)
	}
	next := []int32{1, 2, 3, 4}
	a, err := st.attach("scope", next, nil, newID, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.attach("scope", next, nil, newID, now)
	if err != nil {
		t.Fatalf("second call on equal traces: %v (a free session matched)", err)
	}
	if a.s == b.s || !a.s.auto || !b.s.auto || ids != 2 {
		t.Fatalf("calls went to %q and %q, %d sessions made; want the two existing ones", a.s.id, b.s.id, ids)
	}
	if _, err := st.attach("scope", next, nil, newID, now); !errors.Is(err, ErrSessionBusy) {
		t.Errorf("third call while both are busy: %v, want ErrSessionBusy", err)
	}
	a.release(true, now)
	b.release(true, now)
	trace := []int32{1, 2, 3}
	l, err := st.byTrace(trace)
	if err != nil {
		t.Fatalf("finish by a trace two sessions hold: %v", err)
	}
	if l.s.id != "auto-1" {
		t.Errorf("finish by trace took %q, want the oldest, auto-1", l.s.id)
	}
	if _, err := st.byTrace(trace); err != nil {
		t.Errorf("finish by trace while the oldest is busy: %v, want the other", err)
	}
}

// TestAttachLongestTrace: a call goes to the session whose trace its prompt
// extends, the longest one, among sessions sharing prefixes.
func TestAttachLongestTrace(t *testing.T) {
	st := newStore(16, 100, time.Minute)
	now := time.Unix(1000, 0)
	ids := 0
	newID := func() string { ids++; return fmt.Sprintf("auto-%d", ids) }
	open := func(prompt []int32, answer int) string {
		t.Helper()
		l, err := st.attach("scope", prompt, nil, newID, now)
		if err != nil {
			t.Fatal(err)
		}
		l.record(prompt, reply("stop", int32(answer)), "", 0, now)
		l.release(true, now)
		return l.s.id
	}
	short := open([]int32{1}, 2)   // trace 1 2
	long := open([]int32{1, 2}, 3) // trace 1 2 3: a prompt no longer than a trace opens its own session
	other := open([]int32{7}, 8)
	for _, tc := range []struct {
		prompt []int32
		want   string
	}{
		{[]int32{1, 2, 3, 4}, long},
		{[]int32{1, 2, 9}, short},
		{[]int32{7, 8, 9}, other},
	} {
		l, err := st.attach("scope", tc.prompt, nil, newID, now)
		if err != nil {
			t.Fatal(err)
		}
		if l.s.id != tc.want {
			t.Errorf("prompt %v went to %q, want %q", tc.prompt, l.s.id, tc.want)
		}
		l.release(false, now)
	}
	if l, err := st.attach("scope", []int32{5, 6}, nil, newID, now); err != nil || l.s.id == short || l.s.id == long || l.s.id == other {
		t.Errorf("a prompt extending no trace: %v, %v; want a new session", l, err)
	}
}
