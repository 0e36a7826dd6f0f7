package llm

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollfleet/rollfleet/vllm"
)

// Bounds of an adaptive in-flight cap.
const (
	// adaptiveStart is where an adaptive cap starts: the fixed default it
	// replaced, a quarter of what a vLLM server runs at once by default.
	adaptiveStart = 64
	// adaptiveMin is the lowest an adaptive cap goes, and the least
	// headroom it keeps over what the server runs.
	adaptiveMin = 4
	// adaptiveMax is the highest an adaptive cap goes: twice vLLM's largest
	// default batch (max_num_seqs 1024) is room for any one server.
	adaptiveMax = 2048
	// headroomDiv sets the queue an adaptive cap aims to keep at the
	// server: an eighth of what it runs, so a finishing sequence's slot is
	// refilled at once without a deep queue.
	headroomDiv = 8
	// slowdown is how far the model's time per generated token may rise over
	// its baseline before the cap stops growing: past it, more requests in
	// flight no longer buy throughput.
	slowdown = 2.0
	// baselineDrift is the share of the gap by which the latency baseline
	// follows a slower server each reading, so a lasting change (longer
	// prompts, another tenant) stops holding the cap after a few seconds.
	baselineDrift = 1.0 / 16
)

// limiter bounds an endpoint's requests in flight. Its limit can change
// while requests hold or wait for slots; waiters are served in order.
type limiter struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiters []chan struct{}
	// blocked counts acquisitions that had to wait: the cap, not the
	// demand, set the load.
	blocked atomic.Uint64
}

func newLimiter(limit int) *limiter { return &limiter{limit: limit} }

// inFlight returns the slots taken and the limit.
func (l *limiter) inFlight() (used, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used, l.limit
}

// tryAcquire takes a slot if one is free and nobody waits for one.
func (l *limiter) tryAcquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used < l.limit && len(l.waiters) == 0 {
		l.used++
		return true
	}
	return false
}

// acquire waits for a slot.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.used < l.limit && len(l.waiters) == 0 {
		l.used++
		l.mu.Unlock()
		return nil
	}
	l.blocked.Add(1)
	ch := make(chan struct{}, 1)
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.waiters {
		if w == ch {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return ctx.Err()
		}
	}
	// Granted while giving up: pass the slot on.
	l.releaseLocked()
	return ctx.Err()
}

// release gives back a slot, to the first waiter if the limit allows.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
}

func (l *limiter) releaseLocked() {
	if len(l.waiters) > 0 && l.used <= l.limit {
		l.grantLocked() // the slot changes hands
		return
	}
	l.used--
}

// setLimit changes the limit. Raising it admits waiters at once; lowering
// it lets requests in flight finish and admits nobody until fewer than the
// new limit remain.
func (l *limiter) setLimit(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limit = n
	for l.used < l.limit && len(l.waiters) > 0 {
		l.used++
		l.grantLocked()
	}
}

// grantLocked wakes the first waiter, whose slot is already counted.
func (l *limiter) grantLocked() {
	l.waiters[0] <- struct{}{}
	l.waiters[0] = nil
	l.waiters = l.waiters[1:]
}

// loadSample is what the in-flight control sees of an endpoint at one
// reading.
type loadSample struct {
	// load is the server's scheduler state from its /metrics.
	load vllm.Load
	// inFlight is this worker's requests at the server.
	inFlight int
	// blocked is whether a request waited for a slot since the last
	// reading: the cap held back demand.
	blocked bool
	// perToken is the mean model time per generated token since the last
	// reading, 0 when nothing was generated.
	perToken time.Duration
}

// capControl adapts one endpoint's in-flight cap to the server's load, as
// an AIMD controller: it raises the cap while the cap is what holds the
// load back and the server has room, and lowers it when the server queues
// more than a little. Room is judged from vLLM's gauges: requests waiting
// (the server is full), KV-cache usage (how many sequences would fill it)
// and the model's time per token (past slowdown times its baseline, more
// in flight buys nothing). It is not safe for concurrent use.
type capControl struct {
	// backedOff is set once the server queued past the headroom: growth is
	// additive from then on, instead of doubling.
	backedOff bool
	// baseline is the time per token the server gives when not overloaded.
	baseline time.Duration
}

