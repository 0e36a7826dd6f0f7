package cmdutil

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// TestInitStreamsMakesBatchesStream checks that --init-streams makes the
// trainers' batches stream with the others, for trainers that may not
// create streams, that a process's ordinary start leaves it alone, and that
// the roles' own --init-streams (their health check) accepts it.
func TestInitStreamsMakesBatchesStream(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{ConfigFile: authConf, Port: -1, DataDir: t.TempDir()})
	url := s.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subj := messages.NewSubjects("rf")

	// An ordinary start, even the admin's, makes the actors' streams only.
	plain := fleetAs(url, "admin", passwords["admin"])
	nc, js, _, err := plain.Connect(ctx, "admin", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := js.Stream(ctx, subj.StreamEpisodes()); err != nil {
		t.Fatalf("episodes stream: %v", err)
	}
	if _, err := js.Stream(ctx, subj.StreamBatches()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("batches stream after an ordinary start: got %v, want not found", err)
	}

	admin := fleetAs(url, "admin", passwords["admin"])
	admin.InitStreams = true
	if err := run("admin", admin, slog.New(slog.DiscardHandler), func(Process) error {
		return errors.New("the body runs with --init-streams")
	}); err != nil {
		t.Fatalf("--init-streams: %v", err)
	}
	st, err := js.Stream(ctx, subj.StreamBatches())
	if err != nil {
		t.Fatalf("batches stream after --init-streams: %v", err)
	}
	// The same command under a role's credentials is the deployments'
	// health check: it finds every stream, the batches stream included.
	for _, role := range []string{"envworker", "llmworker", "collector", "trainer"} {
		f := fleetAs(url, role, passwords[role])
		f.InitStreams = true
		log := &bustest.LogRecorder{Min: slog.LevelWarn}
		done := make(chan error, 1)
		go func() {
			done <- run(role, f, slog.New(log), func(Process) error {
				return errors.New("the body runs with --init-streams")
			})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s --init-streams: %v", role, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s --init-streams: still waiting for the streams", role)
		}
		if lines := refusals(log); len(lines) > 0 {
			t.Errorf("%s --init-streams: %q", role, lines)
		}
	}
	want := bus.StreamConfigs(subj, bus.StreamOptions{Batches: true})
	if cfg := st.CachedInfo().Config; cfg.Subjects[0] != want[len(want)-1].Subjects[0] || cfg.MaxMsgsPerSubject != 1 {
		t.Errorf("batches stream config %+v", cfg)
	}
}
