package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
	"github.com/rollfleet/rollfleet/vllm"
)

// testRouter is a router over n endpoints with capacity slots each, all
// healthy; pick needs no server.
func testRouter(n, capacity int) *router {
	r := &router{}
	for i := range n {
		e := &endpoint{url: fmt.Sprintf("http://model-%d:8000", i), slots: newLimiter(capacity)}
		e.healthy.Store(true)
		r.eps = append(r.eps, e)
	}
	return r
}

// ranked returns r's endpoints in key's rendezvous order, best first.
func (r *router) ranked(key string) []*endpoint {
	out := append([]*endpoint(nil), r.eps...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if score(key, out[j].url) > score(key, out[i].url) {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func fill(e *endpoint, n int) {
	for range n {
		if !e.slots.tryAcquire() {
			panic("fill: endpoint full")
		}
	}
}

func TestPick(t *testing.T) {
	const key = "episode-1"
	// Each case arranges the endpoints, ranked best first for key, and
	// names the rank pick must return under the policy (sticky when empty).
	// Sticky-wait's wait is a nanosecond: it gives up on a full endpoint.
	for _, tc := range []struct {
		name    string
		policy  string
		arrange func(ranked []*endpoint)
		tried   []int
		want    int // rank; -1 for errNoEndpoint
	}{
		{"sticky", "", func([]*endpoint) {}, nil, 0},
		{"sticky with room", "", func(e []*endpoint) { fill(e[0], 1) }, nil, 0},
		{"sticky full: least loaded", "", func(e []*endpoint) { fill(e[0], 2); fill(e[1], 1) }, nil, 2},
		{"sticky down: least loaded", "", func(e []*endpoint) { e[0].healthy.Store(false); fill(e[2], 1) }, nil, 1},
		{"down endpoints skipped", "", func(e []*endpoint) { fill(e[0], 2); e[2].healthy.Store(false); fill(e[1], 1) }, nil, 1},
		{"all down: least loaded", "", func(e []*endpoint) {
			for _, x := range e {
				x.healthy.Store(false)
			}
			fill(e[0], 1)
			fill(e[2], 1)
		}, nil, 1},
		{"tried skipped: next in rank", "", func([]*endpoint) {}, []int{0}, 1},
		{"all tried", "", func([]*endpoint) {}, []int{0, 1, 2}, -1},
		{"sticky-wait with room", RoutingStickyWait, func(e []*endpoint) { fill(e[0], 1); fill(e[1], 1) }, nil, 0},
		{"sticky-wait full past the wait: least loaded", RoutingStickyWait, func(e []*endpoint) { fill(e[0], 2); fill(e[2], 1) }, nil, 1},
		{"sticky-wait down: least loaded", RoutingStickyWait, func(e []*endpoint) { e[0].healthy.Store(false); fill(e[1], 1) }, nil, 2},
		{"sticky-wait tried skipped", RoutingStickyWait, func([]*endpoint) {}, []int{0}, 1},
		{"least-loaded ignores the sticky endpoint", RoutingLeastLoaded, func(e []*endpoint) { fill(e[0], 1); fill(e[1], 1) }, nil, 2},
		{"least-loaded skips down", RoutingLeastLoaded, func(e []*endpoint) { fill(e[0], 1); e[1].healthy.Store(false) }, nil, 2},
		{"least-loaded all down", RoutingLeastLoaded, func(e []*endpoint) {
			for _, x := range e {
				x.healthy.Store(false)
			}
			fill(e[0], 1)
			fill(e[1], 1)
		}, nil, 2},
		{"least-loaded all tried", RoutingLeastLoaded, func([]*endpoint) {}, []int{0, 1, 2}, -1},
		{"round-robin all tried", RoutingRoundRobin, func([]*endpoint) {}, []int{0, 1, 2}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRouter(3, 2)
			r.policy, r.wait = tc.policy, time.Nanosecond
			ranked := r.ranked(key)
			tc.arrange(ranked)
			tried := map[*endpoint]bool{}
			for _, i := range tc.tried {
				tried[ranked[i]] = true
			}
			before := make([]int, len(ranked))
			for i, e := range ranked {
				before[i] = e.inFlight()
			}
			got, err := r.pick(context.Background(), key, tried)
			if tc.want < 0 {
				if !errors.Is(err, errNoEndpoint) {
					t.Fatalf("pick = %v, %v; want errNoEndpoint", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != ranked[tc.want] {
				t.Fatalf("picked %s, want %s (rank %d)", got.url, ranked[tc.want].url, tc.want)
			}
			for i, e := range ranked {
				want := before[i]
				if i == tc.want {
					want++
				}
				if e.inFlight() != want {
					t.Errorf("rank %d: %d in flight, want %d (pick must take exactly one slot)", i, e.inFlight(), want)
				}
			}
		})
	}
}

// TestPickRoundRobin checks that round-robin routing takes the endpoints in
// turn whatever the episode, skipping tried and down ones, and all down
// ones alike when none is up.
func TestPickRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		name  string
		down  []int
		tried []int
		want  []int // the endpoints (in r.eps order) of successive picks
	}{
		{"in turn", nil, nil, []int{1, 2, 0, 1, 2, 0}},
		{"down skipped", []int{2}, nil, []int{1, 0, 0, 1}},
		{"all down: in turn", []int{0, 1, 2}, nil, []int{1, 2, 0, 1}},
		{"tried skipped", nil, []int{1}, []int{2, 2, 0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRouter(3, len(tc.want))
			r.policy = RoutingRoundRobin
			for _, i := range tc.down {
				r.eps[i].healthy.Store(false)
			}
			tried := map[*endpoint]bool{}
			for _, i := range tc.tried {
				tried[r.eps[i]] = true
			}
			for n, want := range tc.want {
				got, err := r.pick(context.Background(), fmt.Sprintf("episode-%d", n%2), tried)
				if err != nil {
					t.Fatal(err)
				}
				if got != r.eps[want] {
					t.Fatalf("pick %d: %s, want %s", n, got.url, r.eps[want].url)
				}
			}
		})
	}
}

// TestPickWaits checks which full endpoint each policy waits for while
// another has room or is as full: sticky-wait its episode's (within its
// wait), round-robin the one whose turn it is, least-loaded the least
// loaded. The pick must take that endpoint's slot once it is released.
func TestPickWaits(t *testing.T) {
	const key = "episode-1"
	for _, tc := range []struct {
		policy string
		// fill fills endpoints and returns the one pick must wait for.
		fill func(r *router, ranked []*endpoint) *endpoint
	}{
		{RoutingStickyWait, func(_ *router, e []*endpoint) *endpoint { fill(e[0], 1); return e[0] }},
		{RoutingRoundRobin, func(r *router, _ []*endpoint) *endpoint { fill(r.eps[1], 1); return r.eps[1] }},
		{RoutingLeastLoaded, func(r *router, _ []*endpoint) *endpoint {
			for _, e := range r.eps {
				fill(e, 1)
			}
			return r.eps[0]
		}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			r := testRouter(3, 1)
			r.policy, r.wait = tc.policy, time.Hour
			want := tc.fill(r, r.ranked(key))
			picked := make(chan *endpoint, 1)
			go func() {
				e, err := r.pick(context.Background(), key, nil)
				if err != nil {
					t.Error(err)
				}
				picked <- e
			}()
			for deadline := time.Now().Add(waitTimeout); want.slots.waiting() == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("pick did not wait for %s", want.url)
				}
				time.Sleep(time.Millisecond)
			}
			want.slots.release()
			if e := <-picked; e != want {
				t.Errorf("picked %v, want %s once its slot is free", e, want.url)
			}
		})
	}
}

