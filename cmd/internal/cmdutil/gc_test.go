package cmdutil

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestParseMemLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"off", math.MaxInt64},
		{"0", math.MaxInt64},
		{"0MiB", math.MaxInt64},
		{"1048576", 1 << 20},
		{"4096B", 4096},
		{"64KiB", 64 << 10},
		{"768MiB", 768 << 20},
		{" 2GiB ", 2 << 30},
		{"1TiB", 1 << 40},
	} {
		got, err := ParseMemLimit(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMemLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "1.5GiB", "1G", "1GB", "-1", "+1MiB", "MiB", "9999999TiB", "lots"} {
		if got, err := ParseMemLimit(bad); err == nil {
			t.Errorf("ParseMemLimit(%q) = %d, want an error", bad, got)
		}
	}
	if err := TuneGC("1G"); err == nil {
		t.Error("TuneGC accepted a malformed limit")
	}
}

// The limit holds while it leaves the heap room to grow by what is live;
// beyond, it gives way to twice the live heap plus the runtime's other
// memory.
func TestFloorLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		limit       int64
		live, other uint64
		want        int64
	}{
		{768 * mib, 100 * mib, 20 * mib, 768 * mib},
		{768 * mib, 374 * mib, 20 * mib, 768 * mib},
		{768 * mib, 400 * mib, 20 * mib, 820 * mib},
		{768 * mib, 1000 * mib, 100 * mib, 2100 * mib},
		{math.MaxInt64, math.MaxUint64 / 2, 0, math.MaxInt64},
	} {
		if got := floorLimit(tc.limit, tc.live, tc.other); got != tc.want {
			t.Errorf("floorLimit(%d MiB, live %d MiB, other %d MiB) = %d MiB, want %d MiB",
				tc.limit/mib, tc.live/mib, tc.other/mib, got/mib, tc.want/mib)
		}
	}
}

// After a collection that found more live than half the limit, the watch
// raises the runtime's limit; once it is gone, it sets the limit back.
func TestGCWatchAdjusts(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const limit = 64 << 20
	debug.SetMemoryLimit(limit)
	w := newGCWatch(limit)

	live := make([]byte, 96<<20)
	for i := range live {
		live[i] = 1
	}
	runtime.GC()
	w.adjust()
	if got := debug.SetMemoryLimit(-1); got < 2*96<<20 {
		t.Errorf("with 96 MiB live the limit is %d MiB, want at least 192 MiB", got>>20)
	}
	runtime.KeepAlive(live)
	live = nil

	runtime.GC()
	w.adjust()
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("with the 96 MiB gone the limit is %d MiB, want %d MiB", got>>20, limit>>20)
	}
}

// The watch runs after every collection.
func TestGCWatchRunsEachCollection(t *testing.T) {
	w := newGCWatch(math.MaxInt64 / 2) // far away: adjusting changes nothing
	done := make(chan struct{}, 1)
	w.after = func() {
		select {
		case done <- struct{}{}:
		default:
		}
	}
	w.arm()
	for range 3 {
		runtime.GC()
		<-done
	}
}
