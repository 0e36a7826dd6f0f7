// Package fleettest starts standing fleets for tests of what runs beside
// one: status readers, trainers, the rollout command.
package fleettest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet"
)

// Listening starts a NATS server on a free local port with a standing
// fleet on it (LLM worker, env worker, collector, stand-in model), both
// stopped when the test ends, and returns the server's client URL and the
// fleet, whose Connect gives the test its own connections.
func Listening(t testing.TB) (string, *fleet.Standing) {
	t.Helper()
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: filepath.Join(t.TempDir(), "nats"), Sync: bus.TempStoreSync})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.StartStanding(ctx, fleet.Options{NATS: s.ClientURL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return s.ClientURL(), f
}
