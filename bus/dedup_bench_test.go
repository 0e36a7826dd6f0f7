package bus_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// BenchmarkStepIDMemory measures what the embedded server holds for the
// message ids of stored steps: it publishes 200,000 steps with step ids to
// the steps stream, purges the stream (so only the ids are left) and
// compares the heap with the empty server's, then again once the stream's
// duplicate window (here 2 s) has passed.
//
//	go test -run '^$' -bench StepIDMemory -benchtime 1x ./bus/
//
// id-bytes is the cost of one id while in the window; after-window-bytes
// what is left of it after. The server's memory for ids is so bounded by the
// step rate times StepsDuplicateWindow.
func BenchmarkStepIDMemory(b *testing.B) {
	const steps, window = 200_000, 2 * time.Second
	for range b.N {
		b.StopTimer()
		s := bustest.RunServer(b)
		js := bustest.JetStream(b, s, "bench")
		subj := messages.NewSubjects("")
		ctx := context.Background()
		if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{StepsDuplicateWindow: window}); err != nil {
			b.Fatal(err)
		}
		st, err := js.Stream(ctx, subj.StreamSteps())
		if err != nil {
			b.Fatal(err)
		}
		base := liveHeap()
		b.StartTimer()

		run, data := nuid.Next(), make([]byte, 64)
		for i := range steps {
			ep := fmt.Sprintf("bench0000000-%06d", i/4)
			if _, err := js.PublishAsync(subj.Steps("bench", ep, ep), data, jetstream.WithMsgID(messages.StepMsgID(ep, run, int32(i%4)))); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishes not acknowledged")
		}
		b.StopTimer()
		if err := st.Purge(ctx); err != nil {
			b.Fatal(err)
		}
		held := liveHeap() - base
		time.Sleep(window + time.Second)
		left := liveHeap() - base
		b.ReportMetric(float64(held)/steps, "id-bytes")
		b.ReportMetric(float64(left)/steps, "after-window-bytes")
	}
}

// liveHeap is the heap in use after the garbage is collected (twice, so that
// pooled buffers go too).
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
