package llm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
	"github.com/rollfleet/rollfleet/vllm"
)

// waiters is the number of acquisitions waiting at l.
func (l *limiter) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters)
}

func TestLimiter(t *testing.T) {
	l := newLimiter(2)
	ctx := context.Background()
	for range 2 {
		if err := l.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if l.tryAcquire() {
		t.Fatal("tryAcquire took a slot past the limit")
	}
	// Two waiters, in order; a third gives up.
	granted := make(chan int, 2)
	for i := range 2 {
		go func() {
			if err := l.acquire(ctx); err != nil {
				t.Error(err)
			}
			granted <- i
		}()
		bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
			if n := l.waiting(); n != i+1 {
				return fmt.Errorf("%d waiting", n)
			}
			return nil
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- l.acquire(cctx) }()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if n := l.waiting(); n != 3 {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	if n := l.waiting(); n != 2 {
		t.Fatalf("%d waiting after one gave up, want 2", n)
	}
	if n := l.blocked.Load(); n != 3 {
		t.Errorf("%d blocked acquisitions, want 3", n)
	}

	// Raising the limit admits the first waiter at once.
	l.setLimit(3)
	if i := <-granted; i != 0 {
		t.Fatalf("waiter %d admitted first", i)
	}
	// A release hands the slot to the next waiter.
	l.release()
	if i := <-granted; i != 1 {
		t.Fatalf("waiter %d admitted second", i)
	}
	if used, limit := l.inFlight(); used != 3 || limit != 3 {
		t.Fatalf("%d of %d in flight", used, limit)
	}
	// Lowering it holds new requests until fewer than the limit remain.
	l.setLimit(1)
	l.release()
	if l.tryAcquire() {
		t.Fatal("tryAcquire past a lowered limit")
	}
	l.release()
	if l.tryAcquire() {
		t.Fatal("tryAcquire at the lowered limit")
	}
	l.release()
	if !l.tryAcquire() {
		t.Fatal("tryAcquire below the lowered limit failed")
	}
}

func TestCapControl(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name string
		ctl  capControl
		cur  int
		s    loadSample
		want int
	}{
		{"demand below the cap: hold", capControl{}, 64,
			loadSample{load: vllm.Load{Running: 10, KVCacheUsage: 0.1}, inFlight: 10}, 64},
		{"no KV usage: double", capControl{}, 64,
			loadSample{load: vllm.Load{Running: 64, KVCacheUsage: -1}, inFlight: 64, blocked: true}, 128},
		{"no KV usage after backing off: add the headroom", capControl{backedOff: true}, 100,
			loadSample{load: vllm.Load{Running: 100, KVCacheUsage: -1}, inFlight: 100, blocked: true}, 113},
		{"KV cache a quarter full: at most double", capControl{}, 64,
			loadSample{load: vllm.Load{Running: 64, KVCacheUsage: 0.25}, inFlight: 64, blocked: true}, 128},
		{"KV cache half full: grow by the room left", capControl{}, 200,
			loadSample{load: vllm.Load{Running: 200, KVCacheUsage: 0.8}, inFlight: 200, blocked: true}, 250},
		{"KV cache full: the headroom over what runs", capControl{}, 256,
			loadSample{load: vllm.Load{Running: 256, KVCacheUsage: 1}, inFlight: 256, blocked: true}, 288},
		{"a short queue: hold", capControl{}, 288,
			loadSample{load: vllm.Load{Running: 256, Waiting: 20, KVCacheUsage: 1}, inFlight: 288, blocked: true}, 288},
		{"a queue past the headroom: give it back", capControl{}, 320,
			loadSample{load: vllm.Load{Running: 256, Waiting: 64, KVCacheUsage: 1}, inFlight: 320, blocked: true}, 288},
		{"a shared server: give back this worker's share", capControl{}, 160,
			loadSample{load: vllm.Load{Running: 256, Waiting: 64, KVCacheUsage: 1}, inFlight: 160}, 144},
		{"everything waits (a paused server): the floor", capControl{}, 113,
			loadSample{load: vllm.Load{Waiting: 113}, inFlight: 113, blocked: true}, adaptiveMin},
		{"the ceiling", capControl{}, adaptiveMax,
			loadSample{load: vllm.Load{Running: adaptiveMax, KVCacheUsage: -1}, inFlight: adaptiveMax, blocked: true}, adaptiveMax},
		{"time per token doubled: hold", capControl{baseline: 10 * ms}, 64,
			loadSample{load: vllm.Load{Running: 64, KVCacheUsage: -1}, inFlight: 64, blocked: true, perToken: 25 * ms}, 64},
		{"time per token within twice the baseline: grow", capControl{baseline: 10 * ms}, 64,
			loadSample{load: vllm.Load{Running: 64, KVCacheUsage: -1}, inFlight: 64, blocked: true, perToken: 15 * ms}, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ctl.next(tc.cur, tc.s); got != tc.want {
				t.Errorf("next(%d) = %d, want %d", tc.cur, got, tc.want)
			}
		})
	}
}

