package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

const gtn = "game:GuessTheNumber-v0-easy"

// startFleet starts a standing fleet (embedded server, actors, stand-in
// model) for the test.
func startFleet(t *testing.T) *fleet.Standing {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.StartStanding(ctx, fleet.Options{DataDir: filepath.Join(t.TempDir(), "nats"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// newClient connects a trainer client to the fleet.
func newClient(t *testing.T, f *fleet.Standing, opts trainer.Options) (*trainer.Client, *nats.Conn) {
	t.Helper()
	nc, err := f.Connect("trainer")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	c, err := trainer.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

func seed(s uint64) *uint64 { return &s }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A batch's groups all arrive, each with its n trajectories, and the read
// ends when the batch is complete, leaving nothing of it in the streams.
func TestSubmitAndReadGroups(t *testing.T) {
	f := startFleet(t)
	c, _ := newClient(t, f, trainer.Options{})
	ctx := testContext(t)
	sub, err := c.SubmitBatch(ctx, trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 12, N: 4, Seed: seed(3), MaxTurns: 6}})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Manifest.BatchID
	if sub.Manifest.Episodes != 12 || sub.Manifest.Groups != 3 || sub.Manifest.N != 4 || sub.Resubmitted {
		t.Fatalf("manifest %+v (resubmitted %v)", sub.Manifest, sub.Resubmitted)
	}
	var got []string
	var end trainer.Progress
	for res, err := range c.Groups(ctx, id, trainer.OnEnd(func(p trainer.Progress) { end = p })) {
		if err != nil {
			t.Fatal(err)
		}
		g := res.Value
		if g.RunID != id || len(g.Trajectories) != 4 {
			t.Fatalf("group %s of run %s with %d trajectories", g.GroupID, g.RunID, len(g.Trajectories))
		}
		for _, tr := range g.Trajectories {
			if tr.RunID != id || tr.GroupID != g.GroupID || len(tr.ObservationTokens) == 0 || len(tr.ActionRanges) == 0 {
				t.Fatalf("trajectory %s: run %s group %s, %d tokens", tr.EpisodeID, tr.RunID, tr.GroupID, len(tr.ObservationTokens))
			}
		}
		got = append(got, g.GroupID)
		if err := res.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	want := []string{jobs.GroupID(id, 0), jobs.GroupID(id, 1), jobs.GroupID(id, 2)}
	if !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if !end.Done || end.Decided != 12 || end.Trajectories != 12 || end.GroupsDelivered != 3 || end.Delivered != 3 {
		t.Fatalf("progress at the end: %+v", end)
	}
	// Submitting it again submits nothing new.
	again, err := c.SubmitBatch(ctx, trainer.Batch{ID: id, Spec: &trainer.Spec{Env: gtn, Episodes: 12, N: 4, Seed: seed(3), MaxTurns: 6}})
	if err != nil || !again.Resubmitted {
		t.Fatalf("resubmission: %+v, %v", again, err)
	}
	if _, err := c.Submit(ctx, trainer.Batch{ID: id, Spec: &trainer.Spec{Env: gtn, Episodes: 8, N: 4}}); !errors.Is(err, trainer.ErrBatchExists) {
		t.Fatalf("another batch under the same id: %v, want ErrBatchExists", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Batches) != 1 || !st.Batches[0].Done || st.Batches[0].GroupsDelivered != 3 {
		t.Fatalf("status: %+v", st.Batches)
	}
	if err := c.Close(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Manifest(ctx, id); !errors.Is(err, trainer.ErrUnknownBatch) {
		t.Fatalf("manifest of a closed batch: %v", err)
	}
	for res, err := range c.Groups(ctx, id) {
		if !errors.Is(err, trainer.ErrUnknownBatch) {
			t.Fatalf("reading a closed batch: %v, %v", res, err)
		}
	}
}

// A trainer that stops after acknowledging some results, with one
// delivered and not acknowledged, and starts again gets every result of the
// batch exactly once over both runs.
func TestRestartedTrainerGetsEveryResultOnce(t *testing.T) {
	f := startFleet(t)
	opts := trainer.Options{AckWait: 2 * time.Second}
	c1, nc1 := newClient(t, f, opts)
	ctx := testContext(t)
	id, err := c1.Submit(ctx, trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 12, N: 2, Seed: seed(7)}})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{}
	var held string
	for res, err := range c1.Trajectories(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if len(acked) == 3 {
			held = res.Value.EpisodeID // delivered, never acknowledged
			break
		}
		if err := res.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		acked[res.Value.EpisodeID]++
	}
	nc1.Close()

	c2, _ := newClient(t, f, opts)
	var second []string
	for res, err := range c2.Trajectories(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		acked[res.Value.EpisodeID]++
		second = append(second, res.Value.EpisodeID)
	}
	if len(acked) != 12 {
		t.Fatalf("%d episodes acknowledged, want 12: %v", len(acked), acked)
	}
	for ep, n := range acked {
		if n != 1 {
			t.Errorf("episode %s acknowledged %d times", ep, n)
		}
	}
	if !slices.Contains(second, held) {
		t.Errorf("the held result %s did not come back", held)
	}
}

// Failures are yielded, and a group with a failed member is never a group:
// the read of groups ends without it.
func TestFailuresAreYielded(t *testing.T) {
	f := startFleet(t)
	c, _ := newClient(t, f, trainer.Options{})
	ctx := testContext(t)
	var reqs []*messages.EpisodeRequest
	for g := range 2 {
		for i := range 2 {
			s := uint64(g)
			r := &messages.EpisodeRequest{
				EpisodeID: fmt.Sprintf("e%d%d", g, i), GroupID: fmt.Sprintf("g%d", g), SampleIndex: int32(i), GroupSize: 2,
				Env: gtn, EnvSeed: &s, Sampling: messages.SamplingParams{Temperature: 1, TopP: 1}, MaxLength: 4096,
			}
			if g == 1 && i == 1 {
				r.EnvOptions = []byte(`{"min_number": 10, "max_number": 1}`)
			}
			reqs = append(reqs, r)
		}
	}
	id, err := c.Submit(ctx, trainer.Batch{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	var end trainer.Progress
	for res, err := range c.Groups(ctx, id, trainer.OnEnd(func(p trainer.Progress) { end = p })) {
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, res.Value.GroupID)
		if err := res.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(groups, []string{"g0"}) || end.Failures != 1 || end.GroupsFailed != 1 || !end.Done {
		t.Fatalf("groups %v, progress %+v", groups, end)
	}
	var failures []*messages.Failure
	for res, err := range c.Failures(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		failures = append(failures, res.Value)
		if err := c.AckToken(ctx, id, res.Token()); err != nil {
			t.Fatal(err)
		}
	}
	if len(failures) != 1 || failures[0].EpisodeID != "e11" || failures[0].GroupID != "g1" {
		t.Fatalf("failures %+v", failures)
	}
	// Nothing comes again.
	for res, err := range c.Failures(ctx, id, trainer.MaxWait(time.Second)) {
		t.Fatalf("failure read again: %v, %v", res, err)
	}
}

// Batches that cannot be run are refused before anything is submitted,
// with the field named.
func TestSubmitRefusesBadBatches(t *testing.T) {
	f := startFleet(t)
	c, _ := newClient(t, f, trainer.Options{})
	ctx := testContext(t)
	plan, err := jobs.New(jobs.Options{RunID: "other", Env: gtn, Episodes: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    trainer.Batch
		want string
	}{
		{"nothing", trainer.Batch{}, "no requests, spec or plan"},
		{"spec and plan", trainer.Batch{ID: "other", Plan: plan, Spec: &trainer.Spec{Env: gtn, Episodes: 1}}, "not more than one"},
		{"plan of another run", trainer.Batch{ID: "mine", Plan: plan}, "not of batch mine"},
		{"not a multiple", trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 6, N: 4}}, "episodes 6 is not a multiple of n 4"},
		{"unknown env", trainer.Batch{Spec: &trainer.Spec{Env: "game:NoSuchGame-v0", Episodes: 4}}, "game:NoSuchGame-v0"},
		{"row env", trainer.Batch{Spec: &trainer.Spec{Env: gtn, Rows: []jobs.DatasetRow{{Prompt: "x"}, {Prompt: "y", Env: "nope"}}}}, "rows[1].env"},
		{"stale policy", trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 1, StalePolicy: "later"}}, "stale_policy"},
		{"top_p", trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 1, Sampling: trainer.Sampling{TopP: new(2.0)}}}, "sampling.top_p"},
		{"bad id", trainer.Batch{ID: "a.b", Spec: &trainer.Spec{Env: gtn, Episodes: 1}}, "id"},
		{"group size", trainer.Batch{Requests: []*messages.EpisodeRequest{{EpisodeID: "e", GroupID: "g", GroupSize: 2, Env: gtn, MaxLength: 10, Sampling: messages.SamplingParams{Temperature: 1, TopP: 1}}}}, "group_size 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Submit(ctx, tc.b)
			if !errors.Is(err, trainer.ErrBadBatch) || !contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrBadBatch naming %q", err, tc.want)
			}
		})
	}
	mans, err := c.Batches(ctx)
	if err != nil || len(mans) != 0 {
		t.Fatalf("batches after refusals: %v, %v", mans, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A token acknowledges only a record of its batch.
func TestAckTokenNamesTheBatch(t *testing.T) {
	f := startFleet(t)
	c, _ := newClient(t, f, trainer.Options{})
	ctx := testContext(t)
	a, err := c.Submit(ctx, trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 1, Seed: seed(1)}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Submit(ctx, trainer.Batch{Spec: &trainer.Spec{Env: gtn, Episodes: 1, Seed: seed(2)}})
	if err != nil {
		t.Fatal(err)
	}
	for res, err := range c.Trajectories(ctx, a) {
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AckToken(ctx, b, res.Token()); !errors.Is(err, trainer.ErrBadAckToken) {
			t.Fatalf("token of batch %s acknowledged as batch %s's: %v", a, b, err)
		}
		for _, tok := range []string{"", "+ACK", "$JS.ACK.RF_TRAJECTORIES.x.1.2.3.4.5", "$JS.ACK.>"} {
			if err := c.AckToken(ctx, a, tok); !errors.Is(err, trainer.ErrBadAckToken) {
				t.Fatalf("token %q: %v, want ErrBadAckToken", tok, err)
			}
		}
		if err := c.AckToken(ctx, a, res.Token()); err != nil {
			t.Fatal(err)
		}
		// Again: already acknowledged is fine.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.AckToken(actx, a, res.Token())
		cancel()
		if err != nil {
			t.Fatalf("second ack: %v", err)
		}
	}
	bustest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		for _, bs := range st.Batches {
			if bs.Manifest.BatchID == a && bs.Done {
				return nil
			}
		}
		return fmt.Errorf("batch %s not done: %+v", a, st.Batches)
	})
}

