package env

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// A submission that does not decode or validate is recorded as a malformed
// failure of its run, with what of it can be read (the episode and group
// from the body, else the episode from its message id; the trace from the
// body or the header), so that a trainer reading its run's failures learns
// of it. One that names no run goes to the empty run's.
func TestMalformedRequestIsAttributed(t *testing.T) {
	f := newFixture(t, toyllm.Options{})
	const trace = "0af7651916cd43dd8448eb211c80319c"
	valid := episodeRequest("e-invalid", func(r *messages.EpisodeRequest) { r.RunID, r.TraceID, r.GroupSize = "run-m", trace, 0 })
	invalid, err := messages.Marshal(valid)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, subject string
		data          []byte
		header        nats.Header
		want          messages.Failure
	}{
		{"invalid body", f.subj.Episodes("run-m", valid.Env), invalid, nil,
			messages.Failure{RunID: "run-m", EpisodeID: "e-invalid", GroupID: "e-invalid", Env: valid.Env, TraceID: trace}},
		{"truncated body", f.subj.Episodes("run m", "math:x"), invalid[:len(invalid)/2], nil,
			messages.Failure{RunID: "run m", EpisodeID: "e-invalid", GroupID: "e-invalid", Env: "math:x"}}, // the trace id was cut
		{"not msgpack, message id and traceparent", f.subj.Episodes("run-m", "math:x"), []byte(`{"id": "json"}`),
			nats.Header{nats.MsgIdHdr: {messages.EpisodeMsgID("run-m", "e.json")}, messages.HeaderTraceparent: {messages.Traceparent(trace, messages.NewSpanID())}},
			messages.Failure{RunID: "run-m", EpisodeID: "e.json", Env: "math:x", TraceID: trace}},
		{"message id of another run", f.subj.Episodes("run-m", "math:x"), []byte{0xc1},
			nats.Header{nats.MsgIdHdr: {messages.EpisodeMsgID("run-o", "e")}},
			messages.Failure{RunID: "run-m", Env: "math:x"}},
		{"no run in the subject", "rf.episodes.only-one-token", []byte{0x81, 0xa3, 'r', 'i', 'd', 0xa3, 'r', '-', 'b'}, nil,
			messages.Failure{RunID: "r-b"}},
		{"nothing to read", "rf.episodes.a.b.c", []byte{0xc1}, nil, messages.Failure{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// One reader at a time may read a run's failures (a work queue).
			cons, err := f.js.CreateConsumer(ctx, f.subj.StreamFailures(), jetstream.ConsumerConfig{
				Durable: "test", FilterSubject: f.subj.Failures(c.want.RunID, messages.FailureMalformed), AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.js.DeleteConsumer(context.Background(), f.subj.StreamFailures(), "test") }()
			if _, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: c.subject, Data: c.data, Header: c.header}); err != nil {
				t.Fatal(err)
			}
			m, err := cons.Next(jetstream.FetchContext(ctx))
			if err == nil {
				err = m.DoubleAck(ctx)
			}
			if err != nil {
				t.Fatalf("no failure on %s: %v", f.subj.Failures(c.want.RunID, messages.FailureMalformed), err)
			}
			got, err := messages.Decode[messages.Failure](m.Data())
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != messages.FailureMalformed || got.Subject != c.subject || got.RunID != c.want.RunID ||
				got.EpisodeID != c.want.EpisodeID || got.GroupID != c.want.GroupID || got.Env != c.want.Env || got.TraceID != c.want.TraceID {
				t.Fatalf("failure %+v, want %+v", got, c.want)
			}
		})
	}
}