// TestNewRouting checks that the worker takes every routing policy, sticky
// by default, and refuses another with ErrUnknownRouting.
func TestNewRouting(t *testing.T) {
	for _, tc := range []struct {
		routing, want string
		err           error
	}{
		{"", RoutingSticky, nil},
		{RoutingSticky, RoutingSticky, nil},
		{RoutingStickyWait, RoutingStickyWait, nil},
		{RoutingLeastLoaded, RoutingLeastLoaded, nil},
		{RoutingRoundRobin, RoutingRoundRobin, nil},
		{"random", "", ErrUnknownRouting},
	} {
		w, err := New(nil, Options{Endpoints: []string{"http://model:8000"}, Routing: tc.routing})
		if !errors.Is(err, tc.err) {
			t.Errorf("routing %q: New error %v, want %v", tc.routing, err, tc.err)
			continue
		}
		if err == nil && (w.router.policy != tc.want || w.router.wait != DefaultRoutingWait) {
			t.Errorf("routing %q: router %q waiting %v, want %q waiting %v", tc.routing, w.router.policy, w.router.wait, tc.want, DefaultRoutingWait)
		}
	}
}

// TestPickWaitsForHealthySlot fills the only healthy endpoint: pick must
// wait for its slot rather than choose the endpoint marked down, and give
// up with the context.
func TestPickWaitsForHealthySlot(t *testing.T) {
	r := testRouter(2, 1)
	up, down := r.eps[0], r.eps[1]
	down.healthy.Store(false)
	fill(up, 1)

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		e, err := r.pick(ctx, "ep", nil)
		if err == nil {
			err = fmt.Errorf("picked %s", e.url)
		}
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("pick with every healthy slot taken: %v, want to wait until cancelled", err)
	}

	picked := make(chan *endpoint, 1)
	go func() {
		e, err := r.pick(context.Background(), "ep", nil)
		if err != nil {
			t.Error(err)
		}
		picked <- e
	}()
	up.slots.release()
	select {
	case e := <-picked:
		if e != up {
			t.Errorf("picked %s, want the healthy endpoint once its slot is free", e.url)
		}
	case <-time.After(waitTimeout):
		t.Fatal("pick did not take the freed slot")
	}
}

