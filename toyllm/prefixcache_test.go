package toyllm

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"
)

// span returns the tokens from, from+1, ..., from+n-1.
func span(from, n int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = from + int32(i)
	}
	return s
}

// cat concatenates token lists.
func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// cachedBlocks returns how many leading full blocks of tokens the cache
// holds, without touching it.
func cachedBlocks(c *prefixCache, tokens []int32) int {
	var seq kvSeq
	c.hashBlocks(&seq, tokens[:len(tokens)/c.blockSize*c.blockSize])
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, h := range seq.hashes {
		if _, ok := c.byHash[h]; !ok {
			break
		}
		n++
	}
	return n
}

// cacheStep is one step of a prefix cache scenario: start sequence seq
// with prompt (when not nil) expecting hit, then finish it with output
// (when finish).
type cacheStep struct {
	seq    string
	prompt []int32
	hit    int
	finish bool
	output []int32
}

// request is a step that starts and finishes a sequence.
func request(prompt, output []int32, hit int) cacheStep {
	return cacheStep{seq: "r", prompt: prompt, hit: hit, finish: true, output: output}
}

// cacheProbe is a check after a scenario: the cache holds the first blocks
// full blocks of tokens.
type cacheProbe struct {
	tokens []int32
	blocks int
}

func TestPrefixCache(t *testing.T) {
	const bs = 4
	tests := []struct {
		name          string
		capacity      int // tokens
		steps         []cacheStep
		probes        []cacheProbe
		queries, hits int64
		used          int // blocks, at the end
	}{
		{
			name:     "a shared prefix hits its full blocks",
			capacity: 64,
			steps: []cacheStep{
				request(span(1, 10), nil, 0),
				request(cat(span(1, 8), span(100, 4)), nil, 8),
			},
			queries: 22, hits: 8,
		},
		{
			name:     "equal blocks under another prefix miss",
			capacity: 64,
			steps: []cacheStep{
				request(span(1, 9), nil, 0),
				request(cat(span(50, 4), span(5, 4), span(0, 1)), nil, 0),
			},
			probes:  []cacheProbe{{span(5, 4), 0}, {cat(span(50, 4), span(5, 4)), 2}},
			queries: 18,
		},
		{
			name:     "a partial block is not cached",
			capacity: 64,
			steps: []cacheStep{
				request(span(1, 6), nil, 0),
				request(span(1, 9), nil, 4),
			},
			queries: 15, hits: 4,
		},
		{
			name:     "the last prompt token is always computed",
			capacity: 64,
			steps: []cacheStep{
				request(span(1, 8), nil, 0),
				request(span(1, 8), nil, 4),
				request(span(1, 9), nil, 8),
			},
			queries: 25, hits: 12,
		},
		{
			name:     "generated tokens' full blocks are cached but for the last token",
			capacity: 64,
			steps: []cacheStep{
				// 1..6 and 7..12 computed: three full blocks; 13 was
				// never fed back.
				request(span(1, 6), span(7, 7), 0),
				request(cat(span(1, 13), span(50, 2)), nil, 12),
				// 21..27 computed, 28 not: one full block.
				request(span(21, 6), span(27, 2), 0),
				request(span(21, 9), nil, 4),
			},
			queries: 6 + 15 + 6 + 9, hits: 16,
		},
		{
			name:     "a multi-turn conversation prefills only each turn's new tokens",
			capacity: 256,
			steps: []cacheStep{
				request(span(1, 10), span(11, 5), 0),
				// Turn 2 sends turn 1 back with 3 tokens of feedback:
				// floor((10+5-1)/4) blocks hit.
				request(cat(span(1, 15), span(90, 3)), span(200, 6), 12),
				request(cat(span(1, 15), span(90, 3), span(200, 6), span(95, 2)), span(300, 1), 20),
			},
			queries: 10 + 18 + 26, hits: 32,
		},
		{
			name:     "the least recently used free block is evicted, a conversation's tail first",
			capacity: 12,
			steps: []cacheStep{
				request(span(1, 12), nil, 0),
				// 9..12 was released first: evicted first.
				request(span(21, 4), nil, 0),
				request(span(31, 4), nil, 0),
			},
			probes:  []cacheProbe{{span(1, 12), 1}, {span(21, 4), 1}, {span(31, 4), 1}},
			queries: 20,
		},
		{
			name:     "a hit makes a block recently used",
			capacity: 12,
			steps: []cacheStep{
				request(span(1, 4), nil, 0),
				request(span(11, 4), nil, 0),
				request(span(21, 4), nil, 0),
				request(cat(span(1, 4), span(0, 1)), nil, 4),
				// The partial block of the last request took 11..14's
				// slot; 21..24 is now the least recently used.
				request(span(31, 4), nil, 0),
				request(span(41, 4), nil, 0),
			},
			probes:  []cacheProbe{{span(1, 4), 1}, {span(11, 4), 0}, {span(21, 4), 0}, {span(31, 4), 1}, {span(41, 4), 1}},
			queries: 25, hits: 4,
		},
		{
			name:     "blocks held by a running request are not evicted",
			capacity: 8,
			steps: []cacheStep{
				{seq: "a", prompt: span(1, 8)},
				// No room: this one holds and caches nothing.
				request(span(11, 9), span(20, 9), 0),
				// a's blocks are shared, though running.
				request(span(1, 9), nil, 8),
			},
			probes:  []cacheProbe{{span(1, 8), 2}, {span(11, 8), 0}},
			queries: 26, hits: 8,
			used: 2,
		},
		{
			name:     "a released request's blocks are free again",
			capacity: 8,
			steps: []cacheStep{
				{seq: "a", prompt: span(1, 8)},
				{seq: "a", finish: true},
				request(span(11, 9), nil, 0),
			},
			probes:  []cacheProbe{{span(1, 8), 0}, {span(11, 8), 2}},
			queries: 17,
		},
		{
			name:     "concurrent requests share blocks",
			capacity: 16,
			steps: []cacheStep{
				{seq: "a", prompt: span(1, 9)},
				{seq: "b", prompt: span(1, 10), hit: 8},
				{seq: "a", finish: true, output: span(10, 4)},
			},
			probes:  []cacheProbe{{span(1, 12), 3}},
			queries: 19, hits: 8,
			// b's two shared blocks and its partial block.
			used: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPrefixCache(tt.capacity, bs)
			seqs := map[string]*kvSeq{}
			for i, st := range tt.steps {
				seq := seqs[st.seq]
				if seq == nil {
					seq = new(kvSeq)
					seqs[st.seq] = seq
				}
				if st.prompt != nil {
					if hit := c.start(seq, st.prompt); hit != st.hit {
						t.Errorf("step %d: hit %d tokens, want %d", i, hit, st.hit)
					}
				}
				if st.finish {
					c.finish(seq, st.output)
				}
				checkCache(t, c)
			}
			for _, p := range tt.probes {
				if n := cachedBlocks(c, p.tokens); n != p.blocks {
					t.Errorf("%v: %d blocks cached, want %d", p.tokens, n, p.blocks)
				}
			}
			got := c.stats()
			want := cacheStats{queries: tt.queries, hits: tt.hits, used: tt.used, capacity: tt.capacity / bs}
			if got != want {
				t.Errorf("stats %+v, want %+v", got, want)
			}
		})
	}
}

