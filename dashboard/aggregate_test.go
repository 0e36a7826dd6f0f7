package dashboard

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// traj is a valid trajectory of env with turns turns: a 2-token prompt,
// then 2 generated tokens and 1 of feedback a turn, 3 ms of generation a
// turn, the reward on the last step.
func traj(run, id, env string, turns int32, success bool, reward float64) *messages.Trajectory {
	n := 2 + 3*int(turns)
	t := &messages.Trajectory{
		V: messages.Version, RunID: run, EpisodeID: id, GroupID: id, GroupSize: 1, Env: env,
		ObservationTokens: make(messages.Tokens, n), RolloutLogProbs: make(messages.Logprobs, n),
		StepRewards: make([]float64, turns), Turns: turns, Success: success, Reward: reward,
		GenerateNanos: int64(turns) * 3e6,
	}
	for i := range int(turns) {
		start := int32(2 + 3*i)
		t.ActionRanges = append(t.ActionRanges, messages.Range{Start: start, End: start + 2})
		t.RolloutLogProbs[start], t.RolloutLogProbs[start+1] = -0.5, -0.5
	}
	if turns > 0 {
		t.StepRewards[turns-1] = reward
	}
	return t
}

// clock is a settable time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func testOptions(c *clock) Options {
	o := Options{Step: time.Second, Buckets: 5, LongStep: 10 * time.Second, LongBuckets: 3, MaxEnvs: 3, LatestFailures: 4, Dedup: 8, Now: c.now}
	o.setDefaults()
	return o
}

// TestAggregatorWindows: outcomes land in the bucket of their arrival; the
// series covers only the ring's windows while the totals keep everything;
// the rates of a bucket are per second of it.
func TestAggregatorWindows(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	o := testOptions(c)
	a := newAggregator(o, c.now())
	for i := range 20 {
		// Two trajectories of 3 turns a second, for 20 seconds.
		a.trajectory(c.now(), traj("r", fmt.Sprintf("a%d", i), "env-a", 3, i%2 == 0, 1))
		a.trajectory(c.now(), traj("r", fmt.Sprintf("b%d", i), "env-a", 3, false, 0))
		c.advance(time.Second)
	}
	c.advance(500 * time.Millisecond)
	var s Snapshot
	a.fill(&s, c.now(), RangeRecent)
	if s.Totals.Trajectories != 40 || s.Totals.Turns != 120 || s.Totals.Successes != 10 || s.Totals.Tokens != 440 || s.Totals.ActionTokens != 240 {
		t.Fatalf("totals %+v", s.Totals)
	}
	if s.Totals.SuccessRate != 0.25 || s.Totals.MeanReward != 0.5 || s.Totals.MeanTurns != 3 {
		t.Fatalf("ratios %+v", s.Totals)
	}
	// Five one-second buckets; the newest (empty, half a second in) is the
	// current one.
	if len(s.Series.Time) != 5 {
		t.Fatalf("%d points, want the ring's 5: %+v", len(s.Series.Time), s.Series)
	}
	want := []float64{6, 6, 6, 6, 0}
	for i, w := range want {
		if s.Series.TurnsPerSec[i] != w || s.Series.EpisodesPerSec[i] != w/3 {
			t.Fatalf("turns/s %v, episodes/s %v; want %v", s.Series.TurnsPerSec, s.Series.EpisodesPerSec, want)
		}
	}
	for i := 1; i < len(s.Series.Time); i++ {
		if s.Series.Time[i]-s.Series.Time[i-1] != 1000 {
			t.Fatalf("bucket times %v", s.Series.Time)
		}
	}
	// The headline rates: the last 10 s of the recent ring, which holds 5.
	if r := s.Rates.TurnsPerSec; math.Abs(r-24.0/4.5) > 1e-9 {
		t.Fatalf("turns/s %v, want %v", r, 24.0/4.5)
	}
	if len(s.Envs) != 1 || s.Envs[0].Env != "env-a" || len(s.Envs[0].SuccessRate) != 5 {
		t.Fatalf("envs %+v", s.Envs)
	}
	if sr := s.Envs[0].SuccessRate; *sr[0] != 0.5 || sr[4] != nil {
		t.Fatalf("success series %v", sr)
	}

	// The long range: 10 s buckets, three of them.
	a.fill(&s, c.now(), RangeLong)
	if len(s.Series.Time) != 3 || s.Series.StepSeconds != 10 || s.Series.SpanSeconds != 30 {
		t.Fatalf("long series %+v", s.Series)
	}
	if s.Series.TurnsPerSec[0] != 6 || s.Series.TurnsPerSec[1] != 6 {
		t.Fatalf("long turns/s %v", s.Series.TurnsPerSec)
	}

	// Histograms: 3 ms per turn (≤5 ms bin), 3 turns.
	lat, turns := s.TurnLatency, s.EpisodeTurns
	if lat.Counts[2] != 40 || turns.Counts[2] != 40 || len(lat.Counts) != len(lat.Bounds)+1 {
		t.Fatalf("histograms %+v %+v", lat, turns)
	}
}

