package metrics_test

import (
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
)

// BenchmarkTurn is what metrics add to one turn at zero model latency: the
// env worker's turn observation, the LLM worker's generate and tokenize
// timings, three JetStream publishes (step, trajectory share, group share)
// and a share of the collector's per-trajectory observation (a turn in
// four ends an episode). It allocates nothing.
func BenchmarkTurn(b *testing.B) {
	m := metrics.New()
	b.Cleanup(m.ObserveBus())
	ep := m.Env().Episode("game:GuessTheNumber-v0")
	model := m.LLM().Endpoint("http://127.0.0.1:8000")
	coll := m.Collector()
	traj := &messages.Trajectory{Env: "game:GuessTheNumber-v0", Reward: 1, Success: true}
	var pub bus.Observer = busObserverOf(b, m)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ep.Turn(300, 12, 4*time.Microsecond)
		model.Completed(2*time.Millisecond, nil)
		model.Tokenized(300*time.Microsecond, nil)
		for range 3 {
			pub.Published(500*time.Microsecond, nil)
		}
		if i%4 == 0 {
			coll.Stored(traj, nil)
		}
	}
}

// busObserverOf returns the bus observer m installed.
func busObserverOf(b *testing.B, m *metrics.Metrics) bus.Observer {
	o := bus.SetObserver(nil)
	bus.SetObserver(o)
	if o == nil {
		b.Fatal("no bus observer installed")
	}
	return o
}
