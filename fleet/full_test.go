package fleet

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// TestFullStreamWaitsForAReader: the trajectory stream is full of another
// run's records that nobody reads. The run says so (Full, and a bounded
// number of log lines), stops submitting at its window instead of queueing
// work, loses nothing, and finishes once a reader frees the stream.
func TestFullStreamWaitsForAReader(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: filepath.Join(t.TempDir(), "nats")})
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	streams := bus.StreamOptions{MaxBytes: 256 << 10}
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, streams); err != nil {
		t.Fatal(err)
	}
	// An interrupted run's records, which nobody reads, fill the stream.
	for _, size := range []int{8 << 10, 512, 16} {
		for i := 0; ; i++ {
			err := bus.Publish(ctx, js, subj.Trajectories("old", "x"), make([]byte, size), "")
			if errors.Is(err, bus.ErrStreamFull) {
				break
			}
			if err != nil || i > 1000 {
				t.Fatalf("filling the stream: %v after %d records", err, i)
			}
		}
	}

	const episodes, window = 64, 16
	var (
		mu       sync.Mutex
		states   [][]string
		progress int
	)
	full := make(chan struct{})
	var once sync.Once
	rec := &bustest.LogRecorder{Min: slog.LevelWarn}
	seed := uint64(4)
	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := Run(ctx, Options{
			Env: "game:GuessTheNumber-v0", Episodes: episodes, Seed: &seed, NATS: s.ClientURL(),
			Streams: streams, SubmitWindow: window, Logger: slog.New(rec),
			Progress: func(d, _ int) { mu.Lock(); progress = d; mu.Unlock() },
			Full: func(kinds []string) {
				mu.Lock()
				states = append(states, kinds)
				mu.Unlock()
				if slices.Contains(kinds, trainer.KindTrajectory) {
					once.Do(func() { close(full) })
				}
			},
		})
		done <- result{sum, err}
	}()
	select {
	case <-full:
	case r := <-done:
		t.Fatalf("the run ended with the stream full: %v %s", r.err, r.sum)
	case <-time.After(60 * time.Second):
		t.Fatal("a full trajectory stream was not reported")
	}
	// Nothing could be stored, and submission stopped at the window.
	eps, err := js.Stream(ctx, subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	p := progress
	mu.Unlock()
	if last := eps.CachedInfo().State.LastSeq; p != 0 || last != window {
		t.Fatalf("while the stream is full: %d episodes decided, %d submitted; want 0 and %d", p, last, window)
	}

	// A reader of the old run appears and frees the stream.
	cons, err := js.CreateConsumer(ctx, subj.StreamTrajectories(), jetstream.ConsumerConfig{
		FilterSubject: subj.TrajectoriesOfRun("old"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	for freed := 0; ; {
		batch, err := cons.FetchNoWait(64)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if freed += n; n == 0 && freed > 0 {
			break
		}
	}

	var r result
	select {
	case r = <-done:
	case <-time.After(180 * time.Second): // outcomes come back within 30 s of their last refusal
		mu.Lock()
		t.Fatalf("the run did not finish once the stream had room: %d decided, states %v\n%s", progress, states, strings.Join(rec.Lines(), "\n"))
	}
	if r.err != nil || r.sum.Trajectories != episodes || r.sum.Failures != 0 || r.sum.Duplicates != 0 {
		t.Fatalf("run: %v %s", r.err, r.sum)
	}
	mu.Lock()
	for _, st := range states {
		if len(st) > 0 && !slices.Equal(st, []string{trainer.KindTrajectory}) {
			t.Errorf("reported full: %v; only the trajectory stream was", st)
		}
	}
	mu.Unlock()
	var lines int
	for _, l := range rec.Lines() {
		if strings.Contains(l, "trajectory stream full: no consumer is reading") {
			lines++
		}
	}
	// One line a minute from the collector, one from the run's watcher.
	if lines == 0 || lines > 4 {
		t.Errorf("%d log lines say the trajectory stream is full, want 1 to 4:\n%s", lines, strings.Join(rec.Lines(), "\n"))
	}
}

// TestRunBesideStandingEnvWorkers: a run that would start env workers of
// its own on a server whose episodes standing env workers take fails at
// start, saying to submit to them instead, with nothing submitted.
func TestRunBesideStandingEnvWorkers(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: filepath.Join(t.TempDir(), "nats")})
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, subj.StreamEpisodes(), envactor.ConsumerConfig(envactor.Options{})); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(ctx, Options{Env: "game:GuessTheNumber-v0", Episodes: 4, NATS: s.ClientURL()})
	if !errors.Is(err, ErrEpisodesTaken) || sum.Started {
		t.Fatalf("run beside standing env workers: %v (started %v), want ErrEpisodesTaken before start", err, sum.Started)
	}
	st, err := js.Stream(ctx, subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d episodes submitted", n)
	}
}

// TestFinishedRunLeavesNothing: once a run has finished, the server holds
// nothing of it — no record, step or decision, and none of its consumers —
// so job after job runs in the same disk.
func TestFinishedRunLeavesNothing(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: filepath.Join(t.TempDir(), "nats")})
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	for job := range 2 {
		seed := uint64(job)
		sum, err := Run(ctx, Options{Env: "game:GuessTheNumber-v0", Episodes: 64, NSamples: 2, Seed: &seed, NATS: s.ClientURL()})
		if err != nil || sum.Trajectories != 64 {
			t.Fatalf("job %d: %v %s", job, err, sum)
		}
		for _, name := range []string{subj.StreamEpisodes(), subj.StreamSteps(), subj.StreamDecided(),
			subj.StreamTrajectories(), subj.StreamGroups(), subj.StreamFailures()} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info := st.CachedInfo()
			consumers := 0
			if name == subj.StreamSteps() {
				consumers = 1 // the collector's durable, shared by every run
			}
			if info.State.Msgs != 0 || info.State.Consumers != consumers {
				t.Errorf("job %d: %s holds %d messages and %d consumers after the run", job, name, info.State.Msgs, info.State.Consumers)
			}
		}
	}
}