// TestScoreSpreadsKeys checks that rendezvous scores spread episodes evenly
// over endpoints, so that stickiness does not pile load on one server.
func TestScoreSpreadsKeys(t *testing.T) {
	r := testRouter(3, 1)
	const keys = 3000
	count := map[*endpoint]int{}
	for i := range keys {
		count[r.ranked(fmt.Sprintf("episode-%d", i))[0]]++
	}
	for _, e := range r.eps {
		if n := count[e]; n < keys/3-150 || n > keys/3+150 {
			t.Errorf("%s is sticky for %d of %d keys", e.url, n, keys)
		}
	}
	if score("a", "b") != score("a", "b") || score("ab", "") == score("a", "b") {
		t.Error("score must be a function of (key, url) that keeps the two apart")
	}
}

// TestEndedTurn checks that a turn ends where the server says it stopped:
// on an end-of-sequence token (stop_reason null) or a stop token id, never
// on a stop string or the length limit.
func TestEndedTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      vllm.Completion
		closed bool
	}{
		{"eos", vllm.Completion{TokenIDs: []int32{5, 128009}, FinishReason: "stop"}, true},
		{"stop token", vllm.Completion{TokenIDs: []int32{5, 151645}, FinishReason: "stop", StopReason: "151645"}, true},
		{"stop string", vllm.Completion{TokenIDs: []int32{5, 6}, FinishReason: "stop", StopReason: "</answer>"}, false},
		{"stop string of digits", vllm.Completion{TokenIDs: []int32{5, 6}, FinishReason: "stop", StopReason: "42"}, false},
		{"length", vllm.Completion{TokenIDs: []int32{5, 6}, FinishReason: "length"}, false},
		{"nothing generated", vllm.Completion{FinishReason: "stop"}, false},
	} {
		if got := endedTurn(&tc.c); got != tc.closed {
			t.Errorf("%s: endedTurn = %v, want %v", tc.name, got, tc.closed)
		}
	}
}

// TestTurnTokens asks for the tokens the model's template puts around a
// feedback turn: for the stand-in's ChatML template they are the template's
// end-of-turn token, the user message and the generation prompt (none for
// the final turn), and a template that renders no turn of its own is a
// clear, unretried error.
func TestTurnTokens(t *testing.T) {
	f := newFixture(t)
	f.start(t, Options{}, newModel(t, toyllm.Options{}, nil))
	var tok toyllm.Tokenizer
	for _, tc := range []struct {
		kind messages.TurnKind
		want string
	}{
		{messages.TurnNext, "<|im_end|>\n<|im_start|>user\nToo low.<|im_end|>\n<|im_start|>assistant\n"},
		{messages.TurnFinal, "<|im_end|>\n<|im_start|>user\nToo low.<|im_end|>\n"},
	} {
		rep := f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, EpisodeID: "ep", Text: "Too low.", Turn: tc.kind})
		if rep.Error != "" || tok.Decode(rep.Tokens) != tc.want {
			t.Errorf("turn %d: reply %+v (%q), want %q", tc.kind, rep, tok.Decode(rep.Tokens), tc.want)
		}
	}

	g := newFixture(t)
	flat := newModel(t, toyllm.Options{}, func(m *model) {
		toy := m.toy
		m.toy = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/tokenize" {
				toy.ServeHTTP(w, r)
				return
			}
			// A server whose template renders every conversation alike.
			io.WriteString(w, `{"count":3,"max_model_len":32768,"tokens":[1,2,3]}`)
		})
	})
	w := g.start(t, Options{}, flat)
	rep := g.tokenize(t, &messages.TokenizeRequest{V: messages.Version, EpisodeID: "ep", Text: "Too low.", Turn: messages.TurnNext})
	if rep.Code != messages.CodeInvalid || !strings.Contains(rep.Error, "renders no user turn") {
		t.Errorf("reply %+v, want an invalid error about the template", rep)
	}
	if st := w.Stats(); st.Retries != 0 {
		t.Errorf("stats %+v, want no retry", st)
	}
}
