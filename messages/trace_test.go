package messages_test

import (
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
)

func TestTraceIDs(t *testing.T) {
	a, b := messages.NewTraceID(), messages.NewTraceID()
	if !messages.ValidTraceID(a) || !messages.ValidTraceID(b) || a == b {
		t.Fatalf("NewTraceID: %q, %q", a, b)
	}
	d := messages.TraceIDOf("run-1", "run-1-000001")
	if !messages.ValidTraceID(d) || d != messages.TraceIDOf("run-1", "run-1-000001") || d == messages.TraceIDOf("run-1", "run-1-000002") {
		t.Fatalf("TraceIDOf is not a stable, distinct trace id: %q", d)
	}
	if messages.TraceIDOf("ab", "c") == messages.TraceIDOf("a", "bc") {
		t.Fatal("TraceIDOf mixes up its names")
	}
	for _, bad := range []string{"", strings.Repeat("0", 32), strings.ToUpper(a), a[:31], a + "0", "g" + a[1:]} {
		if messages.ValidTraceID(bad) {
			t.Errorf("ValidTraceID(%q) = true", bad)
		}
	}
}

func TestTraceparent(t *testing.T) {
	tid, sid := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h := messages.Traceparent(tid, sid)
	if h != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("Traceparent = %q", h)
	}
	gt, gs, ok := messages.ParseTraceparent(h)
	if !ok || gt != tid || gs != sid {
		t.Fatalf("ParseTraceparent(%q) = %q, %q, %v", h, gt, gs, ok)
	}
	if _, _, ok := messages.ParseTraceparent("01-" + tid + "-" + sid + "-00-future"); !ok {
		t.Error("a later version with more fields is refused")
	}
	if s := messages.NewSpanID(); len(s) != 16 || s == strings.Repeat("0", 16) {
		t.Errorf("NewSpanID = %q", s)
	}
	for _, bad := range []string{
		"", "00-" + tid + "-" + sid, "ff-" + tid + "-" + sid + "-01", "00-" + strings.Repeat("0", 32) + "-" + sid + "-01",
		"00-" + tid + "-0000000000000000-01", "00-" + tid + "-" + sid + "-01-extra", "00_" + tid + "-" + sid + "-01",
		"00-" + strings.ToUpper(tid) + "-" + sid + "-01", "00-" + tid + "-" + sid + "-zz",
	} {
		if _, _, ok := messages.ParseTraceparent(bad); ok {
			t.Errorf("ParseTraceparent(%q) accepted", bad)
		}
	}
}

func TestValidateTraceFields(t *testing.T) {
	req := &messages.EpisodeRequest{V: messages.Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "math:gsm8k", MaxLength: 8, TraceID: "xyz"}
	if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "trace_id") {
		t.Fatalf("a bad trace id passes: %v", err)
	}
	ev := &messages.StepEvent{V: messages.Version, EpisodeID: "e", Turn: 1, Done: true, Timings: messages.TurnTimings{Step: -1}}
	if err := ev.Validate(); err == nil || !strings.Contains(err.Error(), "StepEvent.timings.step_ns") {
		t.Fatalf("a negative timing passes: %v", err)
	}
	traj := &messages.Trajectory{
		V: messages.Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "math:gsm8k",
		ObservationTokens: messages.Tokens{1, 2}, ActionRanges: messages.Ranges{{1, 2}}, RolloutLogProbs: messages.Logprobs{0, -1},
		Reward: 1, Turns: 1, StepRewards: []float64{1}, Timings: []messages.TurnTimings{{Wall: 3}, {Wall: 4}},
	}
	if err := traj.Validate(); err == nil || !strings.Contains(err.Error(), "timings") {
		t.Fatalf("two timings for one turn pass: %v", err)
	}
	traj.Timings = traj.Timings[:1]
	traj.Timings[0].Queue = -5
	if err := traj.Validate(); err == nil || !strings.Contains(err.Error(), "Trajectory.timings[0].queue_ns") {
		t.Fatalf("a negative queue passes: %v", err)
	}
	traj.Timings[0].Queue = 0
	if err := traj.Validate(); err != nil {
		t.Fatal(err)
	}
}
