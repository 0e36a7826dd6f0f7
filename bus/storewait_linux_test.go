package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// TestRetryStoreWaitsForSpace starts a consumer, as a process does at
// start, while the store's disk is full: the server refuses it at once
// ("no space left on device"), and RetryStore waits, saying so, until the
// disk has grown, instead of returning the refusal. It needs root (it
// mounts a tmpfs).
func TestRetryStoreWaitsForSpace(t *testing.T) {
	dir := bustest.MountTmpfs(t, "4m")
	st := startWatched(t, dir, true)
	st.createStream(t)
	fill(t, dir, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(ctx context.Context) error {
		_, err := st.js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{Durable: "starting", AckPolicy: jetstream.AckExplicitPolicy})
		return err
	}
	if err := bus.Retry(ctx, create); !bus.StoreUnwritable(err) {
		t.Fatalf("a consumer on a full disk: want a store refusal, got %v", err)
	}
	logs := &bustest.LogRecorder{Min: slog.LevelWarn}
	done := make(chan error, 1)
	go func() { done <- bus.RetryStore(ctx, slog.New(logs), "create a consumer", create) }()
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("RetryStore returned on a full disk: %v", err)
		default:
		}
		for _, l := range logs.Lines() {
			if strings.Contains(l, "waiting for the NATS store to take writes") {
				return nil
			}
		}
		return errors.New("no wait logged yet")
	})
	remount(t, dir, "size=64m", 0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the disk grew: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("RetryStore still waiting a minute after the disk grew")
	}
}
