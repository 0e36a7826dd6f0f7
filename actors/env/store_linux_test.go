package env

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestDiskFull fills the store's file system while episodes run: the
// server fails their step publishes with "no space left on device" (the
// publishes go unanswered) until space returns and the store watchdog
// restarts JetStream. The worker waits the outage out within each delivery
// — longer than MaxDeliver times AckWait — and every episode ends as a
// trajectory, none as a failure, none delivered beyond the limit. It needs
// root (it mounts a tmpfs).
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a file system and waits out redeliveries")
	}
	const episodes = 12
	dir := bustest.MountTmpfs(t, "64m")
	s, sopts := runServerOn(t, filepath.Join(dir, "store"))
	watchStore(t, s, sopts)
	srv := httptest.NewServer(toyllm.New(toyllm.Options{TokenLatency: 2 * time.Millisecond}).Handler())
	t.Cleanup(srv.Close)
	js, coll, _, start := resumeHarness(t, s, srv.URL)
	// The server keeps a delivery's last heartbeat in whole seconds when
	// JetStream restarts: AckWait leaves room for that.
	opts := Options{Concurrency: episodes, AckWait: 4 * time.Second, MaxDeliver: 2}
	w := startWorker(t, s, "env", opts, start)
	attempts := recordAttempts(t, s)

	submitEpisodes(t, js, episodes, messages.ObsChat)
	waitSteps(t, js, episodes)
	full := time.Now()
	fillDisk(t, dir)
	bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if w.Stats().StoreWaiting == 0 {
			return fmt.Errorf("no episode waits for the store: %+v", w.Stats())
		}
		return nil
	})
	// Keep the disk full for longer than the episodes' deliveries would
	// last if the worker handed them back, and watch that it does not.
	holdFor(t, outage(full, opts), func() error {
		if st := w.Stats(); st.Failed != 0 || st.Finished == episodes {
			return fmt.Errorf("during the outage: %+v", st)
		}
		if n := handedBack(w); n != 0 {
			return fmt.Errorf("%d episodes handed back during the outage", n)
		}
		return nil
	})
	if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
		t.Fatal(err)
	}
	// The watchdog restarts JetStream; the waiting episodes get through.
	bustest.CheckFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		if st := w.Stats(); st.StoreWaiting != 0 {
			return fmt.Errorf("episodes still wait for the store: %+v", st)
		}
		return nil
	})
	checkOutcomes(t, js, messages.NewSubjects(""), coll, episodes)
	// Each episode was delivered once: the outage used up no delivery.
	st := w.Stats()
	if st.StoreWaits == 0 || st.Failed != 0 || handedBack(w) != 0 || st.Started != episodes {
		t.Fatalf("worker after the outage: %+v", st)
	}
	attempts.check(t, episodes, opts.MaxDeliver)
	t.Logf("worker: %+v", st)
}

// watchStore runs the server's store watchdog until the test ends.
func watchStore(t *testing.T, s *server.Server, sopts bus.ServerOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := bus.WatchStore(ctx, s, sopts, bus.StoreWatchOptions{Interval: 100 * time.Millisecond, MinFree: 8 << 20}); err != nil {
			t.Errorf("watch store: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// fillDisk writes a file into dir until the file system is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); errors.Is(err, syscall.ENOSPC) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}