// TestCapControlConverges runs the controller against a model of a server
// that runs capacity sequences at once and queues the rest, with demand
// always above the cap: the cap must settle where the server is full and
// its queue is at most the headroom.
func TestCapControlConverges(t *testing.T) {
	for _, tc := range []struct {
		capacity int
		kv       bool // the server reports KV-cache usage
		workers  int  // workers sharing the server, each with its own cap
	}{
		{256, true, 1}, {256, false, 1}, {1000, true, 1}, {1000, false, 1}, {40, true, 1},
		{256, true, 3}, {256, false, 3},
	} {
		t.Run(fmt.Sprintf("capacity %d, kv %v, %d workers", tc.capacity, tc.kv, tc.workers), func(t *testing.T) {
			ctls := make([]capControl, tc.workers)
			caps := make([]int, tc.workers)
			for i := range caps {
				caps[i] = adaptiveStart
			}
			var total int
			for step := range 40 {
				total = 0
				for _, c := range caps {
					total += c
				}
				running := min(total, tc.capacity)
				load := vllm.Load{Running: float64(running), Waiting: float64(total - running), KVCacheUsage: -1}
				if tc.kv {
					load.KVCacheUsage = float64(running) / float64(tc.capacity)
				}
				for i := range caps {
					caps[i] = ctls[i].next(caps[i], loadSample{load: load, inFlight: caps[i], blocked: true})
				}
				if step >= 30 && total < tc.capacity {
					t.Fatalf("step %d: %v in flight, the server of %d is not full", step, caps, tc.capacity)
				}
			}
			if headroom := max(adaptiveMin, tc.capacity/headroomDiv); total > tc.capacity+headroom+tc.workers {
				t.Errorf("settled at %v, %d in flight: a queue of %d past the headroom %d", caps, total, total-tc.capacity, headroom)
			}
		})
	}
}

// TestAdaptiveInFlight runs a worker with the default, adaptive cap
// against the stand-in model with a concurrency cap: under load the cap
// rises above its start to fill the server, and it falls when the server
// reports requests waiting (here, while it is paused).
func TestAdaptiveInFlight(t *testing.T) {
	const capacity, clients = 80, 96
	f := newFixture(t)
	m := newModel(t, toyllm.Options{MaxConcurrent: capacity, TokenLatency: 2 * time.Millisecond}, nil)
	w := f.start(t, Options{LoadInterval: 5 * time.Millisecond}, m)
	capNow := func() int { return int(w.Endpoints()[0].Max) }
	if c := capNow(); c != adaptiveStart {
		t.Fatalf("cap %d at the start, want %d", c, adaptiveStart)
	}
	ctx, stop := context.WithCancel(context.Background())
	var clientsDone sync.WaitGroup
	defer clientsDone.Wait()
	defer stop()
	for i := range clients {
		clientsDone.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				data, _ := messages.Marshal(generateRequest(fmt.Sprintf("episode-%d", i), int64(n)))
				if _, err := f.nc.RequestWithContext(ctx, f.subj.Generate(), data); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if c := capNow(); c <= adaptiveStart {
			return fmt.Errorf("cap %d under load", c)
		}
		return nil
	})
	risen := capNow()

	toy, err := vllm.New(m.url, vllm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := toy.Pause(ctx, "wait"); err != nil {
		t.Fatal(err)
	}
	// Held generations are let go however the test ends.
	defer func() { _ = toy.Resume(context.Background()) }()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if c := capNow(); c >= risen {
			return fmt.Errorf("cap %d with the server paused, had risen to %d", c, risen)
		}
		return nil
	})
	if err := toy.Resume(ctx); err != nil {
		t.Fatal(err)
	}
}
