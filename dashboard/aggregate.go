package dashboard

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// otherEnv (and otherKind) collect what comes after the first MaxEnvs env ids
// (or maxKinds failure kinds), so a stream of made-up ids cannot grow the
// dashboard's memory.
const (
	otherEnv  = "(other envs)"
	otherKind = "(other kinds)"
	maxKinds  = 64
)

// maxReason bounds the text kept of each of the latest failure reasons.
const maxReason = 500

// counts are the outcomes of one env, or of all, in one time bucket or in
// total.
type counts struct {
	Trajectories, Failures, Successes, Truncated int64
	Turns, Tokens, ActionTokens                  int64
	RewardSum                                    float64
}

func (c *counts) addTrajectory(t *messages.Trajectory) {
	c.Trajectories++
	c.Turns += int64(t.Turns)
	c.RewardSum += t.Reward
	if t.Success {
		c.Successes++
	}
	if t.Truncated {
		c.Truncated++
	}
	c.addTokens(t.ObservationTokens, t.ActionRanges)
	for _, s := range t.Samples {
		c.addTokens(s.ObservationTokens, s.ActionRanges)
	}
}

// addTokens counts tokens as rollout run's summary does: every observation
// token, and the generated ones among them.
func (c *counts) addTokens(toks messages.Tokens, actions messages.Ranges) {
	c.Tokens += int64(len(toks))
	for _, r := range actions {
		c.ActionTokens += int64(r.End - r.Start)
	}
}

func (c *counts) add(o counts) {
	c.Trajectories += o.Trajectories
	c.Failures += o.Failures
	c.Successes += o.Successes
	c.Truncated += o.Truncated
	c.Turns += o.Turns
	c.Tokens += o.Tokens
	c.ActionTokens += o.ActionTokens
	c.RewardSum += o.RewardSum
}

// bucket is one time window of a ring: what arrived between start and
// start + the ring's step.
type bucket struct {
	start int64 // unix nanoseconds, a multiple of the step; 0: never used
	all   counts
	envs  map[string]*counts // at most MaxEnvs+1 keys
}

// ring keeps the last len(buckets) windows of step each: a fixed amount of
// memory, however long the dashboard runs. A bucket is reused once its
// window has passed out of the ring.
type ring struct {
	step    time.Duration
	buckets []bucket
}

func newRing(step time.Duration, n int) *ring {
	return &ring{step: step, buckets: make([]bucket, n)}
}

// at returns the bucket of time t (unix nanoseconds), cleared if it last
// held an older window.
func (r *ring) at(t int64) *bucket {
	start := t - t%int64(r.step)
	b := &r.buckets[(start/int64(r.step))%int64(len(r.buckets))]
	if b.start != start {
		clear(b.envs)
		*b = bucket{start: start, envs: b.envs}
	}
	return b
}

// get returns the bucket of the window starting at start, or nil when the
// ring holds nothing for it.
func (r *ring) get(start int64) *bucket {
	b := &r.buckets[(start/int64(r.step))%int64(len(r.buckets))]
	if b.start != start {
		return nil
	}
	return b
}

// histogram counts values in fixed bins: bin i holds the values v with
// bounds[i-1] < v <= bounds[i], and the last bin those above every bound.
type histogram struct {
	bounds []float64
	counts []int64
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]int64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
}

// Turn latency bins in milliseconds, and episode length bins in turns.
var (
	latencyBoundsMS = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000}
	turnsBounds     = []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64}
)

// FailureNote is one of the latest failure records, its reason cut to
// 500 bytes.
type FailureNote struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Env       string    `json:"env,omitempty"`
	EpisodeID string    `json:"episode_id,omitempty"`
	Reason    string    `json:"reason"`
}

// seenSet remembers the last len(order) outcome keys, so that an outcome
// published twice (a collector retrying its publish) is counted once. It is
// bounded: a repeat older than its capacity counts again.
type seenSet struct {
	keys  map[string]struct{}
	order []string
	next  int
}

