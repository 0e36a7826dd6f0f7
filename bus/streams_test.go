package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// A full stream refuses new messages with ErrStreamFull, which the
// publisher sees at once, and keeps what it stored: overload is never
// silent loss. An output stream is a work queue, so a reader that
// acknowledges a record makes room again.
func TestFullStreamRefusesNewMessages(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{MaxBytes: 8 << 10, StepsMaxBytes: 8 << 10}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1024)
	stored := 0
	var err error
	for i := range 64 {
		if err = bus.Publish(ctx, js, subj.Trajectories("run-1", "game"), data, strings.Repeat("x", i+1)); err != nil {
			break
		}
		stored++
	}
	if !errors.Is(err, bus.ErrStreamFull) {
		t.Fatalf("publishing into a full stream: %v after %d messages, want ErrStreamFull", err, stored)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "maximum bytes") {
		t.Errorf("ErrStreamFull does not wrap the server's refusal: %v", err)
	}
	st, err := js.Stream(ctx, subj.StreamTrajectories())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(info.State.Msgs) != stored || stored == 0 {
		t.Fatalf("stream holds %d messages, %d were acknowledged", info.State.Msgs, stored)
	}
	// Refused again, whatever the subject, until a reader takes a record.
	if err := bus.Publish(ctx, js, subj.Trajectories("run-2", "other"), data, "y"); !errors.Is(err, bus.ErrStreamFull) {
		t.Fatalf("publish into the full stream on another run's subject: %v, want ErrStreamFull", err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj.TrajectoriesOfRun("run-1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, js, subj.Trajectories("run-2", "other"), data, "y"); err != nil {
		t.Fatalf("publish after a reader took a record: %v", err)
	}
	if info, err = st.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if int(info.State.Msgs) != stored {
		t.Fatalf("stream holds %d messages after one was taken and one added, want %d", info.State.Msgs, stored)
	}

	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		// Decisions may age out oldest first (see StreamOptions.DecidedMaxAge),
		// and the control stream keeps the last policy states.
		discard := jetstream.DiscardNew
		if cfg.Name == subj.StreamDecided() || cfg.Name == subj.StreamControl() {
			discard = jetstream.DiscardOld
		}
		if cfg.Discard != discard || cfg.MaxBytes <= 0 || cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s: discard %v, max bytes %d, storage %v", cfg.Name, cfg.Discard, cfg.MaxBytes, cfg.Storage)
		}
	}
}

// A stream full by its message count, overall or on one subject, is
// ErrStreamFull too.
func TestPublishStreamFullByMessages(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "TINY", Subjects: []string{"tiny.>"}, Retention: jetstream.WorkQueuePolicy,
		Discard: jetstream.DiscardNew, MaxMsgs: 2,
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := bus.Publish(ctx, js, fmt.Sprintf("tiny.%d", i), []byte("x"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.Publish(ctx, js, "tiny.2", []byte("x"), ""); !errors.Is(err, bus.ErrStreamFull) {
		t.Fatalf("publish into a stream at its message limit: %v, want ErrStreamFull", err)
	}
	// Per subject as well.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "PERSUBJECT", Subjects: []string{"per.>"}, Discard: jetstream.DiscardNew,
		DiscardNewPerSubject: true, MaxMsgsPerSubject: 1, MaxMsgs: 100,
	}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, js, "per.a", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, js, "per.a", []byte("x"), ""); !errors.Is(err, bus.ErrStreamFull) {
		t.Fatalf("publish onto a subject at its limit: %v, want ErrStreamFull", err)
	}
	if err := bus.Publish(ctx, js, "per.b", []byte("x"), ""); err != nil {
		t.Fatalf("publish onto another subject: %v", err)
	}
}

// Streams made with another retention (by an older rollfleet, whose output
// streams kept every record) are reported, not changed: JetStream cannot
// change a stream's retention.
func TestEnsureStreamsRetentionMismatch(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	var old jetstream.StreamConfig
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		if cfg.Name == subj.StreamTrajectories() {
			old = cfg
		}
	}
	if old.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("%s: retention %v, want a work queue", old.Name, old.Retention)
	}
	old.Retention = jetstream.LimitsPolicy
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{})
	if !errors.Is(err, bus.ErrStreamMismatch) {
		t.Fatalf("EnsureStreams over a limits %s: %v, want ErrStreamMismatch", old.Name, err)
	}
	if !strings.Contains(err.Error(), old.Name) || !strings.Contains(err.Error(), "retention") {
		t.Errorf("error %q does not name the stream and its retention", err)
	}
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		st, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		want := cfg.Retention
		if cfg.Name == old.Name {
			want = jetstream.LimitsPolicy // left as it was
		}
		if got := st.CachedInfo().Config.Retention; got != want {
			t.Errorf("%s: retention %v, want %v", cfg.Name, got, want)
		}
	}
	// Only that stream is reported; with it recreated, nothing is.
	if n := strings.Count(err.Error(), "retention"); n != 1 {
		t.Errorf("%d retention mismatches reported, want 1: %v", n, err)
	}
	if err := js.DeleteStream(ctx, old.Name); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatalf("EnsureStreams after the stream was removed: %v", err)
	}
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatalf("EnsureStreams again: %v", err)
	}
}

