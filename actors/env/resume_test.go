package env

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestResumeOnAnotherWorker kills an env worker in the middle of its
// episodes (its connection closes: no more heartbeats, acks or publishes)
// and starts another: every episode ends as exactly one trajectory, the
// interrupted ones go on from their last completed turn, and each
// trajectory is what a replay of its game gives, as if it had never moved.
func TestResumeOnAnotherWorker(t *testing.T) {
	for _, style := range []string{messages.ObsChat, messages.ObsConcat} {
		t.Run(style, func(t *testing.T) { testResume(t, style) })
	}
}

func testResume(t *testing.T, style string) {
	const episodes = 16
	s := bustest.RunServer(t)
	srv := httptest.NewServer(toyllm.New(toyllm.Options{TokenLatency: time.Millisecond}).Handler())
	t.Cleanup(srv.Close)
	js, coll, ctx, start := resumeHarness(t, s, srv.URL)
	subj := messages.NewSubjects("")

	opts := Options{Concurrency: episodes, AckWait: 2 * time.Second}
	a := dieMidway(ctx, t, s, opts, func() {
		submitEpisodes(t, js, episodes, style)
		waitSteps(t, js, episodes*2)
	})
	if a.Stats().Finished == episodes {
		t.Fatal("every episode finished before the worker died; nothing to resume")
	}
	b := startWorker(t, s, "env-b", opts, start)
	resumed := checkOutcomes(t, js, subj, coll, episodes)
	if resumed == 0 || b.Stats().Resumed == 0 {
		t.Fatalf("no episode resumed (worker b: %+v)", b.Stats())
	}
	t.Logf("%d of %d episodes resumed on the second worker", resumed, episodes)
}

// TestModelOutage takes the only model server down in the middle of the
// episodes: the env worker hands its episodes back instead of failing them,
// stops taking new ones while it is unhealthy, and when the server is back
// every episode ends as a trajectory, continued from its last turn.
func TestModelOutage(t *testing.T) {
	const episodes = 16
	s := bustest.RunServer(t)
	var down atomic.Bool
	model := toyllm.New(toyllm.Options{TokenLatency: time.Millisecond}).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && r.URL.Path != "/health" {
			http.Error(w, `{"object":"error","message":"down","type":"ServiceUnavailable","code":503}`, http.StatusServiceUnavailable)
			return
		}
		model.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	js, coll, _, start := resumeHarness(t, s, srv.URL)
	// Default MaxDeliver: the outage must not use up the episodes' deliveries.
	w := startWorker(t, s, "env", Options{Concurrency: 8, RequestAttempts: 2, RetryDelay: 50 * time.Millisecond}, start)
	submitEpisodes(t, js, episodes, messages.ObsChat)
	waitSteps(t, js, episodes)
	down.Store(true)
	bustest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if !w.Stats().Unhealthy {
			return fmt.Errorf("worker still healthy: %+v", w.Stats())
		}
		return nil
	})
	// While unhealthy the worker probes with one episode at a time: let it
	// probe a few times before the model comes back.
	probes := w.Stats().Started + 3
	bustest.CheckFor(t, time.Minute, 5*time.Millisecond, func() error {
		if st := w.Stats(); st.Started < probes {
			return fmt.Errorf("still waiting for probes: %+v", st)
		}
		return nil
	})
	down.Store(false)
	resumed := checkOutcomes(t, js, messages.NewSubjects(""), coll, episodes)
	if resumed == 0 {
		t.Fatal("no episode was handed back and resumed")
	}
	if w.Stats().Unhealthy {
		t.Fatal("worker still unhealthy after the model came back")
	}
}

