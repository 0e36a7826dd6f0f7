package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// watchMinFree is the free space the tests' watchdog waits for: more than a
// full 4 MiB file system has, less than a grown 64 MiB one.
const watchMinFree = 8 << 20

// TestStoreWatchDiskFull fills the store's file system until JetStream fails
// with "no space left on device", grows it, and checks that the stream
// takes messages again without a manual restart, with everything stored
// before intact. It needs root (it mounts a tmpfs).
func TestStoreWatchDiskFull(t *testing.T) {
	dir := bustest.MountTmpfs(t, "4m")
	st := startWatched(t, dir, true)
	st.createStream(t)
	// Something else fills the disk: JetStream's own limit (set from the
	// free space at start) is far from reached when the disk is full.
	fill(t, dir, 1<<20)
	acked, err := st.publishUntilRefused(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a full disk: want the publish to go unanswered, got %v", err)
	}
	st.waitLogged(t, "waiting for the JetStream store to take writes")
	remount(t, dir, "size=64m", 0)
	st.checkRecovered(t, acked)
}

// TestStoreWatchStoreLimit: on a small disk JetStream's own store limit
// (3/4 of the free space when it started) refuses messages first, with
// "insufficient resources", and keeps refusing them after the disk has
// grown, until JetStream restarts.
func TestStoreWatchStoreLimit(t *testing.T) {
	dir := bustest.MountTmpfs(t, "4m")
	st := startWatched(t, dir, true)
	st.createStream(t)
	acked, err := st.publishUntilRefused(t)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10023 {
		t.Fatalf("want insufficient resources (10023), got %v", err)
	}
	st.waitLogged(t, "waiting for the JetStream store to take writes")
	remount(t, dir, "size=64m", 0)
	st.checkRecovered(t, acked)
}

// TestStoreWatchReadOnly remounts the store's file system read-only under a
// running server (its files closed: Linux refuses to remount a file system
// read-only while files on it are open for writing), then read-write again.
func TestStoreWatchReadOnly(t *testing.T) {
	dir := bustest.MountTmpfs(t, "64m")
	// A first server stores some messages and stops, so that the second
	// starts with no file open for writing.
	first := startWatched(t, dir, false)
	first.createStream(t)
	acked := first.publish(t, 10)
	bus.Shutdown(first.s)

	st := startWatched(t, dir, true)
	st.acked = len(acked)
	remount(t, dir, "", syscall.MS_RDONLY)
	_, err := st.publishUntilRefused(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read-only disk: want the publish to go unanswered, got %v", err)
	}
	st.waitLogged(t, "waiting for the JetStream store to take writes")
	remount(t, dir, "", 0)
	st.checkRecovered(t, acked)
}

// TestStoreWatchDisabled: nats-server shuts JetStream down when a store
// write is refused for permissions (and, on a cluster, when it runs out of
// space); the watchdog enables it again once the store takes writes. Runs
// without root: the test shuts JetStream down as the server would.
func TestStoreWatchDisabled(t *testing.T) {
	st := startWatchedEvery(t, t.TempDir(), true, 250*time.Millisecond)
	st.createStream(t)
	acked := st.publish(t, 10)
	if lines := st.logs.Lines(); len(lines) != 0 {
		t.Fatalf("the watchdog logged while the store was healthy: %q", lines)
	}
	if err := st.s.ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	// The watchdog acts on the second look at a disabled JetStream, at
	// least one interval from now.
	if _, err := st.tryPublish(); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("JetStream disabled: want no response from the stream, got %v", err)
	}
	st.checkRecovered(t, acked)
}

// watched is a server on a store directory, maybe with a watchdog.
type watched struct {
	s     *server.Server
	js    jetstream.JetStream
	logs  *bustest.LogRecorder
	acked int // messages acknowledged so far; each holds its number
}

const streamName = "WATCHED"

// startWatched starts a server storing in dir/store and, if watch is set,
// its store watchdog looking every 50 ms; both stop when the test ends.
func startWatched(t *testing.T, dir string, watch bool) *watched {
	t.Helper()
	return startWatchedEvery(t, dir, watch, 50*time.Millisecond)
}

