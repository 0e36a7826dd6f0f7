package collector

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// deliveries fetches n stored steps through a consumer of the test's own,
// so a test can hand real deliveries to collectors in an order of its
// choosing: what a pin hand-over, a restart or a redelivery produces.
func (f *fixture) deliveries(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	cons, err := f.js.CreateOrUpdateConsumer(ctx, f.subj.StreamSteps(), jetstream.ConsumerConfig{
		Durable: "probe", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: f.subj.StepsAll(),
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(waitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if len(out) != n {
		t.Fatalf("fetched %d of %d steps", len(out), n)
	}
	return out
}

// idle is a collector that is not consuming: the test calls its handler.
func (f *fixture) idle(t *testing.T) *Collector {
	t.Helper()
	ctx := context.Background()
	c := New(f.js, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var err error
	if c.steps, err = f.js.Stream(ctx, f.subj.StreamSteps()); err != nil {
		t.Fatal(err)
	}
	if c.decisions, err = f.js.Stream(ctx, f.subj.StreamDecided()); err != nil {
		t.Fatal(err)
	}
	return c
}

// twoRuns is two runs of one episode: run 1 (attempt 1) plays threeTurns to
// its end, run 2 (attempt 2, another delivery) fails at errorTurn.
func twoRuns(errorTurn int32) (run1 []*messages.StepEvent, run2 *messages.StepEvent, want *messages.Trajectory) {
	run1, want = threeTurns()
	for _, ev := range run1 {
		ev.Request, ev.Attempt, ev.Run = 7, 1, "a"
	}
	run2 = errorStep(run1[0].Episode, errorTurn, "env error")
	run2.Request, run2.Attempt, run2.Run = 7, 2, "b"
	return run1, run2, want
}

// outcomesOf counts the records naming an episode.
func outcomesOf(o outputs, id string) (n int) {
	for _, tr := range o.trajs {
		if tr.EpisodeID == id {
			n++
		}
	}
	for _, fl := range o.failures {
		if fl.EpisodeID == id {
			n++
		}
	}
	return n
}

// TestOneDecisionPerEpisode hands the steps of two runs of one episode to
// two collectors in orders a hand-over or a restart produces, and checks
// that the episode gets exactly one outcome: a trajectory and a failure of
// the same episode (two streams, so no shared dedup window) included.
func TestOneDecisionPerEpisode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// order lists, per delivery (0-2 run 1's turns, 3 run 2's error
		// step, 4 a malformed message), which collector handles it.
		order []struct{ msg, collector int }
		want  string // the outcome's kind
	}{
		{"run 1 decides, then run 2 fails elsewhere", []struct{ msg, collector int }{{0, 0}, {1, 0}, {2, 0}, {3, 1}}, "trajectory"},
		{"run 2 fails first, then run 1 ends elsewhere", []struct{ msg, collector int }{{0, 0}, {1, 0}, {3, 1}, {2, 0}}, messages.FailureEpisode},
		{"terminal read back before a malformed step", []struct{ msg, collector int }{{0, 0}, {2, 1}, {4, 0}, {1, 0}}, "trajectory"},
		{"malformed step before the terminal", []struct{ msg, collector int }{{0, 0}, {4, 1}, {1, 0}, {2, 0}}, messages.FailureMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, bus.ServerOptions{})
			steps, failed, want := twoRuns(1)
			f.publish(t, append(steps, failed)...)
			f.publishRaw(t, f.stepsOf(want.RunID, want.EpisodeID), []byte("garbage"))
			msgs := f.deliveries(t, 5)
			colls := []*Collector{f.idle(t), f.idle(t)}
			ctx := context.Background()
			for _, d := range tc.order {
				colls[d.collector].handle(ctx, msgs[d.msg])
			}
			out := f.outputs(t)
			if n := outcomesOf(out, want.EpisodeID); n != 1 {
				t.Fatalf("%d outcomes: %d trajectories, failures %s", n, len(out.trajs), describe(out.failures))
			}
			got := "trajectory"
			for _, fl := range out.failures {
				if fl.EpisodeID == want.EpisodeID {
					got = fl.Kind
				}
			}
			if got != tc.want {
				t.Errorf("outcome %s, want %s", got, tc.want)
			}
		})
	}
}

// TestDecisionWithoutOutcome: a collector that stored the decision and died
// before the outcome leaves the terminal step unacknowledged; whichever
// collector handles it again stores the outcome the decision names, and a
// later run's terminal changes nothing.
func TestDecisionWithoutOutcome(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	steps, failed, want := twoRuns(0)
	f.publish(t, append(steps, failed)...)
	ctx := context.Background()
	dead := f.idle(t)
	if won, _, err := dead.claim(ctx, want.RunID, want.EpisodeID, keyOf(steps[2]).String(), "trajectory"); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	msgs := f.deliveries(t, 4)
	other := f.idle(t)
	other.handle(ctx, msgs[3]) // run 2's error step: decided for run 1 already
	for _, m := range msgs[:3] {
		other.handle(ctx, m)
	}
	checkTrajectory(t, f.outputs(t).only(t), want)
}

// TestGiveUpAtAnyAttempt: a worker records its give-up at whatever delivery
// count it reached; the error step is never rejected for its attempt.
func TestGiveUpAtAnyAttempt(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	c := f.start(t, Options{})
	steps, _ := threeTurns()
	e := errorStep(steps[0].Episode, 0, "gave up after 40 deliveries")
	e.Attempt = 40
	f.publish(t, e)
	f.settled(t, "collector")
	if fl := f.outputs(t).onlyFailure(t); fl.EpisodeID != e.EpisodeID {
		t.Errorf("failure %+v", fl)
	}
	if st := c.Stats(); st.Rejected != 0 {
		t.Errorf("stats %+v", st)
	}
}
