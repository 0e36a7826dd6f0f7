package tokcache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Long feedback (a board after every move) is bounded by bytes, not only
// by entries: 16,384 entries of 4 KiB texts and their tokens would be over
// 128 MiB.
func TestByteBound(t *testing.T) {
	var c Cache
	board := strings.Repeat("#", MaxText-8)
	for i := range Entries {
		c.Put(Key{Text: fmt.Sprintf("%s%08d", board, i)}, make([]int32, 1024))
		if held := c.curBytes + c.prevBytes; held > Bytes {
			t.Fatalf("after %d puts the cache holds %d bytes, bound is %d", i+1, held, Bytes)
		}
	}
	if n := len(c.cur) + len(c.prev); n >= Entries/2 {
		t.Fatalf("cache holds %d long entries: the byte bound did not apply", n)
	}
	// A short text put again is counted once.
	var s Cache
	for range 3 {
		s.Put(Key{Text: "too low"}, []int32{1, 2})
	}
	if want := entrySize(Key{Text: "too low"}, []int32{1, 2}); s.curBytes != want {
		t.Fatalf("one entry put three times counts %d bytes, want %d", s.curBytes, want)
	}
}

// BenchmarkMemory fills a tokenization cache with
// distinct texts, short feedback (about 100 bytes, 30 tokens) and long
// feedback (4 KiB, 1,024 tokens), and reports the heap it holds.
//
//	go test -run '^$' -bench Memory -benchtime 1x ./internal/tokcache/
func BenchmarkMemory(b *testing.B) {
	for _, bc := range []struct {
		name      string
		text, ids int
	}{{"short", 100, 30}, {"long", MaxText - 8, 1024}} {
		b.Run(bc.name, func(b *testing.B) {
			pad := strings.Repeat("x", bc.text)
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				c := new(Cache)
				for i := range 4 * Entries {
					c.Put(Key{Text: fmt.Sprintf("%s%08d", pad, i)}, make([]int32, bc.ids))
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
