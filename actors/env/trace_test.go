package env

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// runTraced submits req with the given traceparent header (none when empty) and returns its
// steps as stored, with their headers, and the request's sequence in the episodes stream.
func (f *fixture) runTraced(t *testing.T, req *messages.EpisodeRequest, traceparent string) ([]jetstream.Msg, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := messages.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := f.js.PublishMsg(ctx, bus.TracedMsg(f.subj.Episodes(req.RunID, req.Env), data, traceparent))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := f.js.OrderedConsumer(ctx, f.subj.StreamSteps(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subj.Steps(req.RunID, req.GroupID, req.EpisodeID)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for {
		sm, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("episode %s: waiting for steps: %v (got %d)", req.EpisodeID, err, len(msgs))
		}
		msgs = append(msgs, sm)
		ev, err := messages.Decode[messages.StepEvent](sm.Data())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Done {
			return msgs, ack.Sequence
		}
	}
}

// TestTraceIDs checks where an episode's trace id comes from — the request's field, else its
// traceparent header, else one the worker derives — and that every stored step carries it, in
// its body and its traceparent header, with a new span id per turn and the turn's timings.
func TestTraceIDs(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	const body, header = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
	for _, tc := range []struct {
		name, field, traceparent, want string
	}{
		{"field", body, messages.Traceparent(header, "00f067aa0ba902b7"), body},
		{"header", "", messages.Traceparent(header, "00f067aa0ba902b7"), header},
		{"derived", "", "", ""},
		{"bad-header", "", "00-xyz", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := episodeRequest("trace-"+tc.name, func(r *messages.EpisodeRequest) {
				r.TraceID, r.SubmitTime = tc.field, time.Now().UnixNano()
			})
			msgs, seq := f.runTraced(t, req, tc.traceparent)
			want := tc.want
			if want == "" {
				// Derived from the episode and its request's sequence: the same on every
				// delivery of that request.
				want = messages.TraceIDOf(req.RunID, req.EpisodeID, strconv.FormatUint(seq, 10))
			}
			spans := map[string]bool{}
			for i, m := range msgs {
				ev, err := messages.Decode[messages.StepEvent](m.Data())
				if err != nil {
					t.Fatal(err)
				}
				tid, sid, ok := messages.ParseTraceparent(m.Headers().Get(messages.HeaderTraceparent))
				if ev.TraceID != want || !ok || tid != want {
					t.Fatalf("turn %d: trace id %q, header %q; want %q", ev.Turn, ev.TraceID, m.Headers().Get(messages.HeaderTraceparent), want)
				}
				if spans[sid] {
					t.Fatalf("turn %d reuses span id %s", ev.Turn, sid)
				}
				spans[sid] = true
				if i == 0 && ev.Episode.TraceID != want {
					t.Fatalf("turn 0's request has trace id %q", ev.Episode.TraceID)
				}
				if ev.IsEndMarker() {
					continue
				}
				tm := ev.Timings
				if tm.Wall <= 0 || tm.Parts() > tm.Wall || tm.Generate <= 0 || tm.Step <= 0 || tm.Endpoint != "" {
					t.Fatalf("turn %d timings %+v", ev.Turn, tm)
				}
				if (ev.Turn == 0) != (tm.Publish == 0) || tm.Tokenize <= 0 {
					t.Fatalf("turn %d: tokenize %d, publish %d", ev.Turn, tm.Tokenize, tm.Publish)
				}
			}
		})
	}
}
