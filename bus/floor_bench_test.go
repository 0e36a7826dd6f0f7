//go:build unix

package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// BenchmarkTurnFloor is the NATS traffic of one model turn and nothing else:
// the env worker's generate request and its reply (answered at once, no model
// server behind it), the step stored in the steps stream, its delivery to the
// collector's consumer, the acknowledgement and the delete by sequence once
// decided. 256 episodes run at once, everything in one process with the
// embedded server (file storage), as in rollout run. It reports the
// process's CPU per turn: what the fleet spends per turn before any model
// HTTP, game, tokenization, msgpack or trajectory work.
//
//	go test -run '^$' -bench TurnFloor -benchtime 100000x ./bus/
func BenchmarkTurnFloor(b *testing.B) {
	const episodes = 256
	s := bustest.RunServer(b)
	subj := messages.NewSubjects("")
	ctx := context.Background()
	envNC, llmNC := bustest.Connect(b, s, "env"), bustest.Connect(b, s, "llm")
	envJS, colJS := bustest.JetStream(b, s, "env-js"), bustest.JetStream(b, s, "collector")
	if err := bus.EnsureStreams(ctx, envJS, subj, bus.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	reply := make([]byte, 512) // 64 sampled ids and logprobs, packed
	if _, err := llmNC.Subscribe(subj.Generate(), func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
		b.Fatal(err)
	}
	steps, err := colJS.Stream(ctx, subj.StreamSteps())
	if err != nil {
		b.Fatal(err)
	}
	cons, err := steps.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "collector", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 8192, FilterSubject: subj.StepsAll(),
	})
	if err != nil {
		b.Fatal(err)
	}
	var decided atomic.Int64
	deletes := make(chan uint64, 1<<14)
	var deleters sync.WaitGroup
	for range 4 {
		deleters.Go(func() {
			for seq := range deletes {
				if err := steps.DeleteMsg(ctx, seq); err != nil {
					b.Error(err)
				}
				decided.Add(1)
			}
		})
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			b.Error(err)
			return
		}
		_ = m.Ack()
		deletes <- meta.Sequence.Stream
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		b.Fatal(err)
	}

	request, step := make([]byte, 2048), make([]byte, 600)
	var next atomic.Int64
	before := cpuTime(b)
	b.ResetTimer()
	var players sync.WaitGroup
	for e := range episodes {
		players.Go(func() {
			id := fmt.Sprintf("floor-%03d", e)
			subject := subj.Steps("floor", id, id)
			for turn := next.Add(1); turn <= int64(b.N); turn = next.Add(1) {
				traceparent := messages.Traceparent(messages.NewTraceID(), messages.NewSpanID())
				if _, err := envNC.RequestMsg(bus.TracedMsg(subj.Generate(), request, traceparent), 10*time.Second); err != nil {
					b.Error(err)
					return
				}
				if err := bus.PublishMsg(ctx, envJS, bus.TracedMsg(subject, step, traceparent), fmt.Sprintf("%s/%d", id, turn)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	players.Wait()
	bustest.CheckFor(b, time.Minute, time.Millisecond, func() error {
		if n := decided.Load(); n < int64(b.N) {
			return fmt.Errorf("%d of %d steps deleted", n, b.N)
		}
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/turn")
	cc.Stop()
	<-cc.Closed()
	close(deletes)
	deleters.Wait()
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
