package lograte

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	e := Every{Interval: time.Minute}
	t0 := time.Unix(1000, 0)
	for _, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{59 * time.Second, false, 0},
		{time.Minute, true, 2},
		{time.Minute + time.Second, false, 0},
		{3 * time.Minute, true, 1},
	} {
		ok, n := e.Allow(t0.Add(step.at))
		if ok != step.ok || n != step.suppressed {
			t.Errorf("at %v: allowed %v, %d suppressed; want %v, %d", step.at, ok, n, step.ok, step.suppressed)
		}
	}
}