func newSeenSet(n int) *seenSet {
	return &seenSet{keys: make(map[string]struct{}, n), order: make([]string, n)}
}

// add records key and reports whether it was new.
func (s *seenSet) add(key string) bool {
	if _, ok := s.keys[key]; ok {
		return false
	}
	if old := s.order[s.next]; old != "" {
		delete(s.keys, old)
	}
	s.order[s.next] = key
	s.keys[key] = struct{}{}
	s.next = (s.next + 1) % len(s.order)
	return true
}

// aggregator folds outcomes into totals, two rings of time buckets (recent
// and long) and histograms. Its memory is bounded by its options, not by how
// many outcomes it sees: it keeps no per-episode state beyond the fixed-size
// set that recognises repeated outcomes. It is not safe for concurrent use;
// Dashboard guards it.
type aggregator struct {
	maxEnvs    int
	maxLatest  int
	started    time.Time
	total      counts
	envs       map[string]*counts
	kinds      map[string]int64
	latest     []FailureNote // newest last, at most maxLatest
	recent     *ring
	long       *ring
	latency    *histogram
	turns      *histogram
	seen       *seenSet
	duplicates int64
	malformed  int64
}

func newAggregator(o Options, now time.Time) *aggregator {
	return &aggregator{
		maxEnvs:   o.MaxEnvs,
		maxLatest: o.LatestFailures,
		started:   now,
		envs:      map[string]*counts{},
		kinds:     map[string]int64{},
		recent:    newRing(o.Step, o.Buckets),
		long:      newRing(o.LongStep, o.LongBuckets),
		latency:   newHistogram(latencyBoundsMS...),
		turns:     newHistogram(turnsBounds...),
		seen:      newSeenSet(o.Dedup),
	}
}

// envKey is env as the aggregator keys it: itself while fewer than maxEnvs
// envs are known, otherEnv after that.
func (a *aggregator) envKey(env string) string {
	if _, ok := a.envs[env]; ok || len(a.envs) < a.maxEnvs {
		return env
	}
	return otherEnv
}

// each calls f on the totals and on the buckets of now, for env.
func (a *aggregator) each(now time.Time, env string, f func(*counts)) {
	key := a.envKey(env)
	f(&a.total)
	f(envCounts(a.envs, key))
	for _, r := range []*ring{a.recent, a.long} {
		b := r.at(now.UnixNano())
		f(&b.all)
		if b.envs == nil {
			b.envs = map[string]*counts{}
		}
		f(envCounts(b.envs, key))
	}
}

func envCounts(m map[string]*counts, key string) *counts {
	c := m[key]
	if c == nil {
		c = &counts{}
		m[key] = c
	}
	return c
}

// trajectory counts a trajectory that arrived at now.
func (a *aggregator) trajectory(now time.Time, t *messages.Trajectory) {
	if !a.seen.add(t.RunID + "\x00" + t.EpisodeID) {
		a.duplicates++
		return
	}
	var one counts // counted once, added to every bucket it belongs to
	one.addTrajectory(t)
	a.each(now, t.Env, func(c *counts) { c.add(one) })
	if t.Turns > 0 {
		a.latency.observe(float64(t.GenerateNanos) / float64(t.Turns) / 1e6)
	}
	a.turns.observe(float64(t.Turns))
}

// failure counts a failure record that arrived at now.
func (a *aggregator) failure(now time.Time, f *messages.Failure) {
	if f.EpisodeID != "" && !a.seen.add(f.RunID+"\x00"+f.EpisodeID) {
		a.duplicates++
		return
	}
	a.each(now, f.Env, func(c *counts) { c.Failures++ })
	kind := f.Kind
	if _, ok := a.kinds[kind]; !ok && len(a.kinds) >= maxKinds {
		kind = otherKind
	}
	a.kinds[kind]++
	reason := f.Reason
	if len(reason) > maxReason {
		reason = reason[:maxReason] + "…"
	}
	note := FailureNote{Time: now, Kind: f.Kind, Env: f.Env, EpisodeID: f.EpisodeID, Reason: reason}
	if len(a.latest) == a.maxLatest {
		copy(a.latest, a.latest[1:])
		a.latest = a.latest[:len(a.latest)-1]
	}
	a.latest = append(a.latest, note)
}