// resumeHarness runs an embedded server's LLM worker (on modelURL) and
// collector; start runs more actors until the test ends.
func resumeHarness(t *testing.T, s *server.Server, modelURL string) (jetstream.JetStream, *collector.Collector, context.Context, func(func(context.Context) error)) {
	t.Helper()
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithCancel(context.Background())
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	lw, err := llm.New(bustest.Connect(t, s, "llm"), llm.Options{Endpoints: []string{modelURL}, HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	coll := collector.New(bustest.JetStream(t, s, "collector"), collector.Options{})
	var running sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		running.Wait()
	})
	start := func(run func(context.Context) error) {
		running.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("actor: %v", err)
			}
		})
	}
	start(lw.Run)
	// No episode asks before the LLM worker listens (a test's silent tap
	// must not stand in for it).
	select {
	case <-lw.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the LLM worker is not ready")
	}
	start(coll.Run)
	return js, coll, ctx, start
}

// dieMidway runs an env worker while work (which submits episodes and waits
// for some of their steps) runs, then kills it: its connection closes, so it
// stops heartbeating, acking and publishing at once.
func dieMidway(ctx context.Context, t *testing.T, s *server.Server, opts Options, work func()) *Worker {
	t.Helper()
	js := bustest.JetStream(t, s, "env-a")
	w, err := New(js.Conn(), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	work()
	js.Conn().Close()
	stop()
	<-done
	return w
}

// startWorker starts an env worker on a connection of its own.
func startWorker(t *testing.T, s *server.Server, name string, opts Options, start func(func(context.Context) error)) *Worker {
	t.Helper()
	js := bustest.JetStream(t, s, name)
	w, err := New(js.Conn(), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	start(w.Run)
	return w
}

// submitEpisodes publishes n GuessTheNumber episodes in the given style.
func submitEpisodes(t *testing.T, js jetstream.JetStream, n int, style string) {
	t.Helper()
	subj := messages.NewSubjects("")
	for i := range n {
		req := episodeRequest(fmt.Sprintf("ep-%02d", i), func(r *messages.EpisodeRequest) { r.ObsStyle = style })
		data, err := messages.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(context.Background(), js, subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSteps waits until the steps stream holds at least n steps.
func waitSteps(t *testing.T, js jetstream.JetStream, n uint64) {
	t.Helper()
	steps, err := js.Stream(context.Background(), messages.NewSubjects("").StreamSteps())
	if err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		info, err := steps.Info(context.Background())
		if err != nil || info.State.Msgs < n {
			return fmt.Errorf("steps so far: %v", err)
		}
		return nil
	})
}

// checkOutcomes waits for n trajectories, one per episode, checks each
// against a replay of its game, and returns how many were resumed.
func checkOutcomes(t *testing.T, js jetstream.JetStream, subj messages.Subjects, coll *collector.Collector, n int) int {
	t.Helper()
	ctx := context.Background()

	// Read as stored, not consumed: the trajectories stream is a work
	// queue, and the tests count what it holds afterwards.
	trajs := map[string]*messages.Trajectory{}
	bustest.CheckFor(t, 2*time.Minute, 10*time.Millisecond, func() error {
		msgs, err := bustest.ReadStored(ctx, js, subj.StreamTrajectories(), "")
		if err != nil {
			return err
		}
		clear(trajs)
		for _, m := range msgs {
			tr, err := messages.Decode[messages.Trajectory](m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if trajs[tr.EpisodeID] != nil {
				t.Fatalf("%s: two trajectories", tr.EpisodeID)
			}
			if m.Subject != subj.Trajectories(tr.RunID, tr.Env) {
				t.Fatalf("%s: trajectory of run %q on %s", tr.EpisodeID, tr.RunID, m.Subject)
			}
			trajs[tr.EpisodeID] = tr
		}
		if len(trajs) < n {
			return fmt.Errorf("waiting for trajectories (%d of %d so far); collector %+v", len(trajs), n, coll.Stats())
		}
		return nil
	})
	if len(trajs) != n {
		t.Fatalf("%d trajectories, want %d", len(trajs), n)
	}
	if st := coll.Stats(); st.Failures != 0 {
		t.Fatalf("collector recorded failures: %+v", st)
	}
	resumed := 0
	for _, tr := range trajs {
		if tr.Resumed > 0 {
			resumed++
		}
		replay(t, tr)
	}
	return resumed
}

// replay plays a trajectory's actions through a fresh copy of its game and
// checks every prompt, feedback span and reward.
func replay(t *testing.T, tr *messages.Trajectory) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatalf("%s: %v", tr.EpisodeID, err)
	}
	var tok toyllm.Tokenizer
	env, err := envs.New(tr.Env, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, info := env.Reset(envs.NewRNG(*tr.EnvSeed))
	spec, _ := envs.Lookup(tr.Env)
	if tr.ObsStyle == messages.ObsConcat {
		history, suffix := []string{obs}, info["suffix"]
		for i, smp := range tr.Samples {
			r := smp.ActionRanges[0]
			if got, want := tok.Decode(smp.ObservationTokens[:r.Start]), chat.History(history, suffix); got != want {
				t.Fatalf("%s turn %d: prompt\n got %q\nwant %q", tr.EpisodeID, i, got, want)
			}
			res := env.Step(tok.Decode(smp.ObservationTokens[r.Start:r.End]))
			if res.Reward != smp.Reward {
				t.Fatalf("%s turn %d: reward %v, replay %v", tr.EpisodeID, i, smp.Reward, res.Reward)
			}
			history, suffix = append(history, res.Observation), res.Info["suffix"]
		}
		return
	}
	toks := tr.ObservationTokens
	if got, want := tok.Decode(toks[:tr.ActionRanges[0].Start]), chat.Render([]chat.Message{{Role: "user", Content: obs}}, true); got != want {
		t.Fatalf("%s: prompt\n got %q\nwant %q", tr.EpisodeID, got, want)
	}
	for i, r := range tr.ActionRanges {
		action := tok.Decode(toks[r.Start:r.End])
		res := env.Step(action)
		if res.Reward != tr.StepRewards[i] {
			t.Fatalf("%s turn %d: reward %v, replay %v", tr.EpisodeID, i, tr.StepRewards[i], res.Reward)
		}
		end := int32(len(toks))
		if i+1 < len(tr.ActionRanges) {
			end = tr.ActionRanges[i+1].Start
		}
		if got, want := tok.Decode(toks[r.End:end]), chat.Feedback(action, res.Observation, spec.ChatSuffix, res.Done()); got != want {
			t.Fatalf("%s turn %d: feedback\n got %q\nwant %q", tr.EpisodeID, i, got, want)
		}
	}
}

// TestLoadPriorRun: of an episode's stored steps, the run of this request
// that got furthest from turn 0 is continued, up to its first gap; a
// terminal step of this request, or the collector's decision, means the episode
// is decided.
func TestLoadPriorRun(t *testing.T) {
	step := func(id string, attempt, turn int32, done bool) *messages.StepEvent {
		ev := &messages.StepEvent{
			V: messages.Version, RunID: "run-e", EpisodeID: id, Attempt: attempt, Turn: turn, Done: done,
			ActionTokens: messages.Tokens{1}, ActionLogprobs: messages.Logprobs{-1},
		}
		if turn == 0 {
			ev.Episode, ev.PromptTokens = episodeRequest(id, nil), messages.Tokens{7}
		}
		return ev
	}
	for _, tc := range []struct {
		name        string
		steps       func(id string) []*messages.StepEvent
		wantTurns   int
		wantDecided bool
		wantNil     bool
	}{
		{"nothing stored", func(string) []*messages.StepEvent { return nil }, 0, false, true},
		{"two turns", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 1, false)}
		}, 2, false, false},
		{"gap ends the run", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 2, false)}
		}, 1, false, false},
		{"the furthest run wins", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 1, false), step(id, 1, 2, false), step(id, 2, 0, false)}
		}, 3, false, false},
		{"a play started over for staleness wins over the longer one it abandoned", func(id string) []*messages.StepEvent {
			restarted := step(id, 1, 0, false)
			restarted.Run, restarted.Restarts = "second-play", 1
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 1, false), step(id, 1, 2, false), restarted}
		}, 1, false, false},
		{"attempts above the bound decide nothing", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, messages.MaxAttempts+1, 0, true)}
		}, 1, false, false},
		{"attempt without turn 0 is skipped", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 1, false), step(id, 3, 2, false)}
		}, 2, false, false},
		{"terminal step decides", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 1, 1, true)}
		}, 2, true, false},
		{"an earlier run that finished decides", func(id string) []*messages.StepEvent {
			return []*messages.StepEvent{step(id, 1, 0, false), step(id, 2, 0, false), step(id, 1, 1, true)}
		}, 2, true, false},
		{"another submission's steps are not continued", func(id string) []*messages.StepEvent {
			other := step(id, 2, 0, false)
			other.Request = 99
			return []*messages.StepEvent{step(id, 1, 0, false), other}
		}, 1, false, false},
		{"another submission's finished run decides nothing", func(id string) []*messages.StepEvent {
			other := step(id, 1, 0, true)
			other.Request = 99
			return []*messages.StepEvent{other}
		}, 0, false, true},
		{"another run's steps of the same episode id are not read", func(id string) []*messages.StepEvent {
			a, b := step(id, 1, 0, false), step(id, 1, 1, true)
			a.RunID, b.RunID = "run-x", "run-x"
			return []*messages.StepEvent{a, b}
		}, 0, false, true},
		{"the collector's decision decides", nil, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, toyllm.Options{})
			id := "ep-" + tc.name
			if tc.steps == nil {
				decision := &nats.Msg{Subject: f.subj.Decided("run-e", id), Header: nats.Header{messages.DecisionHeader: []string{"trajectory"}}}
				if _, err := f.js.PublishMsg(context.Background(), decision); err != nil {
					t.Fatal(err)
				}
				tc.steps = func(id string) []*messages.StepEvent { return []*messages.StepEvent{step(id, 1, 0, false)} }
			}
			for _, ev := range tc.steps(id) {
				data, err := messages.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				if err := bus.Publish(context.Background(), f.js, f.subj.Steps(ev.RunID, id, id), data, ""); err != nil {
					t.Fatal(err)
				}
			}
			run, err := f.worker.loadPriorRun(context.Background(), "run-e", id, f.subj.Steps("run-e", id, id), 0)
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.wantNil:
				if run != nil {
					t.Fatalf("got %d steps, want none", len(run.steps))
				}
			case run == nil || len(run.steps) != tc.wantTurns || run.decided != tc.wantDecided:
				t.Fatalf("got %+v, want %d turns, decided %v", run, tc.wantTurns, tc.wantDecided)
			}
		})
	}
}