// startWatchedEvery is startWatched with the watchdog looking every interval.
func startWatchedEvery(t *testing.T, dir string, watch bool, interval time.Duration) *watched {
	t.Helper()
	logs := &bustest.LogRecorder{Min: slog.LevelInfo}
	opts := bus.ServerOptions{DontListen: true, DataDir: filepath.Join(dir, "store")}
	s := bustest.RunListeningServer(t, opts)
	if watch {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			err := bus.WatchStore(ctx, s, opts, bus.StoreWatchOptions{
				Interval: interval, MinFree: watchMinFree, Logger: slog.New(logs),
			})
			if err != nil {
				t.Errorf("watch store: %v", err)
			}
		})
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
	return &watched{s: s, js: bustest.JetStream(t, s, "test"), logs: logs}
}

func (w *watched) createStream(t *testing.T) {
	t.Helper()
	_, err := w.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: streamName, Subjects: []string{"watched.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// payload is message i: its number, then filler.
func payload(i int) []byte {
	b := make([]byte, 16<<10)
	copy(b, fmt.Sprintf("message %d;", i))
	return b
}

// tryPublish publishes the next message once, waiting briefly for the
// store's acknowledgement.
func (w *watched) tryPublish() (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// No retries on "no responders": the test sees each refusal.
	return w.js.Publish(ctx, "watched.x", payload(w.acked), jetstream.WithMsgID(fmt.Sprint(w.acked)), jetstream.WithRetryAttempts(0))
}

// publish stores n messages and returns their sequence numbers.
func (w *watched) publish(t *testing.T, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for range n {
		ack, err := w.tryPublish()
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
		w.acked++
	}
	return seqs
}

// publishUntilRefused publishes until the store refuses a message and
// returns the sequence numbers of those it took, and the refusal.
func (w *watched) publishUntilRefused(t *testing.T) ([]uint64, error) {
	t.Helper()
	var seqs []uint64
	for range 100_000 {
		ack, err := w.tryPublish()
		if err != nil {
			return seqs, err
		}
		seqs = append(seqs, ack.Sequence)
		w.acked++
	}
	t.Fatal("the store never refused a message")
	return nil, nil
}

// waitLogged waits until the watchdog has logged a line containing text.
func (w *watched) waitLogged(t *testing.T, text string) {
	t.Helper()
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, l := range w.logs.Lines() {
			if strings.Contains(l, text) {
				return nil
			}
		}
		return fmt.Errorf("no %q in %q", text, w.logs.Lines())
	})
}

// checkRecovered waits until the stream takes a message again, then checks
// that the messages acknowledged before (sequence numbers seqs, numbered
// from 0) are intact and that the watchdog logged its few state changes
// and no more.
func (w *watched) checkRecovered(t *testing.T, seqs []uint64) {
	t.Helper()
	var lastErr error
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if _, err := w.tryPublish(); err != nil {
			lastErr = err
			return err
		}
		return nil
	})
	t.Logf("publishes succeed again (last refusal: %v)", lastErr)
	// A re-enabled JetStream may answer a publish before it answers the
	// stream's API again.
	var st jetstream.Stream
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var err error
		st, err = w.js.Stream(context.Background(), streamName)
		return err
	})
	for i, seq := range seqs {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatalf("message %d (seq %d): %v", i, seq, err)
		}
		if !bytes.Equal(m.Data, payload(i)) {
			t.Fatalf("message %d (seq %d) changed: %.20q", i, seq, m.Data)
		}
	}
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, l := range w.logs.Lines() {
			if strings.Contains(l, "JetStream store healthy again") {
				return nil
			}
		}
		return fmt.Errorf("not logged healthy: %q", w.logs.Lines())
	})
	if lines := w.logs.Lines(); len(lines) > 6 {
		t.Fatalf("the watchdog logged %d lines for one fault:\n%s", len(lines), strings.Join(lines, "\n"))
	} else {
		t.Logf("watchdog log:\n%s", strings.Join(lines, "\n"))
	}
}

// remount changes the tmpfs at dir: data "size=64m" grows it, flags
// MS_RDONLY makes it read-only, none makes it writable again.
func remount(t *testing.T, dir, data string, flags uintptr) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|flags, data); err != nil {
		t.Fatalf("remount %s (%s): %v", dir, data, err)
	}
}

// fill writes a file into dir that leaves only leave bytes free.
func fill(t *testing.T, dir string, leave int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*int64(st.Bsize) - leave
	if n <= 0 {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "fill"), make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
}