// Totals are the dashboard's counters since it started.
type Totals struct {
	// Episodes counts the outcomes: Trajectories + Failures.
	Episodes     int64   `json:"episodes"`
	Trajectories int64   `json:"trajectories"`
	Failures     int64   `json:"failures"`
	Successes    int64   `json:"successes"`
	Truncated    int64   `json:"truncated"`
	Turns        int64   `json:"turns"`
	Tokens       int64   `json:"tokens"`
	ActionTokens int64   `json:"action_tokens"`
	SuccessRate  float64 `json:"success_rate"`
	MeanReward   float64 `json:"mean_reward"`
	MeanTurns    float64 `json:"mean_turns"`
	// Duplicates counts outcomes seen a second time (and not counted again);
	// Malformed messages that did not decode; Dropped messages the NATS
	// client dropped because the dashboard fell behind.
	Duplicates int64 `json:"duplicates"`
	Malformed  int64 `json:"malformed"`
	Dropped    int64 `json:"dropped"`
}

func totalsOf(c counts) Totals {
	return Totals{
		Episodes: c.Trajectories + c.Failures, Trajectories: c.Trajectories, Failures: c.Failures,
		Successes: c.Successes, Truncated: c.Truncated, Turns: c.Turns, Tokens: c.Tokens, ActionTokens: c.ActionTokens,
		SuccessRate: ratio(float64(c.Successes), c.Trajectories), MeanReward: ratio(c.RewardSum, c.Trajectories),
		MeanTurns: ratio(float64(c.Turns), c.Trajectories),
	}
}

func ratio(a float64, b int64) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}

// Rates are throughputs per second.
type Rates struct {
	TurnsPerSec    float64 `json:"turns_per_s"`
	EpisodesPerSec float64 `json:"episodes_per_s"`
	TokensPerSec   float64 `json:"tokens_per_s"`
}

func ratesOf(c counts, seconds float64) Rates {
	if seconds <= 0 {
		return Rates{}
	}
	return Rates{
		TurnsPerSec:    float64(c.Turns) / seconds,
		EpisodesPerSec: float64(c.Trajectories+c.Failures) / seconds,
		TokensPerSec:   float64(c.Tokens) / seconds,
	}
}

// Series are the values of one range, one per time bucket, oldest first.
// Rates of the newest bucket, still filling, are over the part of it that
// has passed.
type Series struct {
	// Range names the range (RangeRecent or RangeLong); StepSeconds is
	// the width of a bucket and SpanSeconds that of the whole range.
	Range       string  `json:"range"`
	StepSeconds float64 `json:"step_s"`
	SpanSeconds float64 `json:"span_s"`
	// Time holds each bucket's start, in unix milliseconds.
	Time           []int64   `json:"t"`
	TurnsPerSec    []float64 `json:"turns_per_s"`
	EpisodesPerSec []float64 `json:"episodes_per_s"`
	TokensPerSec   []float64 `json:"tokens_per_s"`
	Failures       []int64   `json:"failures"`
}

// EnvStats is one env's totals and its series over the range: success rate
// and mean reward of the trajectories of each bucket (null for a bucket
// without any).
type EnvStats struct {
	Env string `json:"env"`
	Totals
	SuccessRate []*float64 `json:"success_rate_series"`
	MeanReward  []*float64 `json:"mean_reward_series"`
}

// Histogram is a distribution in fixed bins: Counts[i] counts the values
// up to Bounds[i] (and above Bounds[i-1]); the last count is of the values
// above every bound.
type Histogram struct {
	Unit   string    `json:"unit"`
	Bounds []float64 `json:"bounds"`
	Counts []int64   `json:"counts"`
}

func (h *histogram) export(unit string) Histogram {
	return Histogram{Unit: unit, Bounds: h.bounds, Counts: slices.Clone(h.counts)}
}