// TestDeliveriesBeyondTheLimit: a delivery beyond --max-deliver records the
// episode's failure at once when its runs stored no turn (the worker died
// before the first one each time, as under a poison episode), but plays on
// when they made progress: each stored turn allows one delivery more.
func TestDeliveriesBeyondTheLimit(t *testing.T) {
	opts := Options{Concurrency: 4, AckWait: time.Second, MaxDeliver: 1}
	// firstDies runs a worker that dies once wait has returned, then a
	// second worker, over one episode.
	firstDies := func(t *testing.T, wait func(jetstream.JetStream), between func(jetstream.JetStream)) (jetstream.JetStream, *collector.Collector, *Worker) {
		s := bustest.RunServer(t)
		srv := httptest.NewServer(toyllm.New(toyllm.Options{TokenLatency: 5 * time.Millisecond}).Handler())
		t.Cleanup(srv.Close)
		js, coll, ctx, start := resumeHarness(t, s, srv.URL)
		dieMidway(ctx, t, s, opts, func() {
			submitEpisodes(t, js, 1, messages.ObsChat)
			wait(js)
		})
		between(js)
		return js, coll, startWorker(t, s, "env-b", opts, start)
	}
	t.Run("no progress", func(t *testing.T) {
		js, coll, _ := firstDies(t, func(js jetstream.JetStream) { waitDelivered(t, js) },
			// whatever the dead worker stored, the next delivery finds no progress
			func(js jetstream.JetStream) { purgeSteps(t, js) })
		f := nextFailure(t, js, coll)
		if f.EpisodeID != "ep-00" || !strings.Contains(f.Reason, "gave up after 1 deliveries without an outcome") {
			t.Fatalf("failure %+v", f)
		}
	})
	t.Run("progress", func(t *testing.T) {
		js, coll, b := firstDies(t, func(js jetstream.JetStream) { waitSteps(t, js, 1) }, func(jetstream.JetStream) {})
		if resumed := checkOutcomes(t, js, messages.NewSubjects(""), coll, 1); resumed != 1 || b.Stats().Resumed != 1 {
			t.Fatalf("the second delivery did not resume: %d resumed, worker %+v", resumed, b.Stats())
		}
	})
}