// TestEnsureStreamsAllowsDirect: the work queues (episodes and the three
// outputs) allow direct gets, which "nats stream view" needs to page a work
// queue, and EnsureStreams turns them on in a queue made without them,
// changing nothing else.
func TestEnsureStreamsAllowsDirect(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	direct := map[string]bool{
		subj.StreamEpisodes(): true, subj.StreamControl(): true,
		subj.StreamTrajectories(): true, subj.StreamGroups(): true, subj.StreamFailures(): true,
	}
	var old jetstream.StreamConfig
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{Batches: true}) {
		if cfg.AllowDirect != direct[cfg.Name] {
			t.Errorf("%s: allow_direct %v, want %v", cfg.Name, cfg.AllowDirect, direct[cfg.Name])
		}
		if cfg.Name == subj.StreamEpisodes() {
			old = cfg
		}
	}
	old.AllowDirect = false
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subj.Episodes("r", "e"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatalf("EnsureStreams over %s without direct gets: %v", old.Name, err)
	}
	st, err := js.Stream(ctx, old.Name)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if !info.Config.AllowDirect || info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.MaxBytes != old.MaxBytes || info.State.Msgs != 1 {
		t.Errorf("%s after EnsureStreams: allow_direct %v, retention %v, max bytes %d, %d messages; want direct gets, the rest as it was",
			old.Name, info.Config.AllowDirect, info.Config.Retention, info.Config.MaxBytes, info.State.Msgs)
	}
	if m, err := st.GetMsg(ctx, 1); err != nil || string(m.Data) != "kept" {
		t.Errorf("direct get of message 1: %v %v", m, err)
	}
}

// The output streams are work queues (a record is freed once its reader
// acknowledges it); the steps, decisions, control and batches streams keep
// their limits. The batches stream is the trainers' alone: only they ask
// for it.
func TestStreamRetention(t *testing.T) {
	subj := messages.NewSubjects("")
	want := map[string]jetstream.RetentionPolicy{
		subj.StreamEpisodes():     jetstream.WorkQueuePolicy,
		subj.StreamSteps():        jetstream.LimitsPolicy,
		subj.StreamDecided():      jetstream.LimitsPolicy,
		subj.StreamTrajectories(): jetstream.WorkQueuePolicy,
		subj.StreamGroups():       jetstream.WorkQueuePolicy,
		subj.StreamFailures():     jetstream.WorkQueuePolicy,
		subj.StreamControl():      jetstream.LimitsPolicy,
		subj.StreamBatches():      jetstream.LimitsPolicy,
	}
	cfgs := bus.StreamConfigs(subj, bus.StreamOptions{Batches: true})
	if len(cfgs) != len(want) {
		t.Fatalf("%d streams, want %d", len(cfgs), len(want))
	}
	for _, cfg := range cfgs {
		if r, ok := want[cfg.Name]; !ok || cfg.Retention != r {
			t.Errorf("%s: retention %v, want %v", cfg.Name, cfg.Retention, r)
		}
		if cfg.Name == subj.StreamBatches() && (cfg.MaxMsgsPerSubject != 1 || cfg.MaxAge != 7*24*time.Hour || cfg.Subjects[0] != "rf.batches.>") {
			t.Errorf("%s: %d messages per subject, max age %v, subjects %v; want 1, 7 days, rf.batches.>", cfg.Name, cfg.MaxMsgsPerSubject, cfg.MaxAge, cfg.Subjects)
		}
	}
}

func TestBatchesStreamOnlyForTrainers(t *testing.T) {
	subj := messages.NewSubjects("")
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		if cfg.Name == subj.StreamBatches() {
			t.Fatalf("%s made without StreamOptions.Batches", cfg.Name)
		}
	}
}

// CompactIfEmpty purges only an emptied stream, once per sequence, and a
// message stored after it is kept.
func TestCompactIfEmpty(t *testing.T) {
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "test")
	subj := messages.NewSubjects("")
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, subj.StreamSteps())
	if err != nil {
		t.Fatal(err)
	}
	if last, err := bus.CompactIfEmpty(ctx, st, 0); err != nil || last != 0 {
		t.Fatalf("a stream that never stored anything: %d, %v; want 0", last, err)
	}
	for i := range 3 {
		if err := bus.Publish(ctx, js, subj.Steps("run-1", "g", "e1"), []byte("step"), fmt.Sprint("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := bus.CompactIfEmpty(ctx, st, 0); err != nil || last != 0 {
		t.Fatalf("a stream holding 3 messages: %d, %v; want it left alone", last, err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	last, err := bus.CompactIfEmpty(ctx, st, 0)
	if err != nil || last != 3 {
		t.Fatalf("the emptied stream: %d, %v; want 3", last, err)
	}
	if err := bus.Publish(ctx, js, subj.Steps("run-1", "g", "e2"), []byte("kept"), "s3"); err != nil {
		t.Fatal(err)
	}
	if again, err := bus.CompactIfEmpty(ctx, st, last); err != nil || again != last {
		t.Fatalf("a stream holding a new message: %d, %v; want %d", again, err, last)
	}
	raw, err := st.GetMsg(ctx, 4)
	if err != nil || string(raw.Data) != "kept" {
		t.Fatalf("the message stored after the compaction: %v, %v", raw, err)
	}
}
