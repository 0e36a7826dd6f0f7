package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// TestLeaderGetMsg reads a work queue that allows direct gets through the
// leader's MSG.GET: a stored message with its headers, the next one on a
// subject, and ErrMsgNotFound once a message is gone or past the end.
func TestLeaderGetMsg(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "Q", Subjects: []string{"q.>"}, Retention: jetstream.WorkQueuePolicy, AllowDirect: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*nats.Msg{
		{Subject: "q.a", Data: []byte("one"), Header: nats.Header{"X-K": []string{"v"}}},
		{Subject: "q.b", Data: []byte("two")},
		{Subject: "q.a", Data: []byte("three")},
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	m, err := bus.LeaderGetMsg(ctx, js, "Q", 1, "")
	if err != nil || string(m.Data) != "one" || m.Subject != "q.a" || m.Sequence != 1 || m.Header.Get("X-K") != "v" {
		t.Fatalf("message 1: %+v, %v", m, err)
	}
	if m, err = bus.LeaderGetMsg(ctx, js, "Q", 2, "q.a"); err != nil || string(m.Data) != "three" || m.Sequence != 3 {
		t.Fatalf("next q.a from 2: %+v, %v", m, err)
	}
	if err := st.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{1, 4} {
		if _, err := bus.LeaderGetMsg(ctx, js, "Q", seq, ""); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("message %d: %v, want ErrMsgNotFound", seq, err)
		}
	}
	if _, err := bus.LeaderGetMsg(ctx, js, "NONE", 1, ""); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a stream that does not exist: %v, want an error other than not found", err)
	}
}