// A plan submitted as rollout run submits its jobs: unlisted (under a run
// id that a listed batch could not have), paced by a window over the
// decided episodes, the skipped episodes left out, and read through Consume
// on consumers named with the client's prefix, which Forget deletes.
func TestPacedPlanBatch(t *testing.T) {
	f := startFleet(t)
	c, nc := newClient(t, f, trainer.Options{ConsumerPrefix: "job"})
	ctx := testContext(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := messages.NewSubjects("")
	const run, total, skipped, window = "paced.run", 24, 4, 5
	plan, err := jobs.New(jobs.Options{RunID: run, Env: gtn, Episodes: total, Seed: seed(5)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The plan's episodes are made under a newer policy version than the
	// fleet's at submission (0): they record the plan's.
	const planVersion = 7
	plan.SetVersion(planVersion)
	decisions := make(chan string, total)
	for _, kind := range []string{trainer.KindTrajectory, trainer.KindFailure} {
		stop, err := c.Consume(ctx, run, kind, func(m jetstream.Msg) {
			var id string
			if kind == trainer.KindTrajectory {
				tr, err := messages.Decode[messages.Trajectory](m.Data())
				if err != nil {
					t.Error(err)
					return
				}
				id = tr.EpisodeID
				if tr.SubmitVersion != planVersion {
					t.Errorf("trajectory %s: submit version %d, want %d", id, tr.SubmitVersion, planVersion)
				}
			} else {
				fr, err := messages.Decode[messages.Failure](m.Data())
				if err != nil {
					t.Error(err)
					return
				}
				id = fr.EpisodeID
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Error(err)
				return
			}
			decisions <- id
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	var mu sync.Mutex
	var decided int64
	var asked []int64
	seen := map[string]int{}
	collect := func(ctx context.Context, n int64) error {
		for decided < n {
			select {
			case id := <-decisions:
				seen[id]++
				decided++
			case <-ctx.Done():
				return fmt.Errorf("%d of %d episodes decided: %w", decided, n, ctx.Err())
			}
		}
		return nil
	}
	episodes, err := js.Stream(ctx, subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitBatch(ctx, trainer.Batch{
		ID: run, Plan: plan, Unlisted: true, Window: window,
		Skip: func(i int) bool { return i < skipped },
		Decided: func(ctx context.Context, n int64) error {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, n)
			// The wait comes before the next episode is published.
			info, err := episodes.Info(ctx)
			if err != nil {
				return err
			}
			if want := uint64(window) + uint64(n) - 1; info.State.LastSeq != want {
				return fmt.Errorf("waiting for %d decisions with %d episodes published, want %d", n, info.State.LastSeq, want)
			}
			return collect(ctx, n)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := collect(ctx, total-skipped); err != nil {
		t.Fatal(err)
	}
	for i := range total {
		id, want := jobs.EpisodeID(run, i), 1
		if i < skipped {
			want = 0
		}
		if seen[id] != want {
			t.Errorf("episode %s decided %d times, want %d", id, seen[id], want)
		}
	}
	// The window: episode window+k waited for k+1 decisions, in order.
	for k, n := range asked {
		if n != int64(k+1) {
			t.Fatalf("waited for decisions %v, want 1, 2, …, %d", asked, total-skipped-window)
		}
	}
	if len(asked) != total-skipped-window {
		t.Fatalf("waited %d times, want %d", len(asked), total-skipped-window)
	}
	if _, err := c.Manifest(ctx, run); !errors.Is(err, trainer.ErrUnknownBatch) {
		t.Fatalf("unlisted batch has a manifest: %v", err)
	}
	name := func(kind string) string { return "job-" + messages.NameToken(run) + "-" + kind }
	if _, err := js.Consumer(ctx, subj.StreamGroups(), name(trainer.KindGroup)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("group consumer of an unlisted batch nobody reads groups of: %v", err)
	}
	if _, err := js.Consumer(ctx, subj.StreamTrajectories(), name(trainer.KindTrajectory)); err != nil {
		t.Fatalf("consumer with the client's prefix: %v", err)
	}
	if err := c.Forget(ctx, run); err != nil {
		t.Fatal(err)
	}
	for stream, kind := range map[string]string{subj.StreamTrajectories(): trainer.KindTrajectory, subj.StreamFailures(): trainer.KindFailure} {
		if _, err := js.Consumer(ctx, stream, name(kind)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer %s after Forget: %v", name(kind), err)
		}
	}
}
