// Command prefixhits computes the achievable prefix-cache hit rate of a
// run's multi-turn trajectories: the share of prompt tokens that had been
// computed before, on any server, with a cache that never evicts. It is
// the bound a routing policy's measured hit rate (vLLM's
// prefix_cache_hits_total over prefix_cache_queries_total) is compared
// with.
//
// A turn's prompt is the trajectory's tokens before its action range. The
// turns are replayed turn by turn across episodes (every episode's first
// turn, then every second turn, ...), the order in which a run with all its
// episodes in flight plays them. As in vLLM's automatic prefix cache, a
// prompt's hit is the run of its leading full blocks already computed,
// each block known by a hash of its tokens chained with its parent's, at
// most len(prompt)-1 tokens; after the turn the blocks of its prompt and of
// its generated tokens but the last are computed.
//
//	go run ./bench/prefixhits -block-size 16 trajectories.jsonl
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/maphash"
	"os"
)

// trajectory holds the fields of a trajectory line that give its turns.
type trajectory struct {
	Tokens  []int32  `json:"observation_tokens"`
	Actions [][2]int `json:"action_ranges"`
}

func main() {
	blockSize := flag.Int("block-size", 16, "prefix cache block size in tokens")
	flag.Parse()
	if flag.NArg() == 0 || *blockSize < 1 {
		fmt.Fprintln(os.Stderr, "usage: prefixhits [-block-size N] TRAJECTORIES.jsonl...")
		os.Exit(2)
	}
	var trajs []trajectory
	for _, path := range flag.Args() {
		t, err := read(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prefixhits:", err)
			os.Exit(1)
		}
		trajs = append(trajs, t...)
	}
	r := replay(trajs, *blockSize)
	rate := 0.0
	if r.queries > 0 {
		rate = float64(r.achievable) / float64(r.queries)
	}
	fmt.Printf("trajectories=%d turns=%d prompt_tokens=%d mean_prompt=%.0f achievable_hits=%d achievable_hit_rate=%.4f\n",
		len(trajs), r.turns, r.queries, float64(r.queries)/float64(max(r.turns, 1)), r.achievable, rate)
}

func read(path string) ([]trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []trajectory
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<28)
	for sc.Scan() {
		var t trajectory
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// result is what a replay counts: turns, prompt tokens and the prompt
// tokens an unbounded cache shared by every server would have held.
type result struct {
	turns, queries, achievable int
}

// replay plays the trajectories' turns in turn order against a cache that
// keeps every block computed.
func replay(trajs []trajectory, blockSize int) result {
	seed := maphash.MakeSeed()
	computed := map[uint64]bool{}
	// chain returns the chained hashes of tokens' full blocks.
	chain := func(tokens []int32) []uint64 {
		var h maphash.Hash
		h.SetSeed(seed)
		out := make([]uint64, 0, len(tokens)/blockSize)
		var parent uint64
		buf := make([]byte, 8+4*blockSize)
		for i := 0; i+blockSize <= len(tokens); i += blockSize {
			binary.LittleEndian.PutUint64(buf, parent)
			for j, t := range tokens[i : i+blockSize] {
				binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(t))
			}
			h.Reset()
			h.Write(buf)
			parent = h.Sum64()
			out = append(out, parent)
		}
		return out
	}
	var r result
	for turn := 0; ; turn++ {
		played := false
		for _, t := range trajs {
			if turn >= len(t.Actions) {
				continue
			}
			played = true
			start, end := t.Actions[turn][0], t.Actions[turn][1]
			if start < 1 || end > len(t.Tokens) || start > end {
				continue // not a prompted turn
			}
			prompt := t.Tokens[:start]
			hashes := chain(t.Tokens[:max(end-1, start)])
			maxHit := (len(prompt) - 1) / blockSize
			hit := 0
			for hit < maxHit && computed[hashes[hit]] {
				hit++
			}
			r.turns++
			r.queries += len(prompt)
			r.achievable += hit * blockSize
			for _, h := range hashes {
				computed[h] = true
			}
		}
		if !played {
			return r
		}
	}
}
