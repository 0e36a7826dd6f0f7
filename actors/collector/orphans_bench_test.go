package collector

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// BenchmarkOrphanMemory publishes 200,000 first steps of episodes that never
// finish (b.N rounds of them) and reports the collector's live heap
// afterwards: bounded by the cache (CacheEpisodes, CacheBytes), not by the
// number of orphans.
//
//	go test -run '^$' -bench OrphanMemory -benchtime 1x ./actors/collector/
func BenchmarkOrphanMemory(b *testing.B) {
	b.Run("default cache", func(b *testing.B) { benchmarkOrphans(b, Options{}) })
	// The same with a small cache: the difference is what the cache holds,
	// the rest is the embedded server and the publisher in this process.
	b.Run("1024 episodes", func(b *testing.B) { benchmarkOrphans(b, Options{CacheEpisodes: 1024}) })
}

func benchmarkOrphans(b *testing.B, opts Options) {
	const orphans = 200_000
	f := newFixture(b, bus.ServerOptions{})
	c := f.start(b, opts)
	prompt := messages.Tokens(make([]int32, 200))
	text := strings.Repeat("guess a number between 1 and 20. ", 8)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range b.N {
		for i := range orphans {
			id := fmt.Sprintf("orphan-%d", i)
			req := request(id, id, 0, 1)
			req.Prompt = text
			ev := &messages.StepEvent{V: messages.Version, EpisodeID: id, Episode: req, PromptTokens: prompt,
				ActionTokens: messages.Tokens{5}, ActionLogprobs: messages.Logprobs{-1}, FeedbackTokens: messages.Tokens{6}}
			data, err := messages.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.js.PublishAsync(f.subj.Steps(req.RunID, req.GroupID, id), data); err != nil {
				b.Fatal(err)
			}
			if i%4096 == 0 {
				<-f.js.PublishAsyncComplete()
			}
		}
		<-f.js.PublishAsyncComplete()
		bustest.CheckFor(b, 5*time.Minute, 50*time.Millisecond, func() error { return f.isSettled("collector") })
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	st := c.Stats()
	b.ReportMetric(float64(after.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(st.InFlight), "cached-episodes")
	b.ReportMetric(float64(st.CachedBytes)/(1<<20), "cached-MiB")
	b.ReportMetric(float64(st.Evicted), "evicted")
}
