package collector

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/bus"
)

// Output kinds, as the full-stream state and its log lines name them.
const (
	kindTrajectory = "trajectory"
	kindFailure    = "failure"
	kindGroup      = "group"
)

// fullStreams follows the output streams that refuse records for being
// full. Such a stream is a work queue nobody is consuming: every outcome
// fails alike until a reader catches up, so the condition is logged once
// per stream per interval, with how many records were refused since, and
// reported in Stats, instead of once per record. A stream at the edge of
// full, whose slow reader frees room for one record at a time, goes in and
// out of the state all the time: the interval holds across those spells.
type fullStreams struct {
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	full   map[string]*fullStream // by output kind, while its stream refuses
	logged map[string]time.Time   // by output kind: its last line
	// unlogged counts the records of a kind refused since its last line.
	unlogged map[string]int
}

// fullStream is one spell of a stream refusing records.
type fullStream struct {
	since time.Time
	// logged says whether the spell's start was logged, and so its end is.
	logged bool
}

// refused notes a publish of kind that failed; it returns whether the
// stream refused for being full.
func (f *fullStreams) refused(kind string, err error, retryIn time.Duration) bool {
	if !errors.Is(err, bus.ErrStreamFull) {
		return false
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full == nil {
		f.full, f.logged, f.unlogged = map[string]*fullStream{}, map[string]time.Time{}, map[string]int{}
	}
	s := f.full[kind]
	if s == nil {
		s = &fullStream{since: now}
		f.full[kind] = s
	}
	f.unlogged[kind]++
	if last, ok := f.logged[kind]; !ok || now.Sub(last) >= f.interval {
		f.log.Warn(kind+" stream full: no consumer is reading", "full_for", now.Sub(s.since).Round(time.Second),
			"refused_since_last_line", f.unlogged[kind], "retry_in", retryIn, "err", err)
		f.logged[kind], f.unlogged[kind], s.logged = now, 0, true
	}
	return true
}

// stored notes a publish of kind that succeeded, ending a full spell.
func (f *fullStreams) stored(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.full[kind]; s != nil {
		delete(f.full, kind)
		if s.logged {
			f.log.Info(kind+" stream takes records again", "was_full_for", time.Since(s.since).Round(time.Second))
		}
	}
}

// kinds lists the output kinds whose stream is full now, sorted.
func (f *fullStreams) kinds() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.full))
}

// retryDelay is how long a terminal step waits before its outcome is tried
// again, growing with its deliveries: 1 s, 2 s, 4 s … at most 30 s.
func retryDelay(delivered uint64) time.Duration {
	if delivered == 0 {
		delivered = 1
	}
	return min(time.Second<<min(delivered-1, 5), 30*time.Second)
}
