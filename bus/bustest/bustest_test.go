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

// StoredMessages reads what a work-queue stream holds, in order, filtered by
// subject, and leaves it there: a consumer created afterwards still gets it.
func TestStoredMessagesLeavesWorkQueueIntact(t *testing.T) {
	s := RunServer(t)
	js := JetStream(t, s, "js")
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "WQ", Subjects: []string{"wq.>"}, Retention: jetstream.WorkQueuePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := StoredMessages(t, js, "WQ", ""); len(got) != 0 {
		t.Fatalf("empty stream: %d messages", len(got))
	}
	for i, subject := range []string{"wq.a.1", "wq.b.1", "wq.a.2", "wq.b.2", "wq.a.3"} {
		if _, err := js.Publish(ctx, subject, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// A gap in the sequence: a message taken by its reader.
	if err := st.DeleteMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	read := func(filter string) string {
		var out []string
		for _, m := range StoredMessages(t, js, "WQ", filter) {
			out = append(out, fmt.Sprintf("%d:%s=%s", m.Sequence, m.Subject, m.Data))
		}
		return strings.Join(out, " ")
	}
	for filter, want := range map[string]string{
		"":       "1:wq.a.1=0 2:wq.b.1=1 4:wq.b.2=3 5:wq.a.3=4",
		"wq.>":   "1:wq.a.1=0 2:wq.b.1=1 4:wq.b.2=3 5:wq.a.3=4",
		"wq.a.>": "1:wq.a.1=0 5:wq.a.3=4",
		"wq.*.2": "4:wq.b.2=3",
		"wq.c.>": "",
	} {
		if got := read(filter); got != want {
			t.Errorf("filter %q: %s, want %s", filter, got, want)
		}
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "r", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range b.Messages() {
		n++
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n != 4 {
		t.Fatalf("the consumer got %d messages after StoredMessages, want 4", n)
	}
	if got := read(""); got != "" {
		t.Errorf("after the acks: %s", got)
	}
	if _, err := ReadStored(ctx, js, "MISSING", ""); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a missing stream: %v", err)
	}
}
