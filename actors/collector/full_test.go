package collector

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// drainTimeout bounds the wait for outcomes handed back while a stream was
// full: each waits up to retryDelay's 30 s cap before it is tried again,
// and a purge of another episode's steps can put its redelivery off until
// the collector consumer's ack wait (1 min).
const drainTimeout = 3 * time.Minute

// TestFullTrajectoriesStream runs the collector against a trajectories
// stream too small for its outcomes, with nobody reading it: the outcomes
// it refuses wait (no failure record instead, no loss), the condition is
// logged once and reported in Stats, and once a reader takes and
// acknowledges the trajectories every episode's arrives, exactly once.
func TestFullTrajectoriesStream(t *testing.T) {
	const (
		n   = 12
		run = "run-full"
	)
	began := time.Now()
	f := newFixture(t, bus.ServerOptions{})
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	small := st.CachedInfo().Config
	small.MaxBytes = 1 << 10 // room for a few of the trajectories below
	if _, err := f.js.UpdateStream(ctx, small); err != nil {
		t.Fatal(err)
	}
	log := &bustest.LogRecorder{Min: slog.LevelInfo}
	c := f.start(t, Options{Logger: slog.New(log)})
	for i := range n {
		req := request(fmt.Sprintf("full-%02d", i), fmt.Sprintf("full-%02d", i), 0, 1)
		req.RunID = run
		f.publish(t, oneTurn(req, 1))
	}

	// Every step has been handled at least once: the episodes whose
	// trajectory the stream took are acknowledged, the others wait.
	var stored uint64
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		s := c.Stats()
		steps, err := f.js.Consumer(ctx, f.subj.StreamSteps(), "collector")
		if err != nil {
			return err
		}
		ci := steps.CachedInfo()
		if ci.NumPending != 0 || uint64(ci.NumAckPending) != n-s.Trajectories || !slices.Equal(s.FullStreams, []string{"trajectory"}) {
			return fmt.Errorf("stats %+v, %d steps pending, %d unacknowledged", s, ci.NumPending, ci.NumAckPending)
		}
		stored = s.Trajectories
		return nil
	})
	if waiting := n - stored; waiting < 2 {
		t.Fatalf("the stream took %d of %d trajectories: too large to show the refusals", stored, n)
	}
	if got := len(bustest.StoredMessages(t, f.js, f.subj.StreamTrajectories(), "")); uint64(got) != stored {
		t.Fatalf("the stream holds %d trajectories, the collector counts %d", got, stored)
	}
	// Waiting, not failing: no failure record replaces a refused trajectory.
	if got := bustest.StoredMessages(t, f.js, f.subj.StreamFailures(), ""); len(got) != 0 {
		t.Fatalf("%d failure records, want none: %q", len(got), got[0].Data)
	}
	if s := c.Stats(); s.Failures != 0 || s.Invariant != 0 {
		t.Fatalf("stats %+v, want no failure", s)
	}
	fullLines := func() (lines []string) {
		for _, l := range log.Lines() {
			if strings.Contains(l, "trajectory stream full: no consumer is reading") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	if lines := fullLines(); len(lines) != 1 {
		t.Fatalf("%d lines on the full stream after %d refusals, want 1: %q", len(lines), n-stored, lines)
	}

	// A reader takes the trajectories, acknowledging each (which frees its
	// room in the work queue), so the waiting ones are stored in turn.
	reader, err := f.js.CreateOrUpdateConsumer(ctx, f.subj.StreamTrajectories(), jetstream.ConsumerConfig{
		Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: f.subj.TrajectoriesOfRun(run),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	read := func() error {
		batch, err := reader.Fetch(n, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			tr, err := messages.Decode[messages.Trajectory](m.Data())
			if err != nil {
				t.Fatalf("trajectory on %s: %v", m.Subject(), err)
			}
			if m.Subject() != f.subj.Trajectories(run, tr.Env) || tr.RunID != run {
				t.Errorf("trajectory of run %q on %s", tr.RunID, m.Subject())
			}
			got[tr.EpisodeID]++
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return batch.Error()
	}
	bustest.CheckFor(t, drainTimeout, 10*time.Millisecond, func() error {
		if err := read(); err != nil {
			return err
		}
		if len(got) != n {
			return fmt.Errorf("%d of %d trajectories read (stats %+v)", len(got), n, c.Stats())
		}
		return nil
	})
	f.settled(t, "collector")
	if err := read(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if id := fmt.Sprintf("full-%02d", i); got[id] != 1 {
			t.Errorf("episode %s: %d trajectories, want 1", id, got[id])
		}
	}
	if left := bustest.StoredMessages(t, f.js, f.subj.StreamTrajectories(), ""); len(left) != 0 {
		t.Errorf("%d trajectories left in the work queue after the reader acknowledged all", len(left))
	}
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		if s := c.Stats(); len(s.FullStreams) != 0 || s.Trajectories != n || s.InFlight != 0 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
	if fs := bustest.StoredMessages(t, f.js, f.subj.StreamFailures(), ""); len(fs) != 0 {
		t.Errorf("%d failure records, want none", len(fs))
	}
	// Each episode's group (of one) follows its trajectory, on the run's subject.
	groups := bustest.StoredMessages(t, f.js, f.subj.StreamGroups(), f.subj.GroupsOfRun(run))
	if len(groups) != n {
		t.Errorf("%d groups of the run, want %d", len(groups), n)
	}
	// While the reader drains it, the stream goes in and out of full: still
	// one line a minute at most.
	if lines, most := fullLines(), 1+int(time.Since(began)/time.Minute); len(lines) > most {
		t.Errorf("%d lines on the full stream, want at most %d: %q", len(lines), most, lines)
	}
	if !slices.ContainsFunc(log.Lines(), func(l string) bool { return strings.Contains(l, "trajectory stream takes records again") }) {
		t.Errorf("no line on the stream taking records again: %q", log.Lines())
	}
}

// TestFullStreamsLogOnceAnInterval: a stream in and out of full spells
// (a slow reader) is logged once an interval, not once a spell, and other
// publish errors are no full stream.
func TestFullStreamsLogOnceAnInterval(t *testing.T) {
	log := &bustest.LogRecorder{Min: slog.LevelInfo}
	f := fullStreams{interval: time.Hour, log: slog.New(log)}
	full := fmt.Errorf("%w: publish x: maximum bytes exceeded", bus.ErrStreamFull)
	if f.refused(kindTrajectory, fmt.Errorf("bus: publish x: %w", context.DeadlineExceeded), time.Second) {
		t.Error("a timeout taken for a full stream")
	}
	if got := f.kinds(); len(got) != 0 {
		t.Errorf("full streams %v after a timeout", got)
	}
	for range 5 {
		if !f.refused(kindTrajectory, full, time.Second) || !f.refused(kindTrajectory, full, time.Second) {
			t.Fatal("a full stream's refusal not recognised")
		}
		if got := f.kinds(); !slices.Equal(got, []string{kindTrajectory}) {
			t.Fatalf("full streams %v, want the trajectories'", got)
		}
		f.stored(kindTrajectory)
		f.stored(kindGroup) // never full: nothing to say
		if got := f.kinds(); len(got) != 0 {
			t.Fatalf("full streams %v after a stored record", got)
		}
	}
	f.refused(kindGroup, full, 2*time.Second)
	f.refused(kindTrajectory, full, time.Second)
	if got := f.kinds(); !slices.Equal(got, []string{kindGroup, kindTrajectory}) {
		t.Errorf("full streams %v", got)
	}
	lines := log.Lines()
	count := func(s string) (n int) {
		for _, l := range lines {
			if strings.Contains(l, s) {
				n++
			}
		}
		return n
	}
	if n := count("trajectory stream full"); n != 1 {
		t.Errorf("%d lines on the full trajectories stream in six spells, want 1: %q", n, lines)
	}
	if n := count("trajectory stream takes records again"); n != 1 {
		t.Errorf("%d lines on the trajectories stream taking records again, want 1 (the logged spell's): %q", n, lines)
	}
	if n := count("group stream full"); n != 1 {
		t.Errorf("%d lines on the full groups stream, want 1: %q", n, lines)
	}
	// The next line, an interval later, counts the refusals since the last.
	f.interval = 0
	f.refused(kindTrajectory, full, time.Second)
	if lines = log.Lines(); !strings.Contains(lines[len(lines)-1], "refused_since_last_line=11") {
		t.Errorf("last line %q, want 11 refusals since the first line", lines[len(lines)-1])
	}
}

// TestHandedBackStepOutlivesPurges: a terminal step handed back while the
// trajectories stream is full must come again after later episodes are
// decided and their steps purged, and after further steps are
// acknowledged. (A purge that ends a pending delivery can move the
// consumer's ack floor past the steps still pending, which are then never
// delivered again: the collector acknowledges a deciding step before it
// purges.)
func TestHandedBackStepOutlivesPurges(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs = 1
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

	a, b, later := request("ep-a", "g-a", 0, 1), request("ep-b", "g-b", 0, 1), request("ep-c", "g-c", 0, 1)
	for _, r := range []*messages.EpisodeRequest{a, b, later} {
		r.RunID = "run-p"
	}
	first := oneTurn(later, 0)
	first.Done = false
	f.publish(t, oneTurn(a, 1), oneTurn(b, 1), first)
	msgs := f.deliveries(t, 3)
	c := f.idle(t)
	c.handle(ctx, msgs[0]) // refused: handed back for a second
	if s := c.Stats(); s.Trajectories != 0 || !slices.Equal(s.FullStreams, []string{"trajectory"}) {
		t.Fatalf("stats %+v after the refusal", s)
	}
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c.handle(ctx, msgs[1]) // decided: acknowledged, its steps purged
	c.handle(ctx, msgs[2]) // a first turn: acknowledged
	if s := c.Stats(); s.Trajectories != 1 || len(s.FullStreams) != 0 {
		t.Fatalf("stats %+v after the second episode", s)
	}

	// The probe consumer's ack wait (30 s) is far off: only the hand-back
	// brings the step again.
	probe, err := f.js.Consumer(ctx, f.subj.StreamSteps(), "probe")
	if err != nil {
		t.Fatal(err)
	}
	again, err := probe.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		ci, _ := probe.Info(ctx)
		t.Fatalf("the handed-back step did not come again: %v (consumer %+v)", err, ci)
	}
	if again.Subject() != msgs[0].Subject() {
		t.Fatalf("got a step on %s, want the handed-back one on %s", again.Subject(), msgs[0].Subject())
	}
	c.handle(ctx, again)
	out := f.outputs(t)
	got := map[string]int{}
	for _, tr := range out.trajs {
		got[tr.EpisodeID]++
	}
	if want := map[string]int{"filler": 1, "ep-a": 1, "ep-b": 1}; !maps.Equal(got, want) || len(out.failures) != 0 {
		t.Errorf("trajectories %v, failures %s; want %v", got, describe(out.failures), want)
	}
	if ci, err := probe.Info(ctx); err != nil || ci.NumAckPending != 0 || ci.NumPending != 0 {
		t.Errorf("probe consumer %+v, %v: want every step handled", ci, err)
	}
}