// checkCache checks the invariants of c's bookkeeping.
func checkCache(t *testing.T, c *prefixCache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.blocks) - 1; n > c.capacity {
		t.Fatalf("%d blocks, capacity %d", n, c.capacity)
	}
	free := 0
	for i := c.blocks[0].next; i != 0; i = c.blocks[i].next {
		if b := c.blocks[i]; b.refs != 0 || !b.hashed || c.byHash[b.hash] != i {
			t.Fatalf("free block %d: %+v", i, b)
		}
		if free++; free > c.capacity {
			t.Fatalf("free list loops")
		}
	}
	if free != c.free {
		t.Fatalf("free list of %d blocks, counted %d", free, c.free)
	}
	for h, i := range c.byHash {
		if b := c.blocks[i]; !b.hashed || b.hash != h {
			t.Fatalf("block %d under %x: %+v", i, h, b)
		}
	}
	if u := c.usedLocked(); u < 0 || u > c.capacity {
		t.Fatalf("%d blocks used of %d", u, c.capacity)
	}
}

func TestPrefixCacheDisabled(t *testing.T) {
	for _, tc := range []struct{ capacity, blockSize int }{{0, 16}, {15, 16}, {64, 0}} {
		c := newPrefixCache(tc.capacity, tc.blockSize)
		if c != nil {
			t.Fatalf("newPrefixCache(%d, %d) is enabled", tc.capacity, tc.blockSize)
		}
		var seq kvSeq
		for range 2 {
			if hit := c.start(&seq, span(1, 40)); hit != 0 {
				t.Errorf("disabled cache hit %d", hit)
			}
			c.finish(&seq, span(50, 3))
		}
		if s := c.stats(); s != (cacheStats{}) || !c.reset() {
			t.Errorf("disabled cache: stats %+v", s)
		}
	}
}