// TestAggregatorStartsAtItsStart: a dashboard that started a moment ago
// shows only the buckets since, the first rated over the part it saw.
func TestAggregatorStartsAtItsStart(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 250e6)}
	a := newAggregator(testOptions(c), c.now())
	c.advance(250 * time.Millisecond)
	a.trajectory(c.now(), traj("r", "x", "e", 1, true, 1))
	c.advance(time.Second) // 1.25 s after the start
	var s Snapshot
	a.fill(&s, c.now(), RangeRecent)
	if len(s.Series.Time) != 2 || s.Series.TurnsPerSec[0] != 1/0.75 {
		t.Fatalf("series %+v", s.Series)
	}
	if got, want := s.Rates.TurnsPerSec, 1/1.25; math.Abs(got-want) > 1e-9 {
		t.Fatalf("turns/s %v, want %v", got, want)
	}
}

// TestAggregatorBoundedMemory feeds a week of outcomes of ever new envs,
// kinds and episodes: the rings, env maps, failure lists and the set of
// seen outcomes never grow past their bounds.
func TestAggregatorBoundedMemory(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	o := testOptions(c)
	a := newAggregator(o, c.now())
	week := 7 * 24 * time.Hour
	n := 0
	for d := time.Duration(0); d < week; d += 7 * time.Minute {
		n++
		env := fmt.Sprintf("env-%d", n%50)
		a.trajectory(c.now(), traj("r", fmt.Sprintf("t%d", n), env, 2, true, 1))
		a.failure(c.now(), &messages.Failure{V: messages.Version, RunID: "r", EpisodeID: fmt.Sprintf("f%d", n), Env: env,
			Kind: fmt.Sprintf("kind-%d", n%100), Reason: fmt.Sprintf("reason %d %0600d", n, 0)})
		c.advance(7 * time.Minute)
	}
	if len(a.recent.buckets) != 5 || len(a.long.buckets) != 3 {
		t.Fatalf("rings grew: %d, %d", len(a.recent.buckets), len(a.long.buckets))
	}
	for _, r := range []*ring{a.recent, a.long} {
		for _, b := range r.buckets {
			if len(b.envs) > o.MaxEnvs+1 {
				t.Fatalf("a bucket holds %d envs, bound %d", len(b.envs), o.MaxEnvs+1)
			}
		}
	}
	if len(a.envs) != o.MaxEnvs+1 || a.envs[otherEnv] == nil {
		t.Fatalf("%d envs: %v", len(a.envs), a.envs)
	}
	if len(a.kinds) != maxKinds+1 || a.kinds[otherKind] == 0 {
		t.Fatalf("%d kinds", len(a.kinds))
	}
	if len(a.latest) != o.LatestFailures || len(a.latest[0].Reason) > maxReason+len("…") {
		t.Fatalf("%d latest failures, first reason %d bytes", len(a.latest), len(a.latest[0].Reason))
	}
	if len(a.seen.keys) != o.Dedup || len(a.seen.order) != o.Dedup {
		t.Fatalf("seen set holds %d keys in %d slots, bound %d", len(a.seen.keys), len(a.seen.order), o.Dedup)
	}
	var s Snapshot
	a.fill(&s, c.now(), RangeLong)
	if s.Totals.Trajectories != int64(n) || s.Totals.Failures != int64(n) || len(s.Series.Time) != 3 {
		t.Fatalf("totals %+v, %d points", s.Totals, len(s.Series.Time))
	}
	var sum int64
	for _, e := range s.Envs {
		sum += e.Trajectories
	}
	if sum != int64(n) {
		t.Fatalf("per-env trajectories add up to %d, want %d", sum, n)
	}
	if s.LatestFailures[0].EpisodeID != fmt.Sprintf("f%d", n) {
		t.Fatalf("latest failure first: %+v", s.LatestFailures[0])
	}
}

