package env

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestStoreFault: what a store that cannot take a message now returns is a
// store fault, waited out; a fault of the message or the request is not.
func TestStoreFault(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("bus: publish rf.steps.x: %w", &jetstream.APIError{ErrorCode: code, Code: 503})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unanswered publish (full or read-only disk)", fmt.Errorf("bus: publish rf.steps.x: %w", context.DeadlineExceeded), true},
		{"request timeout", nats.ErrTimeout, true},
		{"no responders (JetStream disabled)", fmt.Errorf("read steps of x: %w", nats.ErrNoResponders), true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true},
		{"JetStream not enabled", jetstream.ErrJetStreamNotEnabled, true},
		{"insufficient resources", api(10023), true},
		{"stream store failed (a full stream)", api(10077), true},
		{"temporarily unavailable", api(10008), true},
		{"too large", fmt.Errorf("%w: 9 MB", bus.ErrTooLarge), false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"bad request", api(10003), false},
		{"other", errors.New("boom"), false},
		{"nil", nil, false},
	} {
		if got := storeFault(tc.err); got != tc.want {
			t.Errorf("%s: storeFault(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestGiveUpReason: an episode delivered beyond the limit names the cause
// this worker saw when one of its deliveries ended here, and otherwise says
// what a delivery ending without an outcome means, not a guess.
func TestGiveUpReason(t *testing.T) {
	w := &Worker{}
	neutral := w.giveUpReason("a", 5)
	if !strings.Contains(neutral, "gave up after 5 deliveries without an outcome") || strings.Contains(neutral, "model") {
		t.Fatalf("no cause known: %q", neutral)
	}
	w.handBacks.note("a", 3, fmt.Errorf("%w: rf.llm.generate: gave up after 4 attempts: %w", errInfra, nats.ErrNoResponders))
	if got := w.giveUpReason("a", 5); !strings.Contains(got, "the model side stayed down (delivery 3 here") {
		t.Fatalf("model side down: %q", got)
	}
	w.handBacks.note("b", 2, fmt.Errorf("%w while waiting for the store to store a step: %w", errStopped, context.DeadlineExceeded))
	if got := w.giveUpReason("b", 5); !strings.Contains(got, "delivery 2 here ended with: worker stopping") || strings.Contains(got, "model") {
		t.Fatalf("worker stopped: %q", got)
	}
	w.handBacks.forget("a")
	if got := w.giveUpReason("a", 5); got != neutral {
		t.Fatalf("forgotten: %q", got)
	}
}

// TestJetStreamDisabled shuts JetStream down while episodes run, as
// nats-server does itself when a store write is refused for permissions
// (or, on a cluster, runs out of space), and enables it again after longer
// than MaxDeliver times AckWait: publishes and reads find no responders
// meanwhile, and heartbeats go nowhere.
func TestJetStreamDisabled(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out MaxDeliver times AckWait with JetStream off")
	}
	const episodes = 12
	dir := t.TempDir()
	s, _ := runServerOn(t, dir)
	srv := httptest.NewServer(toyllm.New(toyllm.Options{TokenLatency: 2 * time.Millisecond}).Handler())
	t.Cleanup(srv.Close)
	js, coll, _, start := resumeHarness(t, s, srv.URL)
	opts := Options{Concurrency: episodes, AckWait: time.Second, MaxDeliver: 2}
	w := startWorker(t, s, "env", opts, start)
	attempts := recordAttempts(t, s)

	submitEpisodes(t, js, episodes, messages.ObsChat)
	waitSteps(t, js, episodes)
	down := time.Now()
	if err := s.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		if w.Stats().StoreWaiting == 0 {
			return fmt.Errorf("no episode waits for the store: %+v", w.Stats())
		}
		return nil
	})
	holdFor(t, outage(down, opts), func() error {
		if n := handedBack(w); n != 0 {
			return fmt.Errorf("%d episodes handed back during the outage", n)
		}
		return nil
	})
	if err := s.EnableJetStream(&server.JetStreamConfig{StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		if st := w.Stats(); st.StoreWaiting != 0 {
			return fmt.Errorf("episodes still wait for the store: %+v", st)
		}
		return nil
	})
	bustest.CheckFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		if st := coll.Stats(); st.Trajectories != episodes {
			return fmt.Errorf("collector: %+v", st)
		}
		return nil
	})
	checkOutcomes(t, js, messages.NewSubjects(""), coll, episodes)
	// JetStream, enabled again, restores each delivery with its last
	// heartbeat before the outage and hands out again those older than
	// AckWait: the outage may cost an episode one delivery, no more.
	st := w.Stats()
	if st.StoreWaits == 0 || st.Failed != 0 {
		t.Fatalf("worker after the outage: %+v", st)
	}
	attempts.check(t, episodes, opts.MaxDeliver)
	t.Logf("worker: %+v", st)
}

// runServerOn starts a server storing in dir with streams small enough for
// a small file system (JetStream reserves each stream's size limit).
func runServerOn(t *testing.T, dir string) (*server.Server, bus.ServerOptions) {
	t.Helper()
	sopts := bus.ServerOptions{DontListen: true, DataDir: dir}
	s := bustest.RunListeningServer(t, sopts)
	js := bustest.JetStream(t, s, "setup")
	err := bus.EnsureStreams(context.Background(), js, messages.NewSubjects(""), bus.StreamOptions{MaxBytes: 2 << 20, StepsMaxBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s, sopts
}

// outage is how much longer a fault that began at start must last to
// outlast the episodes' deliveries had each been handed back at once
// (MaxDeliver+1 times AckWait), and at least one AckWait more.
func outage(start time.Time, opts Options) time.Duration {
	return max(time.Until(start.Add(time.Duration(opts.MaxDeliver+1)*opts.AckWait)), opts.AckWait)
}

// holdFor checks f every few milliseconds for d and fails the test as soon
// as it reports an error.
func holdFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

// handedBack is the number of episodes w handed back.
func handedBack(w *Worker) int {
	w.handBacks.mu.Lock()
	defer w.handBacks.mu.Unlock()
	return len(w.handBacks.m)
}

// attempts records the highest delivery of each episode that published a
// step, from a plain subscription to the steps (the collector purges the
// stream as it records outcomes).
type attempts struct {
	mu  sync.Mutex
	max map[string]int32
	err []string // error steps
}

func recordAttempts(t *testing.T, s *server.Server) *attempts {
	t.Helper()
	a := &attempts{max: map[string]int32{}}
	_, err := bustest.Connect(t, s, "steps").Subscribe(messages.NewSubjects("").StepsAll(), func(m *nats.Msg) {
		ev, err := messages.Decode[messages.StepEvent](m.Data)
		if err != nil {
			return // an outcome marker
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.max[ev.EpisodeID] = max(a.max[ev.EpisodeID], ev.Attempt)
		if ev.Error != "" {
			a.err = append(a.err, ev.EpisodeID+": "+ev.Error)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// check fails the test unless n episodes published steps, none in an error
// step and none beyond delivery maxDeliver.
func (a *attempts) check(t *testing.T, n, maxDeliver int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.err) > 0 {
		t.Fatalf("error steps: %q", a.err)
	}
	if len(a.max) != n {
		t.Fatalf("%d episodes published steps, want %d", len(a.max), n)
	}
	byDelivery := map[int32]int{}
	for id, at := range a.max {
		if at > int32(maxDeliver) {
			t.Fatalf("%s ran as delivery %d, beyond MaxDeliver %d", id, at, maxDeliver)
		}
		byDelivery[at]++
	}
	t.Logf("episodes by their last delivery: %v", byDelivery)
}
