package cmdutil

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// gcPercent is the GOGC a process runs at while its heap fits under the
// memory limit, and minHeadroom the least the limit leaves the heap to grow
// beyond what is live, in percent of it (the headroom GOGC=100 gives).
const (
	gcPercent   = 1000
	minHeadroom = 100
)

// GC holds the flag of the commands that tune the garbage collector.
type GC struct {
	MemLimit string `name:"mem-limit" default:"768MiB" env:"GOMEMLIMIT" placeholder:"SIZE" help:"Soft memory limit of the process (bytes, or with a B, KiB, MiB, GiB or TiB suffix; off: none). The garbage collector lets the heap grow up to it (GOGC=1000), then collects as needed, though never more often than GOGC=100 would (default ${default})."`
}

// Tune applies the flag (see TuneGC).
func (g GC) Tune() error { return TuneGC(g.MemLimit) }

// TuneGC sets how the garbage collector trades memory for CPU. Rollout
// processes allocate many short-lived messages: at Go's default GOGC=100
// collection takes about 5% of their CPU, at GOGC=400 about 2%; but a GOGC
// alone lets the heap grow with what is live, by a factor, and what is live
// grows for a while with finished work (the server's duplicate windows), so
// RSS kept climbing through a run. So the memory limit paces the
// collector: the process runs at GOGC=1000 (unless GOGC is set), which is
// only a ceiling, and the soft limit is what starts collections once the
// heap nears it; RSS rises to the limit early in a run and stays there
// (measured: 763 MB after 10,000 episodes, 765 MB after 49,516; at
// GOGC=400, 429 MB and 689 MB). When what is live needs more than half the
// limit, the limit gives way, always leaving the heap room to grow by as
// much as is live (what GOGC=100 gives) rather than collecting back to
// back. memLimit "off" (or "0") sets no limit and leaves GOGC at Go's
// default. Memory outside Go's heap (the binary, the kernel's buffers) comes
// on top of the limit.
func TuneGC(memLimit string) error {
	limit, err := ParseMemLimit(memLimit)
	if err != nil {
		return fmt.Errorf("--mem-limit: %w", err)
	}
	if limit == math.MaxInt64 {
		debug.SetMemoryLimit(limit)
		return nil
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	watchOnce.Do(func() {
		debug.SetMemoryLimit(limit)
		newGCWatch(limit).arm()
	})
	return nil
}

// ParseMemLimit reads a memory limit as GOMEMLIMIT writes it: bytes, with
// an optional B, KiB, MiB, GiB or TiB suffix. "off" and "0" mean no limit
// (math.MaxInt64).
func ParseMemLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" {
		return math.MaxInt64, nil
	}
	num, shift := s, 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}} {
		if strings.HasSuffix(s, u.suffix) {
			num, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || num == "" || num[0] == '+' {
		return 0, fmt.Errorf("%q is not a size (such as 512MiB, 2GiB or off)", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if n == 0 {
		return math.MaxInt64, nil
	}
	return n << shift, nil
}

// floorLimit is the memory limit to give the runtime for the configured
// limit, given the heap live after the last collection and the memory the
// runtime holds besides the heap (stacks, its own metadata): the limit
// itself, unless it would leave the heap less than minHeadroom percent of
// the live heap to grow by.
func floorLimit(limit int64, live, other uint64) int64 {
	need := live + live/100*minHeadroom + other
	if need > math.MaxInt64 || int64(need) <= limit {
		return limit
	}
	return int64(need)
}

// gcWatch re-applies the memory limit after every collection (see
// floorLimit).
type gcWatch struct {
	limit   int64 // the configured limit
	applied int64 // the limit last given to the runtime
	samples []metrics.Sample
	// after, when set, runs after each adjustment (tests).
	after func()
}

// watchOnce starts the one watch of the process.
var watchOnce sync.Once

// Memory classes the watch reads: live heap, total and the heap's parts.
var watchMetrics = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
}

func newGCWatch(limit int64) *gcWatch {
	w := &gcWatch{limit: limit, applied: limit}
	for _, name := range watchMetrics {
		w.samples = append(w.samples, metrics.Sample{Name: name})
	}
	return w
}

// sentinel is allocated for each collection: its cleanup runs after the
// collection that found it unreachable, that is after every collection. It
// is too large for the tiny allocator, which would batch it with others.
type sentinel [64]byte

func (w *gcWatch) arm() {
	runtime.AddCleanup(new(sentinel), func(w *gcWatch) {
		w.adjust()
		if w.after != nil {
			w.after()
		}
		w.arm()
	}, w)
}

// adjust gives the runtime the limit for the heap live now. It runs on the
// runtime's cleanup goroutine, one call at a time.
func (w *gcWatch) adjust() {
	metrics.Read(w.samples)
	var v [6]uint64
	for i, s := range w.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	live, total, heap := v[0], v[1], v[2]+v[3]+v[4]+v[5]
	other := uint64(0)
	if total > heap {
		other = total - heap
	}
	want := floorLimit(w.limit, live, other)
	// Changes of less than 1/16 are not worth telling the runtime, except
	// the return to the configured limit.
	d := want - w.applied
	if d > w.applied/16 || -d > w.applied/16 || (want == w.limit && w.applied != w.limit) {
		debug.SetMemoryLimit(want)
		w.applied = want
	}
}
