package env

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
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
	if err := bus.Publish(ctx, f.js, f.subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
		t.Fatal(err)
	}
	cons, err := f.js.OrderedConsumer(ctx, f.subj.StreamSteps(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subj.Steps(req.RunID, req.GroupID, req.EpisodeID)},
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
		if ev.RunID != req.RunID {
			t.Fatalf("episode %s: turn %d carries run %q, want the request's %q", req.EpisodeID, ev.Turn, ev.RunID, req.RunID)
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
		V: messages.Version, RunID: "run-e", EpisodeID: id, GroupID: id, GroupSize: 1,
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
			// The step names the messages exactly as rendered: the content kept.
			if pm := first.PromptMessages; len(pm) > 0 {
				if got := chat.Render(chatML(pm), true); got != tok.Decode(first.PromptTokens) {
					t.Fatalf("prompt messages %+v render %q, not the prompt", pm, got)
				}
			}
		})
	}
}

// TestChatMLByName plays the same episodes with the model's own template
// and with ChatML named: on a model whose template is ChatML (the
// stand-in's) both give the same tokens, and the feedback is the user
// message's content either way.
func TestChatMLByName(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	var tok toyllm.Tokenizer
	for i := range 4 {
		id := fmt.Sprintf("chatml-%d", i)
		model := f.run(t, episodeRequest(id+"-model", func(r *messages.EpisodeRequest) { *r.EnvSeed += uint64(i) }))
		named := f.run(t, episodeRequest(id+"-chatml", func(r *messages.EpisodeRequest) {
			*r.EnvSeed += uint64(i)
			r.ChatTemplateName = messages.TemplateChatML
		}))
		if len(model) != len(named) {
			t.Fatalf("%s: %d turns with the model's template, %d with ChatML", id, len(model), len(named))
		}
		for k := range model {
			a, b := model[k], named[k]
			if !slices.Equal(a.PromptTokens, b.PromptTokens) || !slices.Equal(a.ActionTokens, b.ActionTokens) ||
				!slices.Equal(a.FeedbackTokens, b.FeedbackTokens) || a.FeedbackText != b.FeedbackText {
				t.Fatalf("%s turn %d differs:\nmodel  %q + %q\nchatml %q + %q", id, k,
					tok.Decode(a.ActionTokens), tok.Decode(a.FeedbackTokens), tok.Decode(b.ActionTokens), tok.Decode(b.FeedbackTokens))
			}
			if a.FeedbackText != "" && strings.Contains(a.FeedbackText, chat.ImStart) {
				t.Fatalf("%s turn %d: feedback text %q is not a message's content", id, k, a.FeedbackText)
			}
		}
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
		if err := bus.Publish(context.Background(), f.js, f.subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
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
		for _, ev := range f.steps(t, "run-e", id) {
			if ev.Attempt != 1 {
				t.Fatalf("%s turn %d ran as attempt %d", id, ev.Turn, ev.Attempt)
			}
		}
	}
}

// steps returns every stored step event of an episode of run.
func (f *fixture) steps(t *testing.T, run, id string) []*messages.StepEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := f.js.OrderedConsumer(ctx, f.subj.StreamSteps(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subj.StepsOfEpisode(run, id)},
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
	notHosted := episodeRequest("not-hosted", nil) // -hard
	data, err := messages.Marshal(notHosted)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(context.Background(), f.js, f.subj.Episodes(notHosted.RunID, hard), data, ""); err != nil {
		t.Fatal(err)
	}
	f.run(t, episodeRequest("hosted", func(r *messages.EpisodeRequest) { r.Env = easy }))
	stream, err := f.js.Stream(context.Background(), f.subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(f.subj.Episodes(notHosted.RunID, hard)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[f.subj.Episodes(notHosted.RunID, hard)]; n != 1 || f.worker.Stats().Started != 1 {
		t.Fatalf("want the hard episode queued and only the easy one started: %d queued, %+v", n, f.worker.Stats())
	}
}

// TestRunWorker: a worker of one run plays only that run's episodes, from a
// consumer of its own, so a worker of another run can serve beside it on
// the same work queue; each leaves the other run's episodes queued.
func TestRunWorker(t *testing.T) {
	const env = "game:GuessTheNumber-v0-hard"
	cfg := ConsumerConfig(Options{Run: "run-a"})
	if cfg.Durable != "envworker-run-run-a" || cfg.FilterSubject != "rf.episodes.run-a.>" || cfg.InactiveThreshold <= 0 {
		t.Fatalf("consumer of a run: %+v", cfg)
	}
	both := ConsumerConfig(Options{Run: "run-a", Envs: []string{env}})
	if both.Durable == cfg.Durable || len(both.FilterSubjects) != 1 || both.FilterSubjects[0] != "rf.episodes.run-a."+env {
		t.Fatalf("consumer of a run's envs: %+v", both)
	}
	if other := ConsumerConfig(Options{Run: "run-b", Envs: []string{env}}); other.Durable == both.Durable {
		t.Fatalf("two runs share consumer %s", other.Durable)
	}
	if all := ConsumerConfig(Options{Envs: []string{env}}); all.FilterSubjects[0] != "rf.episodes.*."+env || all.InactiveThreshold != 0 {
		t.Fatalf("consumer of every run's envs: %+v", all)
	}
	// A run id that is no valid name still gives one.
	if odd := ConsumerConfig(Options{Run: "run a.b/c"}); odd.Durable == "" || strings.ContainsAny(odd.Durable, " ./*>") {
		t.Fatalf("consumer of run %q named %q", "run a.b/c", odd.Durable)
	}

	f := newFixtureWith(t, toyllm.Options{}, Options{Concurrency: 4, Run: "run-a"})
	ctx := context.Background()
	// Run b's episode is queued first: had the worker been able to take it,
	// it would have before finishing run a's.
	other := episodeRequest("of-run-b", func(r *messages.EpisodeRequest) { r.RunID = "run-b" })
	data, err := messages.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, f.js, f.subj.Episodes(other.RunID, other.Env), data, ""); err != nil {
		t.Fatal(err)
	}
	evs := f.run(t, episodeRequest("of-run-a", func(r *messages.EpisodeRequest) { r.RunID = "run-a" }))
	if last := evs[len(evs)-1]; last.Error != "" {
		t.Fatalf("run a's episode failed: %s", last.Error)
	}
	queued := func(run string) (uint64, error) {
		stream, err := f.js.Stream(ctx, f.subj.StreamEpisodes())
		if err != nil {
			return 0, err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(f.subj.EpisodesOfRun(run)))
		if err != nil {
			return 0, err
		}
		// State.Msgs counts the whole stream; Subjects only the filter's.
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n, nil
	}
	if n, err := queued("run-b"); err != nil || n != 1 || f.worker.Stats().Started != 1 {
		t.Fatalf("want run b's episode queued and only run a's started: %d queued (%v), %+v", n, err, f.worker.Stats())
	}
	// A worker of run b, beside it, takes run b's episode and no other.
	js := f.js
	b, err := New(js.Conn(), js, Options{Concurrency: 4, Run: "run-b", Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	t.Cleanup(func() { cancel(); <-done })
	bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if st := b.Stats(); st.Finished != 1 {
			return fmt.Errorf("run b's worker: %+v", st)
		}
		if n, err := queued("run-b"); err != nil || n != 0 {
			return fmt.Errorf("run b's episodes queued: %d (%v)", n, err)
		}
		return nil
	})
	if st := f.worker.Stats(); st.Started != 1 {
		t.Errorf("run a's worker started %d episodes, want 1", st.Started)
	}
	for _, ev := range f.steps(t, "run-b", "of-run-b") {
		if ev.RunID != "run-b" {
			t.Errorf("run b's step %d carries run %q", ev.Turn, ev.RunID)
		}
	}
}
