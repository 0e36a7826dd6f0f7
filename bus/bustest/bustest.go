// Package bustest provides helpers for tests that run actors on the bus: an
// embedded NATS server with JetStream and in-process connections to it, all
// cleaned up when the test ends, a server started from a configuration file
// (with the example configuration's passwords), a recorder of log lines, a
// reader of the messages a stream holds that leaves them in place (see
// StoredMessages), and a polling check for conditions that become true
// asynchronously.
package bustest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
)

// RunServer starts an embedded NATS server with JetStream that serves
// in-process connections only and stores in t.TempDir(), and shuts it down
// when the test ends. It fails the test if the server does not start.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	return RunServerWith(t, bus.ServerOptions{})
}

// RunServerWith is RunServer with the server configured by opts; it
// overrides opts.DontListen and opts.DataDir as RunServer sets them, and
// an empty opts.Sync with bus.TempStoreSync: a test's store is a temp dir.
func RunServerWith(t testing.TB, opts bus.ServerOptions) *server.Server {
	t.Helper()
	opts.DontListen = true
	opts.DataDir = t.TempDir()
	if opts.Sync == "" {
		opts.Sync = bus.TempStoreSync
	}
	return RunListeningServer(t, opts)
}

// RunListeningServer starts a server configured exactly by opts (which may
// name a configuration file) and shuts it down when the test ends. It fails
// the test if the server does not start.
func RunListeningServer(t testing.TB, opts bus.ServerOptions) *server.Server {
	t.Helper()
	s, err := bus.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(s) })
	return s
}

// ExamplePasswords are the placeholder passwords of the example server
// configuration (examples/nats/auth.conf), by role.
var ExamplePasswords = map[string]string{
	"admin":     "admin-CHANGE-ME",
	"envworker": "envworker-CHANGE-ME",
	"llmworker": "llmworker-CHANGE-ME",
	"collector": "collector-CHANGE-ME",
	"trainer":   "trainer-CHANGE-ME",
	"gateway":   "gateway-CHANGE-ME",
}

// Connect opens an in-process connection named name to s, closed when the
// test ends. It fails the test if the connection cannot be made.
func Connect(t testing.TB, s *server.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := bus.ConnectInProcess(s, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream is Connect's connection as a JetStream context.
func JetStream(t testing.TB, s *server.Server, name string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, s, name))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// CheckFor calls f every interval until it returns nil, and fails the test
// with f's last error if that does not happen within timeout. It must be
// called from the test's goroutine.
func CheckFor(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(interval)
	}
	t.Fatalf("condition not met after %v: %v", timeout, err)
}

// LogRecorder is a slog.Handler that keeps the records at or above Min as
// "LEVEL message key=value …" lines, for tests that check what was logged.
type LogRecorder struct {
	Min   slog.Level
	mu    sync.Mutex
	lines []string
}

// Enabled reports whether level is at or above Min.
func (l *LogRecorder) Enabled(_ context.Context, level slog.Level) bool { return level >= l.Min }

// Handle keeps the record as one line.
func (l *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// WithAttrs returns l: attributes added to a logger are not kept.
func (l *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l: groups are not kept.
func (l *LogRecorder) WithGroup(string) slog.Handler { return l }

// Lines returns a copy of the lines kept so far.
func (l *LogRecorder) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// StoredMessages returns the messages stream holds on subjects matching
// filter (every subject when filter is empty), in stream order. It reads
// them by sequence, with no consumer: on a work-queue stream, where a
// consumer must acknowledge what it reads and so removes it, it leaves
// every message in place, and it works on streams of any retention.
func StoredMessages(t testing.TB, js jetstream.JetStream, stream, filter string) []*jetstream.RawStreamMsg {
	t.Helper()
	msgs, err := ReadStored(context.Background(), js, stream, filter)
	if err != nil {
		t.Fatalf("reading %s: %v", stream, err)
	}
	return msgs
}

// ReadStored is StoredMessages returning its error, for use inside CheckFor
// and off the test's goroutine.
func ReadStored(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	if filter == "" {
		filter = ">"
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		// The first stored message at or after seq on filter's subjects.
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return msgs, nil
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
		seq = m.Sequence + 1
	}
}
