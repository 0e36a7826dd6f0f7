package bustest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
)

func TestServerAndConnections(t *testing.T) {
	s := RunServerWith(t, bus.ServerOptions{MaxPayload: 1 << 10})
	nc := Connect(t, s, "plain")
	if got := nc.MaxPayload(); got != 1<<10 {
		t.Errorf("max payload %d, want %d", got, 1<<10)
	}
	js := JetStream(t, s, "js")
	CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if n := s.NumClients(); n != 2 {
			return fmt.Errorf("%d clients", n)
		}
		return nil
	})
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		st, err := js.Stream(context.Background(), "S")
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 1 {
			return fmt.Errorf("%d messages stored", n)
		}
		return nil
	})
}

// recordingTB keeps what Fatalf reports instead of failing the test.
type recordingTB struct {
	testing.TB
	fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestCheckForTimesOut(t *testing.T) {
	rec := &recordingTB{TB: t}
	calls := 0
	CheckFor(rec, 20*time.Millisecond, time.Millisecond, func() error {
		calls++
		return errors.New("not yet")
	})
	if calls < 2 || !strings.Contains(rec.fatal, "not yet") {
		t.Fatalf("%d calls, failure %q", calls, rec.fatal)
	}
}

func TestCheckForSucceeds(t *testing.T) {
	rec := &recordingTB{TB: t}
	calls := 0
	CheckFor(rec, 5*time.Second, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 || rec.fatal != "" {
		t.Fatalf("%d calls, failure %q", calls, rec.fatal)
	}
}
