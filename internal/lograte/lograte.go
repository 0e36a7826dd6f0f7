// Package lograte bounds how often a recurring failure is logged, so that
// an outage costs a line an interval however many requests it fails.
package lograte

import (
	"sync"
	"time"
)

// Every allows one line per Interval. Its zero value allows every line;
// it is safe for concurrent use.
type Every struct {
	Interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether a line may be logged at now, and how many were
// refused since the last one allowed (for the line to say so).
func (e *Every) Allow(now time.Time) (ok bool, suppressed int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && now.Sub(e.last) < e.Interval {
		e.suppressed++
		return false, 0
	}
	e.last, suppressed, e.suppressed = now, e.suppressed, 0
	return true, suppressed
}
