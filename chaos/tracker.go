package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stepRun is what the steps stream shows of one run of an episode.
type stepRun struct {
	key           runKey
	turns         int64 // highest turn seen + 1
	first         int64 // lowest turn seen
	done          bool
	errors        []string
	messages      int
	start, finish time.Time // store times of the run's first and last step
}

// gap is a stretch of the steps stream the tracker never saw: its messages
// were deleted (the collector purges a decided episode's steps) before the
// tracker read them. They were stored between after and before.
type gap struct {
	from, to      uint64
	after, before time.Time
}

// liveEpisode is what the tracker has seen of an episode's honest steps,
// for choosing the targets of message faults.
type liveEpisode struct {
	request       uint64
	attempt, turn int64
	done, failed  bool
	last, doneAt  time.Time
}

// tracker follows the steps stream while the run goes on, with an ordered
// consumer of the harness's own and the harness's own decoder. It is the
// run's record of every step: the collector purges an episode's steps once
// it is decided, so reading the stream afterwards would find only outcome
// markers. From it come the runs of each episode, the fingerprints for the
// provenance check, and the episodes message faults can target. Its
// consumer's goroutine writes it; the injector and, once it has stopped,
// Run read it.
type tracker struct {
	h  *harness
	cc jetstream.ConsumeContext

	mu      sync.Mutex
	eps     map[string]*liveEpisode
	runs    map[string]map[runKey]*stepRun
	index   stepIndex
	gaps    []gap
	lastSeq uint64
	lastTS  time.Time
	bad     int
	badErrs []string
	forged  int
	// offRun lists the first few honest steps of our episodes without the
	// run's id or off its steps subject; offRunCount counts them all.
	offRun      []string
	offRunCount int
	stopped     bool
}

func newTracker(h *harness) *tracker {
	return &tracker{h: h, eps: map[string]*liveEpisode{}, runs: map[string]map[runKey]*stepRun{},
		index: stepIndex{}}
}

// start follows the steps stream from its beginning.
func (t *tracker) start(ctx context.Context) error {
	cons, err := t.h.js.OrderedConsumer(ctx, t.h.subj.StreamSteps(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	// Short heartbeats: a consumer on a server that went away is replaced
	// within seconds, before the collector purges much the harness has not
	// seen.
	t.cc, err = cons.Consume(t.handle, jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	return err
}

func (t *tracker) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	seq, ts := meta.Sequence.Stream, meta.Timestamp
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq <= t.lastSeq {
		return // seen already (a consumer reset)
	}
	if seq > t.lastSeq+1 {
		t.gaps = append(t.gaps, gap{from: t.lastSeq + 1, to: seq - 1, after: t.lastTS, before: ts})
	}
	t.lastSeq, t.lastTS = seq, ts
	s, err := DecodeStep(m.Data())
	if err != nil {
		t.bad++
		if len(t.badErrs) < 5 {
			t.badErrs = append(t.badErrs, fmt.Sprintf("steps seq %d (%s): %v", seq, m.Subject(), err))
		}
		return
	}
	if forged := m.Headers().Get(forgedHeader); forged != "" {
		t.forged++
		t.index.add(s, seq, forged)
		return
	}
	if req := t.h.reqs[s.EpisodeID]; req != nil && (s.RunID != t.h.runID || m.Subject() != t.h.subj.Steps(t.h.runID, req.GroupID, s.EpisodeID)) {
		t.offRunCount++
		if len(t.offRun) < maxDetails {
			t.offRun = append(t.offRun, fmt.Sprintf("steps seq %d of %s, run id %q, on %s", seq, s.EpisodeID, s.RunID, m.Subject()))
		}
	}
	if !s.endMarker() && s.Error == "" {
		t.index.add(s, seq, "")
	}
	t.addRun(s, ts)
	e := t.eps[s.EpisodeID]
	if e == nil {
		e = &liveEpisode{}
		t.eps[s.EpisodeID] = e
	}
	if s.Request > e.request || s.Request == e.request && (s.Attempt > e.attempt || s.Attempt == e.attempt && s.Turn > e.turn) {
		e.request, e.attempt, e.turn = s.Request, s.Attempt, s.Turn
	}
	e.last = time.Now()
	if s.Error != "" {
		e.failed = true
	}
	if s.Done && !e.done {
		e.done, e.doneAt = true, time.Now()
	}
}

// addRun adds an honest step to its run's bookkeeping.
func (t *tracker) addRun(s *Step, ts time.Time) {
	byRun := t.runs[s.EpisodeID]
	if byRun == nil {
		byRun = map[runKey]*stepRun{}
		t.runs[s.EpisodeID] = byRun
	}
	k := runKey{s.Request, s.Attempt, s.Run}
	r := byRun[k]
	if r == nil {
		r = &stepRun{key: k, first: s.Turn, start: ts}
		byRun[k] = r
	}
	r.finish = ts
	r.messages++
	r.turns = max(r.turns, s.Turn+1)
	r.first = min(r.first, s.Turn)
	if s.Done {
		r.done = true
	}
	if s.Error != "" {
		r.errors = append(r.errors, s.Error)
	}
}

// caughtUp waits until the tracker has seen the steps stream up to its
// last sequence at the time of the call, or ctx ends.
func (t *tracker) caughtUp(ctx context.Context) error {
	st, err := t.h.js.Stream(ctx, t.h.subj.StreamSteps())
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		seen := t.lastSeq
		t.mu.Unlock()
		if seen >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the steps stream's tracker saw up to sequence %d of %d: %w", seen, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the consumer and waits for its handler.
func (t *tracker) stop() {
	if t.stopped || t.cc == nil {
		return
	}
	t.stopped = true
	t.cc.Stop()
	<-t.cc.Closed()
}

// evidence hands the tracker's record to the checks. Call it after stop.
func (t *tracker) evidence(ev *evidence) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev.steps, ev.index, ev.badSteps, ev.badStepErrs, ev.forgedSteps = t.runs, t.index, t.bad, t.badErrs, t.forged
	ev.offRun, ev.offRunCount = t.offRun, t.offRunCount
	ev.gaps = t.gaps
}

// pick chooses an episode of ours not in exclude: one in flight (not done,
// a step within the last 3 s) or, with finished, one done at least 2 s ago.
// draw picks among the candidates.
func (t *tracker) pick(finished bool, draw uint64, exclude map[string]bool) (string, liveEpisode, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []string
	for id, e := range t.eps {
		if exclude[id] || t.h.reqs[id] == nil || e.failed {
			continue
		}
		if finished && e.done && time.Since(e.doneAt) > 2*time.Second ||
			!finished && !e.done && time.Since(e.last) < 3*time.Second {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", liveEpisode{}, false
	}
	slices.Sort(ids)
	id := ids[draw%uint64(len(ids))]
	return id, *t.eps[id], true
}

// sortedRuns returns an episode's runs in order.
func sortedRuns(runs map[runKey]*stepRun) []*stepRun {
	out := slices.Collect(maps.Values(runs))
	slices.SortFunc(out, func(a, b *stepRun) int { return a.key.compare(b.key) })
	return out
}
