package main

import (
	"bufio"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/toyllm"
)

// TestToyllmPrefixCacheFlags checks that the prefix cache flags reach the
// stand-in's options, under rollout toyllm and, prefixed toy-, rollout run,
// that bad values are refused, and that a server given them caches.
func TestToyllmPrefixCacheFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want toyCacheFlags
		bad  bool
	}{
		{args: nil, want: toyCacheFlags{BlockSize: 16}},
		{args: []string{"--kv-cache-tokens", "4096", "--block-size", "32", "--prefill-latency", "1ms"},
			want: toyCacheFlags{KVCacheTokens: 4096, BlockSize: 32, PrefillLatency: time.Millisecond}},
		{args: []string{"--block-size", "0"}, bad: true},
		{args: []string{"--kv-cache-tokens", "8"}, bad: true},
		{args: []string{"--kv-cache-tokens=-16"}, bad: true},
		{args: []string{"--prefill-latency=-1ms"}, bad: true},
	} {
		var c cli
		p, err := kong.New(&c)
		if err != nil {
			t.Fatal(err)
		}
		run := []string{"run"}
		for _, a := range tc.args {
			run = append(run, strings.Replace(a, "--", "--toy-", 1))
		}
		if _, err := p.Parse(run); err != nil {
			t.Fatal(err)
		}
		if c.Run.ToyCache != tc.want && !tc.bad {
			t.Errorf("run %v: %+v, want %+v", run[1:], c.Run.ToyCache, tc.want)
		}
		opts, err := parseToyllm(t, tc.args...).options()
		if tc.bad {
			if err == nil {
				t.Errorf("%v: no error", tc.args)
			}
			if err := c.Run.ToyCache.apply(&toyllm.Options{}); err == nil {
				t.Errorf("run %v: no error", run[1:])
			}
			continue
		}
		if err != nil || opts.KVCacheTokens != tc.want.KVCacheTokens || opts.BlockSize != tc.want.BlockSize || opts.PrefillLatency != tc.want.PrefillLatency {
			t.Errorf("%v: options %+v, %v", tc.args, opts, err)
			continue
		}

		// The same prompt twice: the second finds its blocks cached.
		opts.Logger = slog.New(slog.DiscardHandler)
		ts := httptest.NewServer(toyllm.New(opts).Handler())
		body := `{"prompt":"` + strings.Repeat("guess the number between 1 and 20. ", 4) + `","max_tokens":4}`
		for range 2 {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%v: status %d", tc.args, resp.StatusCode)
			}
		}
		hits := prefixCacheHits(t, ts.URL)
		ts.Close()
		if (hits > 0) != (tc.want.KVCacheTokens > 0) {
			t.Errorf("%v: %v prefix cache hits", tc.args, hits)
		}
	}
}

// prefixCacheHits reads vllm:prefix_cache_hits_total from a server's
// /metrics.
func prefixCacheHits(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "vllm:prefix_cache_hits_total{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			hits, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return hits
		}
	}
	t.Fatal("no vllm:prefix_cache_hits_total on /metrics")
	return 0
}
