package bus_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
)

// TestStoredMessagesNameTheirEncoding: every message rollfleet stores with
// a body says in its Content-Type header that the body is msgpack, whichever
// way it was published (bus.Publish, bus.PublishMsg of a traced message, the
// control plane's policy state), so "nats stream view" and "nats sub" show
// it; a message without a body (a progress mark) has none.
func TestStoredMessagesNameTheirEncoding(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s, "test")
	js := bustest.JetStream(t, s, "test-js")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{Batches: true}); err != nil {
		t.Fatal(err)
	}
	body, err := messages.Marshal(&messages.Trajectory{V: messages.Version, EpisodeID: "e1"})
	if err != nil {
		t.Fatal(err)
	}
	traceparent := messages.Traceparent(messages.NewTraceID(), messages.NewSpanID())
	ctl, err := control.NewClient(nc, subj)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, stream, subject string
		publish               func() error
		contentType           string
		traceparent           string
	}{
		{"Publish", subj.StreamTrajectories(), subj.Trajectories("r", "env"),
			func() error { return bus.Publish(ctx, js, subj.Trajectories("r", "env"), body, "e1") },
			bus.ContentTypeMsgpack, ""},
		{"PublishMsg traced", subj.StreamSteps(), subj.Steps("r", "e1", "e1"),
			func() error {
				return bus.PublishMsg(ctx, js, bus.TracedMsg(subj.Steps("r", "e1", "e1"), body, traceparent), "e1/0")
			},
			bus.ContentTypeMsgpack, traceparent},
		{"policy state", subj.StreamControl(), subj.Control(),
			func() error { _, err := ctl.Pause(ctx, messages.OnPauseFinish); return err },
			bus.ContentTypeMsgpack, ""},
		{"no body", subj.StreamBatches(), subj.BatchProgress("b", "trajectory", "e1"),
			func() error { return bus.Publish(ctx, js, subj.BatchProgress("b", "trajectory", "e1"), nil, "") },
			"", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.publish(); err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, c.stream)
			if err != nil {
				t.Fatal(err)
			}
			m, err := st.GetLastMsgForSubject(ctx, c.subject)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Header.Get(bus.HeaderContentType); got != c.contentType {
				t.Errorf("Content-Type %q, want %q (headers %v)", got, c.contentType, m.Header)
			}
			if got := m.Header.Get(messages.HeaderTraceparent); got != c.traceparent {
				t.Errorf("traceparent %q, want %q", got, c.traceparent)
			}
		})
	}
}

// TestTracedMsgHeaders: the header set of a message to store or request,
// by body and trace context.
func TestTracedMsgHeaders(t *testing.T) {
	for _, c := range []struct {
		name        string
		data        []byte
		traceparent string
		want        nats.Header
	}{
		{"body", []byte{0x80}, "", nats.Header{bus.HeaderContentType: {bus.ContentTypeMsgpack}}},
		{"body and trace", []byte{0x80}, "00-t-s-01", nats.Header{
			bus.HeaderContentType: {bus.ContentTypeMsgpack}, messages.HeaderTraceparent: {"00-t-s-01"}}},
		{"trace only", nil, "00-t-s-01", nats.Header{messages.HeaderTraceparent: {"00-t-s-01"}}},
		{"neither", nil, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := bus.TracedMsg("s", c.data, c.traceparent)
			if len(m.Header) != len(c.want) {
				t.Fatalf("headers %v, want %v", m.Header, c.want)
			}
			for k, v := range c.want {
				if got := m.Header.Get(k); got != v[0] {
					t.Errorf("%s: %q, want %q", k, got, v[0])
				}
			}
		})
	}
}
