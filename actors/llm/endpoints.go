package llm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/vllm"
)

// endpoint is one model server with its in-flight bound and health state.
type endpoint struct {
	url     string
	client  *vllm.Client
	slots   *limiter // the in-flight cap, fixed or adapted to the server's load
	healthy atomic.Bool

	// modelNanos and modelTokens sum the completion calls' durations and
	// generated tokens, for the in-flight control's latency reading.
	modelNanos, modelTokens atomic.Int64

	tokens tokcache.Cache
	pieces pieceCache

	// window is the model's context length plus one once learned; 0 before.
	window atomic.Int64
}

// capMaxTokens fits a turn's max_tokens into the model's context window: a
// budget larger than what is left of the window would be refused outright,
// though a shorter generation fits. A prompt that fills the window is a
// context-length error, as the server would report it.
func (e *endpoint) capMaxTokens(ctx context.Context, promptLen, maxTokens int) (int, error) {
	w := e.window.Load()
	if w == 0 {
		n, err := e.client.MaxModelLen(ctx)
		if err != nil {
			return maxTokens, nil // unknown this time: let the server judge
		}
		w = int64(n) + 1
		e.window.Store(w)
	}
	if w == 1 {
		return maxTokens, nil // the server reports no window
	}
	room := int(w-1) - promptLen
	if room <= 0 {
		return 0, fmt.Errorf("%w: prompt of %d tokens fills the model's %d-token window", vllm.ErrContextLength, promptLen, w-1)
	}
	return min(maxTokens, room), nil
}

// endedTurn reports whether the model ended its turn itself: the server
// stopped on an end-of-sequence token (stop_reason null) or a stop token id
// (stop_reason that id), which the completion's ids end with. A stop string
// or the length limit is not an end of turn. Which token ends a turn is the
// model's business (Qwen3 stops on <|im_end|> or <|endoftext|>, Llama 3 on
// <|eot_id|>), so it is read from where the server stopped, never probed.
func endedTurn(c *vllm.Completion) bool {
	n := len(c.TokenIDs)
	if c.FinishReason != "stop" || n == 0 {
		return false
	}
	return c.StopReason == "" || c.StopReason == strconv.Itoa(int(c.TokenIDs[n-1]))
}

func (e *endpoint) inFlight() int {
	n, _ := e.slots.inFlight()
	return n
}

// noteCompletion counts a completion call of d that generated tokens.
func (e *endpoint) noteCompletion(d time.Duration, tokens int) {
	e.modelNanos.Add(int64(d))
	e.modelTokens.Add(int64(tokens))
}

// Routing policies: how the LLM worker spreads requests over its model
// servers (Options.Routing).
const (
	// RoutingSticky sends each episode to its own server, chosen by
	// rendezvous hashing of the episode id (every LLM worker computes the
	// same), so that its turns find their conversation in that server's
	// prefix cache; when that server is full or down, a request goes to the
	// least-loaded healthy server instead.
	RoutingSticky = "sticky"
	// RoutingStickyWait is RoutingSticky, except that a request whose
	// server is full waits up to Options.RoutingWait for one of its slots
	// before going elsewhere: a short wait can cost less than computing the
	// whole conversation again on another server.
	RoutingStickyWait = "sticky-wait"
	// RoutingLeastLoaded sends each request to the healthy server with the
	// fewest of this worker's requests in flight, wherever its episode went
	// before.
	RoutingLeastLoaded = "least-loaded"
	// RoutingRoundRobin sends requests to the healthy servers in turn,
	// waiting for the chosen server's slot.
	RoutingRoundRobin = "round-robin"
)

// DefaultRoutingWait is Options.RoutingWait's default.
const DefaultRoutingWait = time.Second

// RoutingPolicies lists the routing policies, the default first.
var RoutingPolicies = []string{RoutingSticky, RoutingStickyWait, RoutingLeastLoaded, RoutingRoundRobin}

// ErrUnknownRouting is returned by New for an Options.Routing that is none
// of RoutingPolicies.
var ErrUnknownRouting = errors.New("llm: unknown routing policy")

