package llm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Long feedback (a board after every move) is bounded by bytes, not only
// by entries: 16,384 entries of 4 KiB texts and their tokens would be over
// 128 MiB.
func TestTokenCacheByteBound(t *testing.T) {
	var c tokenCache
	board := strings.Repeat("#", tokenCacheMaxText-8)
	for i := range tokenCacheEntries {
		c.put(tokenKey{text: fmt.Sprintf("%s%08d", board, i)}, make([]int32, 1024))
		if held := c.curBytes + c.prevBytes; held > tokenCacheBytes {
			t.Fatalf("after %d puts the cache holds %d bytes, bound is %d", i+1, held, tokenCacheBytes)
		}
	}
	if n := len(c.cur) + len(c.prev); n >= tokenCacheEntries/2 {
		t.Fatalf("cache holds %d long entries: the byte bound did not apply", n)
	}
	// A short text put again is counted once.
	var s tokenCache
	for range 3 {
		s.put(tokenKey{text: "too low"}, []int32{1, 2})
	}
	if want := tokenEntrySize(tokenKey{text: "too low"}, []int32{1, 2}); s.curBytes != want {
		t.Fatalf("one entry put three times counts %d bytes, want %d", s.curBytes, want)
	}
}

// BenchmarkTokenCacheMemory fills one endpoint's tokenization cache with
// distinct texts, short feedback (about 100 bytes, 30 tokens) and long
// feedback (4 KiB, 1,024 tokens), and reports the heap it holds.
//
//	go test -run '^$' -bench TokenCacheMemory -benchtime 1x ./actors/llm/
func BenchmarkTokenCacheMemory(b *testing.B) {
	for _, bc := range []struct {
		name      string
		text, ids int
	}{{"short", 100, 30}, {"long", tokenCacheMaxText - 8, 1024}} {
		b.Run(bc.name, func(b *testing.B) {
			pad := strings.Repeat("x", bc.text)
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				c := new(tokenCache)
				for i := range 4 * tokenCacheEntries {
					c.put(tokenKey{text: fmt.Sprintf("%s%08d", pad, i)}, make([]int32, bc.ids))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "cache-MiB")
				b.ReportMetric(float64(len(c.cur)+len(c.prev)), "entries")
				runtime.KeepAlive(c)
			}
		})
	}
}
