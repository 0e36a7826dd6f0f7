package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
)

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// readyzIs waits until /readyz answers code with a body containing want.
func readyzIs(t *testing.T, base string, code int, want string) {
	t.Helper()
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		got, body := get(t, base+"/readyz")
		if got != code || !strings.Contains(body, want) {
			return fmt.Errorf("/readyz: %d %q, want %d with %q", got, body, code, want)
		}
		return nil
	})
}

// TestReadinessFollowsNATS: /healthz stays 200 throughout; /readyz is 503
// until the connection is watched, 200 once connected with the streams,
// 503 naming NATS while the server is down and 200 again after the
// reconnect, and 503 naming the stream when one is deleted.
func TestReadinessFollowsNATS(t *testing.T) {
	opts := bus.ServerOptions{Port: freePort(t), DataDir: t.TempDir()}
	s, err := bus.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(s) })
	m := metrics.New()
	srv, err := m.Serve("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	base := srv.URL()

	readyzIs(t, base, http.StatusServiceUnavailable, "not connected to NATS yet")
	nc, err := bus.Connect(s.ClientURL(), "probe", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	m.WatchNATS(nc, js, subj)

	steps := []struct {
		name string
		do   func(t *testing.T)
		code int
		want string
	}{
		{"connected", func(*testing.T) {}, http.StatusOK, "ready"},
		{"server down", func(*testing.T) { bus.Shutdown(s) }, http.StatusServiceUnavailable, "nats: connection"},
		{"server back", func(t *testing.T) {
			if s, err = bus.StartServer(opts); err != nil {
				t.Fatal(err)
			}
		}, http.StatusOK, "ready"},
		{"stream deleted", func(t *testing.T) {
			bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
				err := js.DeleteStream(ctx, subj.StreamGroups())
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					return nil
				}
				return err
			})
		}, http.StatusServiceUnavailable, "streams: stream " + subj.StreamGroups()},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			readyzIs(t, base, step.code, step.want)
			if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz: %d %q", code, body)
			}
		})
	}
	if nc.Status() != nats.CONNECTED {
		t.Errorf("connection %s at the end", nc.Status())
	}
}

// TestBusFamiliesMove checks the bus families that move only under
// trouble: a retried JetStream call and a refused publish.
func TestBusFamiliesMove(t *testing.T) {
	m := metrics.New()
	srv, err := m.Serve("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	t.Cleanup(m.ObserveBus())
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "bus")
	ctx := context.Background()

	calls := 0
	if err := bus.Retry(ctx, func(context.Context) error {
		if calls++; calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, js.Conn().MaxPayload()+1)
	if err := bus.Publish(ctx, js, "nowhere", big, ""); !errors.Is(err, bus.ErrTooLarge) {
		t.Fatalf("oversize publish: %v", err)
	}
	f := scrape(t, srv.URL())
	for _, c := range []struct {
		name string
		want float64
	}{
		{"rollfleet_jetstream_retries_total", 2},
		{"rollfleet_jetstream_publish_errors_total", 1},
		{"rollfleet_jetstream_publish_duration_seconds", 1},
	} {
		if v, _ := f.value(c.name, nil); v != c.want {
			t.Errorf("%s = %v, want %v", c.name, v, c.want)
		}
	}
}
