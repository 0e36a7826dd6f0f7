package env

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// fixture is an embedded server, the stand-in model over HTTP, an LLM
// worker and the env worker under test.
type fixture struct {
	js     jetstream.JetStream
	subj   messages.Subjects
	worker *Worker
}

func newFixture(t *testing.T, model toyllm.Options) *fixture {
	t.Helper()
	return newFixtureWith(t, model, Options{Concurrency: 8})
}

func newFixtureWith(t *testing.T, model toyllm.Options, opts Options) *fixture {
	t.Helper()
	s := bustest.RunServer(t)
	srv := httptest.NewServer(toyllm.New(model).Handler())
	t.Cleanup(srv.Close)

	f := &fixture{js: bustest.JetStream(t, s, "test"), subj: messages.NewSubjects("")}
	ljs, ejs := bustest.JetStream(t, s, "llm"), bustest.JetStream(t, s, "env")
	// Registered after the connections, so it runs before they close.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	if err := bus.EnsureStreams(ctx, f.js, f.subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	lw, err := llm.New(ljs.Conn(), llm.Options{Endpoints: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ew, err := New(ejs.Conn(), ejs, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.worker = ew
	for _, run := range []func(context.Context) error{lw.Run, ew.Run} {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("actor: %v", err)
			}
		}()
	}
	return f
}

// run submits req and returns its step events up to the terminal one.
func (f *fixture) run(t *testing.T, req *messages.EpisodeRequest) []*messages.StepEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := messages.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, f.js, f.subj.Episodes(req.Env), data, ""); err != nil {
		t.Fatal(err)
	}
	cons, err := f.js.OrderedConsumer(ctx, f.subj.StreamSteps(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subj.Steps(req.EpisodeID)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var evs []*messages.StepEvent
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("episode %s: waiting for steps: %v (got %d)", req.EpisodeID, err, len(evs))
		}
		ev, err := messages.Decode[messages.StepEvent](m.Data())
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.Done {
			return evs
		}
	}
}

func episodeRequest(id string, mut func(*messages.EpisodeRequest)) *messages.EpisodeRequest {
	seed, envSeed := int64(5), uint64(9)
	r := &messages.EpisodeRequest{
		V: messages.Version, EpisodeID: id, GroupID: id, GroupSize: 1,
		Env: "game:GuessTheNumber-v0-hard", EnvSeed: &envSeed,
		Sampling:  messages.SamplingParams{Temperature: 1, MaxTokens: 64, Seed: &seed},
		MaxLength: 4096,
	}
	if mut != nil {
		mut(r)
	}
	return r
}