func TestPrefixCacheReset(t *testing.T) {
	c := newPrefixCache(64, 4)
	var a, b kvSeq
	c.start(&a, span(1, 9))
	c.finish(&a, nil)
	c.start(&b, span(21, 9))
	if c.reset() {
		t.Fatal("reset while a request holds blocks")
	}
	if n := cachedBlocks(c, span(1, 8)); n != 2 {
		t.Errorf("a refused reset dropped blocks: %d left", n)
	}
	c.finish(&b, nil)
	if !c.reset() {
		t.Fatal("reset refused with nothing held")
	}
	checkCache(t, c)
	if hit := c.start(&a, span(1, 9)); hit != 0 {
		t.Errorf("hit %d after reset", hit)
	}
	c.finish(&a, nil)
	if s := c.stats(); s.queries != 27 || s.hits != 0 || s.used != 0 {
		t.Errorf("stats %+v: the counters must survive a reset", s)
	}
}

// FuzzPrefixCache runs random requests, some held while others run, over a
// small vocabulary so that prefixes are shared, and checks the cache's
// invariants and that every hit is the run of cached blocks it found.
func FuzzPrefixCache(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(40), uint8(20))
	f.Add(uint64(2), uint8(1), uint8(4), uint8(60))
	f.Add(uint64(3), uint8(15), uint8(255), uint8(5))
	f.Fuzz(func(t *testing.T, seed uint64, blockSize, capacity, steps uint8) {
		bs := int(blockSize%8) + 1
		c := newPrefixCache(int(capacity), bs)
		if c == nil {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		tokens := func(n int) []int32 {
			s := make([]int32, n)
			for i := range s {
				s[i] = rng.Int32N(3)
			}
			return s
		}
		var held []*kvSeq
		var prompts [][]int32
		for range int(steps) {
			if len(held) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(held))
				c.finish(held[i], tokens(rng.IntN(3*bs)))
				held = slices.Delete(held, i, i+1)
				checkCache(t, c)
				continue
			}
			var prompt []int32
			if len(prompts) > 0 && rng.IntN(2) == 0 {
				// Extend an earlier prompt, as a next turn does.
				prompt = cat(prompts[rng.IntN(len(prompts))], tokens(rng.IntN(2*bs)+1))
			} else {
				prompt = tokens(rng.IntN(6*bs) + 1)
			}
			prompts = append(prompts, prompt)
			before := c.stats()
			want := min(cachedBlocks(c, prompt), (len(prompt)-1)/bs) * bs
			seq := new(kvSeq)
			hit := c.start(seq, prompt)
			after := c.stats()
			switch {
			case hit != want:
				t.Fatalf("prompt %v: hit %d, cached prefix %d", prompt, hit, want)
			case hit%bs != 0 || hit >= len(prompt):
				t.Fatalf("prompt of %d: hit %d, block size %d", len(prompt), hit, bs)
			case after.queries-before.queries != int64(len(prompt)) || after.hits-before.hits != int64(hit):
				t.Fatalf("counters %+v then %+v for a prompt of %d hitting %d", before, after, len(prompt), hit)
			case after.hits > after.queries || after.used > after.capacity:
				t.Fatalf("stats %+v", after)
			}
			checkCache(t, c)
			held = append(held, seq)
		}
		for _, seq := range held {
			c.finish(seq, tokens(2))
		}
		checkCache(t, c)
		if s := c.stats(); s.used != 0 {
			t.Fatalf("%d blocks used with nothing running", s.used)
		}
	})
}

