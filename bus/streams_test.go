package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// A full stream refuses new messages with an error the publisher sees at
// once, and keeps what it stored: overload is never silent loss.
func TestFullStreamRefusesNewMessages(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{MaxBytes: 8 << 10, StepsMaxBytes: 8 << 10}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1024)
	stored := 0
	var err error
	for i := range 64 {
		if err = bus.Publish(ctx, js, subj.Trajectories("game"), data, strings.Repeat("x", i+1)); err != nil {
			break
		}
		stored++
	}
	if err == nil || !errors.Is(err, jetstream.ErrMaxBytesExceeded) && !strings.Contains(err.Error(), "maximum bytes") {
		t.Fatalf("publishing into a full stream: %v after %d messages", err, stored)
	}
	st, err := js.Stream(ctx, subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(info.State.Msgs) != stored || stored == 0 {
		t.Fatalf("stream holds %d messages, %d were acknowledged", info.State.Msgs, stored)
	}
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		// Decisions may age out oldest first (see StreamOptions.DecidedMaxAge).
		discard := jetstream.DiscardNew
		if cfg.Name == subj.StreamDecided() {
			discard = jetstream.DiscardOld
		}
		if cfg.Discard != discard || cfg.MaxBytes <= 0 || cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s: discard %v, max bytes %d, storage %v", cfg.Name, cfg.Discard, cfg.MaxBytes, cfg.Storage)
		}
	}
}