func TestFirstPrompt(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	var tok toyllm.Tokenizer
	for _, tc := range []struct {
		name string
		mut  func(*messages.EpisodeRequest)
		want func(instructions string) string
	}{
		{"env instructions as the first user turn", nil, func(ins string) string {
			return chat.Render([]chat.Message{{Role: "user", Content: ins}}, true)
		}},
		{"prompt verbatim", func(r *messages.EpisodeRequest) { r.Prompt = "Guess a number from 1 to 50: <|im_start|>" }, func(string) string {
			return "Guess a number from 1 to 50: <|im_start|>"
		}},
		{"prompt in the chat template", func(r *messages.EpisodeRequest) { r.Prompt, r.ChatTemplate = "Guess!", true }, func(string) string {
			return chat.Render([]chat.Message{{Role: "user", Content: "Guess!"}}, true)
		}},
		{"left truncation keeps the role headers and the last content", func(r *messages.EpisodeRequest) {
			r.MaxLength, r.Sampling.MaxTokens, r.PromptOverflow = 200, 50, messages.PromptOverflowTruncateLeft
		}, func(ins string) string {
			bare := tok.Encode(chat.Render([]chat.Message{{Role: "user"}}, true))
			return chat.Render([]chat.Message{{Role: "user", Content: ins[len(ins)-(150-len(bare)):]}}, true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := f.run(t, episodeRequest(t.Name(), tc.mut))
			first := evs[0]
			if first.Episode == nil || first.Error != "" {
				t.Fatalf("first step: %+v", first)
			}
			ins := instructionsFor(t, first)
			if got, want := tok.Decode(first.PromptTokens), tc.want(ins); got != want {
				t.Fatalf("prompt\n got %q\nwant %q", got, want)
			}
		})
	}
}

// instructionsFor rebuilds the env's instructions from the request the
// first step carries: they depend only on the env id and seed.
func instructionsFor(t *testing.T, ev *messages.StepEvent) string {
	t.Helper()
	env, err := envs.New(ev.Episode.Env, ev.Episode.EnvOptions)
	if err != nil {
		t.Fatal(err)
	}
	obs, _ := env.Reset(envs.NewRNG(*ev.Episode.EnvSeed))
	return obs
}

func TestTurnBudget(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	// A budget that runs out mid-game: the last step is marked truncated.
	evs := f.run(t, episodeRequest("budget", func(r *messages.EpisodeRequest) { r.MaxLength = 700; r.Sampling.MaxTokens = 40 }))
	total := len(evs[0].PromptTokens)
	for i, ev := range evs {
		if ev.Error != "" {
			t.Fatalf("step %d failed: %s", i, ev.Error)
		}
		budget := min(40, 700-total)
		if len(ev.ActionTokens) > budget {
			t.Fatalf("turn %d generated %d tokens with a budget of %d", i, len(ev.ActionTokens), budget)
		}
		total += len(ev.ActionTokens) + len(ev.FeedbackTokens)
	}
	last := evs[len(evs)-1]
	if !last.Done || !last.Truncated || last.FinishReason != FinishBudget || total < 700 {
		t.Fatalf("want a budget truncation at >= 700 tokens, got done=%v truncated=%v finish=%q at %d tokens",
			last.Done, last.Truncated, last.FinishReason, total)
	}
}

func TestMaxTurns(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	evs := f.run(t, episodeRequest("maxturns", func(r *messages.EpisodeRequest) {
		r.MaxTurns = 1
		s := uint64(12) // a game the first bisection guess does not win
		r.EnvSeed = &s
	}))
	if len(evs) != 1 {
		t.Fatalf("want one turn, got %d", len(evs))
	}
	if ev := evs[0]; ev.Reward == 1 {
		t.Skip("the first guess won; the cap was not exercised")
	} else if !ev.Done || !ev.Truncated || ev.FinishReason != FinishMaxTurns {
		t.Fatalf("want a max-turns truncation, got %+v", ev)
	}
}

func TestContextLength(t *testing.T) {
	// A model window smaller than the trajectory budget: once the
	// conversation outgrows it, the server refuses with a context-length 400.
	f := newFixture(t, toyllm.Options{MaxModelLen: 700})
	evs := f.run(t, episodeRequest("ctx", func(r *messages.EpisodeRequest) { r.Sampling.MaxTokens = 64 }))
	last := evs[len(evs)-1]
	if !last.IsEndMarker() || !last.Truncated || last.FinishReason != FinishContextLength {
		t.Fatalf("want a context-length end marker, got %+v", last)
	}
	if len(evs) < 2 {
		t.Fatalf("want at least one model turn before the end marker, got %d events", len(evs))
	}

	// Refused on the very first turn: nothing to train on, so a failure.
	f = newFixture(t, toyllm.Options{MaxModelLen: 300})
	evs = f.run(t, episodeRequest("ctx0", nil))
	if ev := evs[len(evs)-1]; ev.Error == "" || ev.Turn != 0 {
		t.Fatalf("want a failed first turn, got %+v", ev)
	}
}

// TestSlowTurnsAreNotRedelivered: turns far longer than AckWait, and more
// episodes than slots, still give exactly one run per episode. The worker
// keeps every running episode alive and never pulls ahead of a free slot,
// where an episode would wait unacknowledged and be delivered again.
func TestSlowTurnsAreNotRedelivered(t *testing.T) {
	const episodes = 6
	// About 1 s per generation against an AckWait of 300 ms.
	f := newFixtureWith(t, toyllm.Options{TokenLatency: 40 * time.Millisecond},
		Options{Concurrency: 2, AckWait: 300 * time.Millisecond})
	var ids []string
	for i := range episodes {
		req := episodeRequest(fmt.Sprint("slow-", i), func(r *messages.EpisodeRequest) { r.MaxTurns = 1 })
		data, err := messages.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(context.Background(), f.js, f.subj.Episodes(req.Env), data, ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, req.EpisodeID)
	}
	bustest.CheckFor(t, 2*time.Minute, 50*time.Millisecond, func() error {
		if st := f.worker.Stats(); st.Finished+st.Failed < episodes {
			return fmt.Errorf("%d of %d episodes done", st.Finished+st.Failed, episodes)
		}
		return nil
	})
	if st := f.worker.Stats(); st.Started != episodes || st.Failed != 0 {
		t.Fatalf("want %d episodes started once each and none failed, got %+v", episodes, st)
	}
	for _, id := range ids {
		for _, ev := range f.steps(t, id) {
			if ev.Attempt != 1 {
				t.Fatalf("%s turn %d ran as attempt %d", id, ev.Turn, ev.Attempt)
			}
		}
	}
}

// steps returns every stored step event of an episode.
func (f *fixture) steps(t *testing.T, id string) []*messages.StepEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := f.js.OrderedConsumer(ctx, f.subj.StreamSteps(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subj.Steps(id)},
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*messages.StepEvent
	for range info.NumPending {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := messages.Decode[messages.StepEvent](m.Data())
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		t.Fatalf("%s: no steps stored", id)
	}
	return evs
}

// TestHostedEnvs: a worker hosting a subset of envs runs only their
// episodes; the others stay queued for a worker that hosts them.
func TestHostedEnvs(t *testing.T) {
	const easy, hard = "game:GuessTheNumber-v0-easy", "game:GuessTheNumber-v0-hard"
	a, b := ConsumerConfig(Options{Envs: []string{hard, easy}}), ConsumerConfig(Options{Envs: []string{easy, hard, easy}})
	if a.Durable != b.Durable || len(a.FilterSubjects) != 2 {
		t.Fatalf("the same set must give the same consumer: %+v vs %+v", a, b)
	}
	if c := ConsumerConfig(Options{Envs: []string{easy}}); c.Durable == a.Durable {
		t.Fatalf("different sets share consumer %s", c.Durable)
	}

	f := newFixtureWith(t, toyllm.Options{}, Options{Concurrency: 4, Envs: []string{easy}})
	// The unhosted episode is queued first: had the worker been able to
	// take it, it would have before finishing the hosted one.
	data, err := messages.Marshal(episodeRequest("not-hosted", nil)) // -hard
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(context.Background(), f.js, f.subj.Episodes(hard), data, ""); err != nil {
		t.Fatal(err)
	}
	f.run(t, episodeRequest("hosted", func(r *messages.EpisodeRequest) { r.Env = easy }))
	stream, err := f.js.Stream(context.Background(), f.subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(f.subj.Episodes(hard)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[f.subj.Episodes(hard)]; n != 1 || f.worker.Stats().Started != 1 {
		t.Fatalf("want the hard episode queued and only the easy one started: %d queued, %+v", n, f.worker.Stats())
	}
}