// TestAggregatorRepeats: an outcome seen again (a collector's publish
// retried) counts once; a failure record without an episode always counts.
func TestAggregatorRepeats(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	a := newAggregator(testOptions(c), c.now())
	a.trajectory(c.now(), traj("r", "x", "e", 1, true, 1))
	a.trajectory(c.now(), traj("r", "x", "e", 1, true, 1))
	a.trajectory(c.now(), traj("other-run", "x", "e", 1, true, 1))
	f := &messages.Failure{V: messages.Version, Kind: messages.FailureMalformed, Reason: "bad"}
	a.failure(c.now(), f)
	a.failure(c.now(), f)
	var s Snapshot
	a.fill(&s, c.now(), RangeRecent)
	if s.Totals.Trajectories != 2 || s.Totals.Failures != 2 || s.Totals.Duplicates != 1 {
		t.Fatalf("totals %+v", s.Totals)
	}
}

func TestHistogramBins(t *testing.T) {
	h := newHistogram(1, 2, 5)
	for _, v := range []float64{0, 1, 1.5, 2, 5, 5.01, 100} {
		h.observe(v)
	}
	if want := []int64{2, 2, 1, 2}; fmt.Sprint(h.counts) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", h.counts, want)
	}
}

// TestMergeWorkers: a worker that answers is judged against the policy
// state; one that stops answering turns silent and is forgotten after five
// minutes.
func TestMergeWorkers(t *testing.T) {
	p := &poller{workers: map[string]Worker{}}
	t0 := time.Unix(1_000_000, 0)
	pol := &messages.PolicyState{V: messages.Version, Epoch: 2, Version: 1}
	st := func(kind, id string, epoch uint64, paused bool) messages.WorkerStatus {
		return messages.WorkerStatus{V: messages.Version, Kind: kind, ID: id, Epoch: epoch, Paused: paused}
	}
	health := func(ws []Worker) string {
		var b []string
		for _, w := range ws {
			b = append(b, w.Kind+"/"+w.ID+"="+w.Health)
		}
		return fmt.Sprint(b)
	}
	ws := p.mergeWorkers(t0, []messages.WorkerStatus{st("env", "e1", 2, false), st("llm", "l1", 1, false), st("llm", "l2", 2, true)}, pol)
	if got, want := health(ws), "[llm/l1=behind llm/l2=paused env/e1=ok]"; got != want {
		t.Fatalf("health %s, want %s", got, want)
	}
	ws = p.mergeWorkers(t0.Add(time.Minute), []messages.WorkerStatus{st("env", "e1", 2, false)}, pol)
	if got, want := health(ws), "[llm/l1=silent llm/l2=silent env/e1=ok]"; got != want {
		t.Fatalf("health %s, want %s", got, want)
	}
	ws = p.mergeWorkers(t0.Add(6*time.Minute), []messages.WorkerStatus{st("env", "e1", 2, false)}, pol)
	if got, want := health(ws), "[env/e1=ok]"; got != want {
		t.Fatalf("health %s, want %s", got, want)
	}
}