// KindCount is the number of failures of one kind.
type KindCount struct {
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// fill writes the aggregated parts of a snapshot of range rng at now.
func (a *aggregator) fill(s *Snapshot, now time.Time, rng string) {
	s.Totals = totalsOf(a.total)
	s.Totals.Duplicates, s.Totals.Malformed = a.duplicates, a.malformed
	s.Started = a.started

	// The headline rates: the last rateWindow of the recent ring.
	r := a.recent
	nowNS := now.UnixNano()
	cur := nowNS - nowNS%int64(r.step)
	var last counts
	n := min(max(1, int(rateWindow/r.step)), len(r.buckets))
	for i := range n {
		if b := r.get(cur - int64(i)*int64(r.step)); b != nil {
			last.add(b.all)
		}
	}
	span := now.Sub(time.Unix(0, cur-int64(n-1)*int64(r.step)))
	span = min(span, now.Sub(a.started))
	s.Rates = ratesOf(last, span.Seconds())

	if rng == RangeLong {
		r = a.long
	}
	cur = nowNS - nowNS%int64(r.step)
	first := cur - int64(len(r.buckets)-1)*int64(r.step)
	if st := a.started.UnixNano(); first < st {
		first = st - st%int64(r.step)
	}
	ser := Series{Range: rng, StepSeconds: r.step.Seconds(), SpanSeconds: (time.Duration(len(r.buckets)) * r.step).Seconds()}
	// By id: an env keeps its place, and its colour on the page.
	envIDs := slices.Sorted(maps.Keys(a.envs))
	envs := make([]EnvStats, len(envIDs))
	for i, id := range envIDs {
		envs[i] = EnvStats{Env: id, Totals: totalsOf(*a.envs[id])}
	}
	for start := first; start <= cur; start += int64(r.step) {
		var c counts
		b := r.get(start)
		if b != nil {
			c = b.all
		}
		secs := r.step.Seconds()
		if start == cur {
			secs = max(time.Duration(nowNS-start).Seconds(), 0.001)
		}
		if t0 := a.started.UnixNano(); start < t0 {
			secs = max(secs-time.Duration(t0-start).Seconds(), 0.001)
		}
		rt := ratesOf(c, secs)
		ser.Time = append(ser.Time, start/1e6)
		ser.TurnsPerSec = append(ser.TurnsPerSec, rt.TurnsPerSec)
		ser.EpisodesPerSec = append(ser.EpisodesPerSec, rt.EpisodesPerSec)
		ser.TokensPerSec = append(ser.TokensPerSec, rt.TokensPerSec)
		ser.Failures = append(ser.Failures, c.Failures)
		for i := range envs {
			var sr, mr *float64
			if b != nil {
				if ec := b.envs[envs[i].Env]; ec != nil && ec.Trajectories > 0 {
					x, y := ratio(float64(ec.Successes), ec.Trajectories), ratio(ec.RewardSum, ec.Trajectories)
					sr, mr = &x, &y
				}
			}
			envs[i].SuccessRate = append(envs[i].SuccessRate, sr)
			envs[i].MeanReward = append(envs[i].MeanReward, mr)
		}
	}
	s.Series = ser
	s.Envs = envs
	s.TurnLatency = a.latency.export("ms")
	s.EpisodeTurns = a.turns.export("turns")

	kinds := slices.SortedFunc(maps.Keys(a.kinds), func(x, y string) int {
		return cmp.Or(cmp.Compare(a.kinds[y], a.kinds[x]), cmp.Compare(x, y))
	})
	s.FailureKinds = make([]KindCount, len(kinds))
	for i, k := range kinds {
		s.FailureKinds[i] = KindCount{Kind: k, Count: a.kinds[k]}
	}
	s.LatestFailures = make([]FailureNote, len(a.latest))
	for i, f := range a.latest {
		s.LatestFailures[len(a.latest)-1-i] = f // newest first
	}
}

// rateWindow is the span of the headline rates.
const rateWindow = 10 * time.Second