// BenchmarkPrefixCache measures one request's bookkeeping for a
// 4096-token prompt and 256 generated tokens, in blocks of 16: a next turn
// of a conversation (hit: the prompt is cached, the new tokens are not)
// and a prompt never seen (miss: every block is cached anew, evicting).
func BenchmarkPrefixCache(b *testing.B) {
	prompt := make([]int32, 4096)
	for i := range prompt {
		prompt[i] = rand.Int32N(150000)
	}
	output := span(7, 256)
	b.Run("hit", func(b *testing.B) {
		c := newPrefixCache(1<<16, DefaultBlockSize)
		var seq kvSeq
		c.start(&seq, prompt)
		c.finish(&seq, output)
		b.ReportAllocs()
		for b.Loop() {
			c.start(&seq, prompt)
			c.finish(&seq, output)
		}
	})
	b.Run("miss", func(b *testing.B) {
		c := newPrefixCache(1<<16, DefaultBlockSize)
		var seq kvSeq
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			prompt[0] = int32(i)
			c.start(&seq, prompt)
			c.finish(&seq, output)
		}
	})
}

// TestPrefixCacheMetrics plays two turns of a conversation against a real
// server, the second's prompt extending the first's prompt and reply, and
// checks vLLM's prefix cache counters on /metrics: the second turn hits
// every full block the first one computed, unless the cache is off or a
// /pause emptied it.
func TestPrefixCacheMetrics(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		pause string // a /pause between the turns, then /resume
		// hits is the second turn's hit given the first turn's prompt
		// and reply lengths.
		hits    func(prompt, reply int) int
		counted bool // whether queries are counted
	}{
		{
			name:    "on",
			opts:    Options{KVCacheTokens: 4096},
			hits:    func(p, r int) int { return (p + r - 1) / DefaultBlockSize * DefaultBlockSize },
			counted: true,
		},
		{
			name:    "block size 32",
			opts:    Options{KVCacheTokens: 4096, BlockSize: 32},
			hits:    func(p, r int) int { return (p + r - 1) / 32 * 32 },
			counted: true,
		},
		{
			name:    "off",
			hits:    func(int, int) int { return 0 },
			counted: false,
		},
		{
			name:    "emptied by a pause",
			opts:    Options{KVCacheTokens: 4096},
			pause:   "/pause",
			hits:    func(int, int) int { return 0 },
			counted: true,
		},
		{
			name:    "kept through a pause with clear_cache=false",
			opts:    Options{KVCacheTokens: 4096},
			pause:   "/pause?mode=wait&clear_cache=false",
			hits:    func(p, r int) int { return (p + r - 1) / DefaultBlockSize * DefaultBlockSize },
			counted: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, url := newTestServer(t, tt.opts)
			c := newClient(t, url)
			turn := func(prompt []int32) []int32 {
				r := c.complete(map[string]any{"prompt": prompt, "max_tokens": 50, "seed": 5, "return_token_ids": true})
				return r.Choices[0].TokenIDs
			}
			prompt := gamePrompt()
			reply := turn(prompt)
			if q, h := metricsValue(t, url, "vllm:prefix_cache_queries_total"), metricsValue(t, url, "vllm:prefix_cache_hits_total"); h != 0 || q != float64(len(prompt))*b2f(tt.counted) {
				t.Errorf("after the first turn: %v queries, %v hits", q, h)
			}
			if tt.pause != "" {
				c.control(tt.pause, "", `{"status":"paused"}`)
				c.control("/resume", "", `{"status":"resumed"}`)
			}
			next := cat(prompt, reply, Tokenizer{}.Encode("<|im_start|>user\nAt turn 3, you guessed 12.<|im_end|>\n<|im_start|>assistant\n"))
			turn(next)
			wantHits := tt.hits(len(prompt), len(reply))
			if q, h := metricsValue(t, url, "vllm:prefix_cache_queries_total"), metricsValue(t, url, "vllm:prefix_cache_hits_total"); h != float64(wantHits) || q != float64(len(prompt)+len(next))*b2f(tt.counted) {
				t.Errorf("after the second turn (prompts of %d and %d, reply of %d): %v queries, %v hits, want %d hits",
					len(prompt), len(next), len(reply), q, h, wantHits)
			}
			if u := metricsValue(t, url, "vllm:kv_cache_usage_perc"); u != 0 {
				t.Errorf("KV-cache usage %v with nothing running", u)
			}
		})
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestPrefillLatency checks that prefill time is charged per prompt token
// the cache does not hold, before the decode time: a request aborted in
// its prefill has no tokens, and, its prompt blocks cached all the same,
// the same prompt again waits for one block's prefill, not the prompt's.
func TestPrefillLatency(t *testing.T) {
	const perToken = 20 * time.Millisecond
	s, url := newTestServer(t, Options{KVCacheTokens: 4096, PrefillLatency: perToken, TokenLatency: time.Microsecond})
	c := newClient(t, url)
	prompt := gamePrompt() // its prefill takes minutes uncached
	body := map[string]any{"prompt": prompt, "max_tokens": 8, "seed": 1, "return_token_ids": true}
	g := startGeneration(c, "/v1/completions", body)
	eventually(t, "the request runs", func() bool { return s.running.Load() == 1 })
	if u := metricsValue(t, url, "vllm:kv_cache_usage_perc"); u*4096 != float64((len(prompt)+DefaultBlockSize-1)/DefaultBlockSize*DefaultBlockSize) {
		t.Errorf("KV-cache usage %v while a prompt of %d tokens runs", u, len(prompt))
	}
	c.control("/pause?clear_cache=false", "", `{"status":"paused"}`)
	c.control("/resume", "", `{"status":"resumed"}`)
	var r completionResponse
	decodeStrict(t, g.wait(t), &r)
	if ch := r.Choices[0]; ch.FinishReason != "abort" || len(ch.TokenIDs) != 0 {
		t.Fatalf("aborted in its prefill: finish %q, tokens %v", ch.FinishReason, ch.TokenIDs)
	}

	// Uncached now: the last partial block and, as the last prompt token
	// is always computed, at most one full block before it.
	uncached := len(prompt) - (len(prompt)-1)/DefaultBlockSize*DefaultBlockSize
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(len(prompt))*perToken/4)
	defer cancel()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the cached prompt's prefill took longer than a quarter of the uncached one's: %v", err)
	}
	resp.Body.Close()
	if took, least := time.Since(begin), time.Duration(uncached)*perToken; resp.StatusCode != http.StatusOK || took < least {
		t.Errorf("status %d after %v, want 200 after at least %v", resp.StatusCode, took, least)
	}
}