// next returns the cap after a reading s, given the current cap.
func (c *capControl) next(cur int, s loadSample) int {
	slow := c.slowedDown(s.perToken)
	l := s.load
	headroom := max(adaptiveMin, int(math.Ceil(l.Running/headroomDiv)))
	if l.Waiting > float64(headroom) {
		// The server queues past the headroom: give back this worker's
		// share of the excess (other workers see the same queue).
		share := 1.0
		if total := l.Running + l.Waiting; total > 0 {
			share = min(float64(s.inFlight)/total, 1)
		}
		c.backedOff = true
		return clampCap(cur - max(int(math.Ceil((l.Waiting-float64(headroom))*share)), 1))
	}
	if !s.blocked || slow || l.Waiting > float64(headroom)/2 {
		return cur
	}
	grow := cur + headroom
	switch {
	case l.KVCacheUsage > 0 && l.Running > 0:
		// The KV cache tells how many more sequences fit.
		room := int(math.Ceil(l.Running/l.KVCacheUsage - l.Running))
		grow = cur + max(room, headroom)
	case !c.backedOff:
		grow = 2 * cur
	}
	return clampCap(min(grow, 2*cur))
}

// slowedDown reports whether perToken is past slowdown times the baseline,
// and updates the baseline: the lowest time seen, drifting towards slower
// readings.
func (c *capControl) slowedDown(perToken time.Duration) bool {
	if perToken <= 0 {
		return false
	}
	slow := c.baseline > 0 && float64(perToken) > slowdown*float64(c.baseline)
	switch {
	case c.baseline == 0 || perToken < c.baseline:
		c.baseline = perToken
	default:
		c.baseline += time.Duration(float64(perToken-c.baseline) * baselineDrift)
	}
	return slow
}

func clampCap(n int) int { return min(max(n, adaptiveMin), adaptiveMax) }

// maxInFlight is the most requests one endpoint may get at once: the fixed
// bound, or an adaptive one at its highest.
func (w *Worker) maxInFlight() int {
	if w.opts.MaxInFlight > 0 {
		return w.opts.MaxInFlight
	}
	return adaptiveMax
}

// noLoadEvery is how many intervals apart a server whose /metrics has no
// scheduler gauges (vllm.ErrNoLoad) is asked again: it may be restarted
// with them, but most such servers never will have them.
const noLoadEvery = 60

// adaptLoop adapts e's in-flight cap every LoadInterval from its server's
// /metrics until ctx ends. A reading that fails keeps the cap; the first
// failure after a success is logged.
func (w *Worker) adaptLoop(ctx context.Context, e *endpoint) {
	t := time.NewTicker(w.opts.LoadInterval)
	defer t.Stop()
	var ctl capControl
	var lastBlocked uint64
	var lastNanos, lastTokens int64
	failing := false
	skip := 0 // intervals left before a server without gauges is asked again
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if skip > 0 {
			skip--
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, w.opts.LoadInterval)
		load, err := e.client.Load(lctx)
		cancel()
		blocked, nanos, tokens := e.slots.blocked.Load(), e.modelNanos.Load(), e.modelTokens.Load()
		s := loadSample{load: load, blocked: blocked != lastBlocked}
		if dt := tokens - lastTokens; dt > 0 {
			s.perToken = time.Duration((nanos - lastNanos) / dt)
		}
		lastBlocked, lastNanos, lastTokens = blocked, nanos, tokens
		if err != nil {
			if !failing && ctx.Err() == nil {
				w.log.Info("cannot read the model server's load; keeping its in-flight cap", "endpoint", e.url, "err", err)
			}
			failing = true
			if errors.Is(err, vllm.ErrNoLoad) {
				skip = noLoadEvery - 1
			}
			continue
		}
		failing = false
		var cur int
		s.inFlight, cur = e.slots.inFlight()
		if next := ctl.next(cur, s); next != cur {
			e.slots.setLimit(next)
			w.log.Debug("in-flight cap", "endpoint", e.url, "cap", next, "running", load.Running, "waiting", load.Waiting,
				"kv_cache_usage", load.KVCacheUsage, "per_token", s.perToken)
		}
	}
}