// router picks endpoints by its routing policy. Sticky routing keeps an
// episode on the endpoint its key ranks highest by rendezvous hashing (every
// LLM worker computes the same preference, so an episode keeps hitting the
// same server's prefix cache), falling back to the least-loaded healthy
// endpoint when the preferred one is full (after waiting up to wait, for
// sticky-wait) or down.
type router struct {
	eps []*endpoint
	// policy is one of RoutingPolicies; empty is RoutingSticky.
	policy string
	// wait bounds RoutingStickyWait's wait for the sticky endpoint's slot.
	wait time.Duration
	// next is RoutingRoundRobin's turn.
	next atomic.Uint64
}

// score is the rendezvous weight of an endpoint for a key.
func score(key, url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(url))
	return h.Sum64()
}

// pick returns an endpoint with a slot already acquired, skipping those in
// tried, by the router's policy; errNoEndpoint when every endpoint was
// tried. Sticky routing prefers, in order: the episode's sticky endpoint if
// healthy and not full (or, for sticky-wait, once a slot frees within the
// wait); any healthy endpoint with a free slot (least loaded first); the
// least-loaded healthy endpoint (waiting for a slot); and, when every
// untried endpoint is marked down, the least-loaded of those, because a
// health mark can be stale and failing without trying is worse.
func (r *router) pick(ctx context.Context, key string, tried map[*endpoint]bool) (*endpoint, error) {
	switch r.policy {
	case RoutingLeastLoaded:
		return r.pickLeastLoaded(ctx, tried)
	case RoutingRoundRobin:
		return r.pickRoundRobin(ctx, tried)
	}
	sticky := r.sticky(key, tried)
	if sticky == nil {
		return nil, errNoEndpoint
	}
	if sticky.healthy.Load() {
		if sticky.slots.tryAcquire() {
			return sticky, nil
		}
		if r.policy == RoutingStickyWait && r.wait > 0 {
			wctx, cancel := context.WithTimeout(ctx, r.wait)
			err := sticky.slots.acquire(wctx)
			cancel()
			if err == nil {
				return sticky, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return r.pickLeastLoaded(ctx, tried)
}

// pickLeastLoaded takes a slot of the least-loaded healthy untried
// endpoint, or of the least-loaded untried one when all are down, waiting
// for it if it is full.
func (r *router) pickLeastLoaded(ctx context.Context, tried map[*endpoint]bool) (*endpoint, error) {
	least := r.leastLoaded(tried, true)
	if least == nil {
		least = r.leastLoaded(tried, false)
	}
	if least == nil {
		return nil, errNoEndpoint
	}
	return takeSlot(ctx, least)
}

// pickRoundRobin takes a slot of the next healthy untried endpoint in turn,
// or of the next untried one when all are down, waiting for it if it is
// full.
func (r *router) pickRoundRobin(ctx context.Context, tried map[*endpoint]bool) (*endpoint, error) {
	n := len(r.eps)
	start := int(r.next.Add(1) % uint64(max(n, 1)))
	var fallback *endpoint
	for i := range n {
		e := r.eps[(start+i)%n]
		if tried[e] {
			continue
		}
		if e.healthy.Load() {
			return takeSlot(ctx, e)
		}
		if fallback == nil {
			fallback = e
		}
	}
	if fallback == nil {
		return nil, errNoEndpoint
	}
	return takeSlot(ctx, fallback)
}

// takeSlot takes one of e's slots, waiting for it if need be, and returns e.
func takeSlot(ctx context.Context, e *endpoint) (*endpoint, error) {
	if !e.slots.tryAcquire() {
		if err := e.slots.acquire(ctx); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// preferred is the episode's sticky endpoint.
func (r *router) preferred(key string) *endpoint { return r.sticky(key, nil) }

// sticky is the untried endpoint with the highest rendezvous score for key.
func (r *router) sticky(key string, tried map[*endpoint]bool) *endpoint {
	var best *endpoint
	var bestScore uint64
	for _, e := range r.eps {
		if tried[e] {
			continue
		}
		if s := score(key, e.url); best == nil || s > bestScore {
			best, bestScore = e, s
		}
	}
	return best
}

func (r *router) leastLoaded(tried map[*endpoint]bool, healthyOnly bool) *endpoint {
	var least *endpoint
	for _, e := range r.eps {
		if tried[e] || (healthyOnly && !e.healthy.Load()) {
			continue
		}
		if least == nil || e.inFlight() < least.inFlight() {
			least = e
		}
	}
	return least
}
