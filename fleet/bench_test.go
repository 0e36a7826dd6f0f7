package fleet

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkRollout measures end-to-end throughput of the in-process fleet
// (embedded NATS, the three actors, the stand-in model over loopback HTTP at
// zero latency): each iteration runs 2048 GuessTheNumber episodes and the
// benchmark reports model turns per second of wall time.
//
//	go test -run '^$' -bench BenchmarkRollout -benchtime 5x ./fleet/
func BenchmarkRollout(b *testing.B) {
	const episodes = 2048
	var turns int
	seed := uint64(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum, err := Run(context.Background(), Options{
			Env: "game:GuessTheNumber-v0", Episodes: episodes, Seed: &seed, Concurrency: 1024,
			DataDir: filepath.Join(b.TempDir(), "nats"),
		})
		if err != nil || sum.Trajectories != episodes {
			b.Fatalf("run: %v (%s)", err, sum)
		}
		turns += sum.Turns
	}
	b.ReportMetric(float64(turns)/b.Elapsed().Seconds(), "turns/s")
}
