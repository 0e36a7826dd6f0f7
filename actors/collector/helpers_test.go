package collector

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// waitTimeout bounds every wait on the collector: generous, since -race
// slows the server down, and only reached when a test fails.
const waitTimeout = 20 * time.Second

// fixture is an embedded NATS server with rollfleet's streams and a test
// connection that plays the env worker and the trainer.
type fixture struct {
	srv  *server.Server
	js   jetstream.JetStream
	subj messages.Subjects
}

func newFixture(t testing.TB, sopts bus.ServerOptions, stopts ...bus.StreamOptions) *fixture {
	t.Helper()
	s := bustest.RunServerWith(t, sopts)
	f := &fixture{srv: s, js: bustest.JetStream(t, s, "test"), subj: messages.NewSubjects("")}
	var streams bus.StreamOptions
	if len(stopts) > 0 {
		streams = stopts[0]
	}
	if err := bus.EnsureStreams(context.Background(), f.js, f.subj, streams); err != nil {
		t.Fatal(err)
	}
	return f
}

// running is a collector whose Run goroutine the test controls.
type running struct {
	*Collector
	stop func() // cancels Run and waits for it to return; idempotent
}

// start runs a collector on its own connection until the test ends or
// stop is called.
func (f *fixture) start(t testing.TB, opts Options) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if opts.PinnedTTL == 0 {
		// Restart tests wait this long for the stopped collector's pin to lapse.
		opts.PinnedTTL = time.Second
	}
	c := New(bustest.JetStream(t, f.srv, "collector"), opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("collector Run: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("collector Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return &running{Collector: c, stop: stop}
}

// publish stores step events as the env worker does, but without a dedup
// id, so that a repeated event reaches the collector instead of being
// dropped by the stream.
func (f *fixture) publish(t *testing.T, evs ...*messages.StepEvent) {
	t.Helper()
	for _, ev := range evs {
		data, err := messages.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Episode != nil {
			testGroups.Store(ev.EpisodeID, ev.Episode.GroupID)
		}
		f.publishRaw(t, f.stepsOf(ev.RunID, ev.EpisodeID), data)
	}
}

// testGroups holds the group of each episode id that request made or
// publish saw a request of, for the steps subjects of its later turns,
// which do not carry the request.
var testGroups sync.Map

// stepsOf is the steps subject of a test episode.
func (f *fixture) stepsOf(run, id string) string {
	group := id
	if g, ok := testGroups.Load(id); ok {
		group = g.(string)
	}
	return f.subj.Steps(run, group, id)
}

func (f *fixture) publishRaw(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := bus.Publish(context.Background(), f.js, subject, data, ""); err != nil {
		t.Fatal(err)
	}
}

// settled waits until the durable consumer named durable has acknowledged
// (or terminated) every stored step. The collector records an outcome
// before it acknowledges the step that decided it, so the output streams
// are complete from then on.
func (f *fixture) settled(t *testing.T, durable string) {
	t.Helper()
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		return f.isSettled(durable)
	})
}

func (f *fixture) isSettled(durable string) error {
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.subj.StreamSteps())
	if err != nil {
		return err
	}
	cons, err := f.js.Consumer(ctx, f.subj.StreamSteps(), durable)
	if err != nil {
		return err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	if ci.NumPending != 0 || ci.NumAckPending != 0 || ci.AckFloor.Stream < last {
		return fmt.Errorf("consumer %s: %d pending, %d unacknowledged, ack floor %d of %d",
			durable, ci.NumPending, ci.NumAckPending, ci.AckFloor.Stream, last)
	}
	return nil
}

// readAll returns every message currently stored in stream, decoded and
// validated as T. It reads them without a consumer, so the work-queue
// output streams keep them.
func readAll[T any, P interface {
	*T
	Validate() error
}](t *testing.T, f *fixture, stream string) []*T {
	t.Helper()
	var out []*T
	for _, m := range bustest.StoredMessages(t, f.js, stream, "") {
		v, err := messages.Decode[T, P](m.Data)
		if err != nil {
			t.Fatalf("%s holds an invalid message on %s: %v", stream, m.Subject, err)
		}
		out = append(out, v)
	}
	return out
}

// outputs is everything the collector has published.
type outputs struct {
	trajs    []*messages.Trajectory
	failures []*messages.Failure
	groups   []*messages.Group
}

func (f *fixture) outputs(t *testing.T) outputs {
	t.Helper()
	return outputs{
		trajs:    readAll[messages.Trajectory](t, f, f.subj.StreamTrajectories()),
		failures: readAll[messages.Failure](t, f, f.subj.StreamFailures()),
		groups:   readAll[messages.Group](t, f, f.subj.StreamGroups()),
	}
}

// only returns the one trajectory and fails the test unless the collector
// published exactly one trajectory and nothing else.
func (o outputs) only(t *testing.T) *messages.Trajectory {
	t.Helper()
	if len(o.trajs) != 1 || len(o.failures) != 0 {
		t.Fatalf("want exactly one trajectory and no failure, got %d trajectories and failures %s",
			len(o.trajs), describe(o.failures))
	}
	return o.trajs[0]
}

// onlyFailure returns the one failure and fails the test unless the
// collector published exactly one failure and no trajectory.
func (o outputs) onlyFailure(t *testing.T) *messages.Failure {
	t.Helper()
	if len(o.trajs) != 0 || len(o.failures) != 1 {
		t.Fatalf("want exactly one failure and no trajectory, got %d trajectories and failures %s",
			len(o.trajs), describe(o.failures))
	}
	return o.failures[0]
}

func describe(fs []*messages.Failure) string {
	s := "["
	for i, f := range fs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s/%s: %q", f.Kind, f.EpisodeID, f.Reason)
	}
	return s + "]"
}

// request is the episode request carried by turn 0 of the test episodes.
func request(id, group string, index, size int32) *messages.EpisodeRequest {
	testGroups.Store(id, group)
	seed := uint64(42)
	return &messages.EpisodeRequest{
		V: messages.Version, EpisodeID: id, GroupID: group, SampleIndex: index, GroupSize: size,
		Env: "game:GuessTheNumber-v0", EnvSeed: &seed, Prompt: "guess a number", Label: "7",
		Sampling: messages.SamplingParams{Temperature: 1}, MaxLength: 4096, SubmitTime: 123,
	}
}

// oneTurn is a complete single-turn episode with the given score.
func oneTurn(req *messages.EpisodeRequest, score float64) *messages.StepEvent {
	return &messages.StepEvent{
		V: messages.Version, RunID: req.RunID, EpisodeID: req.EpisodeID, Episode: req, PromptTokens: messages.Tokens{1, 2},
		ActionTokens: messages.Tokens{3}, ActionLogprobs: messages.Logprobs{-0.5}, FeedbackTokens: messages.Tokens{4},
		Reward: score, Score: score, Done: true, FinishReason: "stop",
	}
}

// errorStep is the terminal step an env worker publishes for an episode
// that cannot complete.
func errorStep(req *messages.EpisodeRequest, turn int32, reason string) *messages.StepEvent {
	return &messages.StepEvent{V: messages.Version, RunID: req.RunID, EpisodeID: req.EpisodeID, Turn: turn, Episode: req, Done: true, Error: reason}
}
