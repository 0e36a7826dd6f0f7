package env

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// BenchmarkInFlightEpisodeMemory measures what one in-flight episode costs
// an env worker: N episodes are started and all left waiting for their first
// generation (a stand-in LLM worker answers tokenize requests and holds every
// generate request), then the live heap and goroutine stacks are compared
// with the idle worker's. The held request payloads are the episodes' token
// arrays in transit and are reported separately.
//
//	go test -run '^$' -bench InFlightEpisodeMemory -benchtime 1x ./actors/env/
func BenchmarkInFlightEpisodeMemory(b *testing.B) {
	const n = 2000
	for range b.N {
		total, tokens := measureInFlight(b, n)
		b.ReportMetric(float64(total)/n, "B/episode")
		b.ReportMetric(float64(total-tokens)/n, "B/episode-beyond-tokens")
	}
}

func measureInFlight(b *testing.B, n int) (total, tokenBytes int64) {
	s, err := bus.StartServer(bus.ServerOptions{DontListen: true, DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Shutdown(s)
	conn := func(name string) (*nats.Conn, jetstream.JetStream) {
		nc, err := bus.ConnectInProcess(s, name)
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		return nc, js
	}
	ctx, cancel := context.WithCancel(context.Background())
	tnc, tjs := conn("test")
	defer tnc.Close()
	subj := messages.NewSubjects("")
	if err := bus.EnsureStreams(ctx, tjs, subj, bus.StreamOptions{}); err != nil {
		b.Fatal(err)
	}

	// The stand-in LLM worker: tokenize at once, hold every generate.
	var tok toyllm.Tokenizer
	if _, err := tnc.Subscribe(subj.Tokenize(), func(m *nats.Msg) {
		req, err := messages.Decode[messages.TokenizeRequest](m.Data)
		if err != nil {
			b.Error(err)
			return
		}
		text := req.Text
		if len(req.Messages) > 0 {
			msgs := []chat.Message{{Role: req.Messages[0].Role, Content: req.Messages[0].Content}}
			text = chat.Render(msgs, req.AddGenerationPrompt)
		}
		data, _ := messages.Marshal(&messages.TokenizeReply{V: messages.Version, Tokens: tok.Encode(text)})
		_ = m.Respond(data)
	}); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var held []*nats.Msg
	if _, err := tnc.Subscribe(subj.Generate(), func(m *nats.Msg) {
		mu.Lock()
		held = append(held, m)
		mu.Unlock()
	}); err != nil {
		b.Fatal(err)
	}
	heldCount := func() int { mu.Lock(); defer mu.Unlock(); return len(held) }

	enc, ejs := conn("env")
	w, err := New(enc, ejs, Options{Concurrency: n, Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	// Let the worker and its consumer settle before the baseline.
	bustest.CheckFor(b, time.Minute, 10*time.Millisecond, func() error {
		if n := w.Stats().InFlight; n != 0 {
			return fmt.Errorf("%d episodes in flight", n)
		}
		return nil
	})
	before := liveBytes()

	for i := range n {
		req := episodeRequest(fmt.Sprintf("mem-%d", i), nil)
		data, _ := messages.Marshal(req)
		if _, err := tjs.PublishAsync(subj.Episodes(req.RunID, req.Env), data); err != nil {
			b.Fatal(err)
		}
	}
	<-tjs.PublishAsyncComplete()
	bustest.CheckFor(b, time.Minute, 10*time.Millisecond, func() error {
		if got := heldCount(); got != n {
			return fmt.Errorf("%d of %d episodes waiting on the model", got, n)
		}
		return nil
	})
	after := liveBytes()
	mu.Lock()
	for _, m := range held {
		tokenBytes += int64(cap(m.Data))
	}
	mu.Unlock()
	// The episodes' own observation tokens, as the worker allocates them.
	first, err := messages.Decode[messages.GenerateRequest](held[0].Data)
	if err != nil {
		b.Fatal(err)
	}
	tokenBytes += int64(n) * int64(len(first.Prompt)+512) * 4

	cancel()
	enc.Close() // no replies are coming: end the waiting episodes
	<-done
	return after - before, tokenBytes
}

// liveBytes is the live heap plus goroutine stacks after a full collection.
func liveBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