// waitDelivered waits until the env workers' consumer has an episode
// delivered and not yet acknowledged.
func waitDelivered(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	subj := messages.NewSubjects("")
	st, err := js.Stream(context.Background(), subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		lister := st.ListConsumers(context.Background())
		for ci := range lister.Info() {
			if ci.NumAckPending > 0 {
				return nil
			}
		}
		return fmt.Errorf("no episode delivered yet")
	})
}

// purgeSteps empties the steps stream.
func purgeSteps(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	st, err := js.Stream(context.Background(), messages.NewSubjects("").StreamSteps())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// nextFailure waits for a failure record and returns the first stored.
func nextFailure(t *testing.T, js jetstream.JetStream, coll *collector.Collector) *messages.Failure {
	t.Helper()
	var first *jetstream.RawStreamMsg
	bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		msgs, err := bustest.ReadStored(context.Background(), js, messages.NewSubjects("").StreamFailures(), "")
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("no failure record (collector %+v)", coll.Stats())
		}
		first = msgs[0]
		return nil
	})
	f, err := messages.Decode[messages.Failure](first.Data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestResubmittedEpisode submits every episode twice without a message id,
// as a trainer retrying a submission does: the two runs of one episode id
// are told apart by their request, so each episode ends as exactly one
// trajectory that replays against its game (no turns of the other run
// spliced in).
func TestResubmittedEpisode(t *testing.T) {
	const episodes = 12
	s := bustest.RunServer(t)
	srv := httptest.NewServer(toyllm.New(toyllm.Options{TokenLatency: time.Millisecond}).Handler())
	t.Cleanup(srv.Close)
	js, coll, _, start := resumeHarness(t, s, srv.URL)
	subj := messages.NewSubjects("")
	// Other sampling seeds: the two runs of an episode play different games.
	for round := range 2 {
		for i := range episodes {
			seed := int64(100*round + i)
			req := episodeRequest(fmt.Sprintf("ep-%02d", i), func(r *messages.EpisodeRequest) { r.Sampling.Seed = &seed })
			data, err := messages.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if err := bus.Publish(context.Background(), js, subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	startWorker(t, s, "env", Options{Concurrency: 2 * episodes}, start)
	checkOutcomes(t, js, subj, coll, episodes)
	ctx := context.Background()
	bustest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		eps, err := js.Stream(ctx, subj.StreamEpisodes())
		if err != nil {
			return err
		}
		info, err := eps.Info(ctx)
		if err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("episodes still queued: %v", err)
		}
		return nil
	})
	// Both submissions are played; the second to finish finds the episode
	// decided. Once the collector has handled every step, nothing more comes.
	bustest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		cons, err := js.Consumer(ctx, subj.StreamSteps(), "collector")
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil || ci.NumPending+uint64(ci.NumAckPending) != 0 {
			return fmt.Errorf("steps not yet handled: %+v %v", ci, err)
		}
		return nil
	})
	trajs, err := js.Stream(ctx, subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := trajs.Info(ctx); err != nil || info.State.Msgs != episodes {
		t.Fatalf("%d trajectories for %d episodes submitted twice (%v)", info.State.Msgs, episodes, err)
	}
	if st := coll.Stats(); st.Trajectories != episodes || st.Failures != 0 {
		t.Fatalf("collector %+v", st)
	}
}
