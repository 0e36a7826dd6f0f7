package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
)

// follower is a watcher with the log it keeps: every state it applied.
type follower struct {
	w   *control.Watcher
	log *bustest.LogRecorder
}

// storeFleet starts a server with rollfleet's streams and returns it, a
// JetStream context of its own and n watchers on connections of their own.
// The watchers never resync: they learn of announcements by their
// subscription alone.
func storeFleet(t *testing.T, n int) (jetstream.JetStream, []follower, func(name string) *nats.Conn) {
	t.Helper()
	s := bustest.RunServer(t)
	js := bustest.JetStream(t, s, "raw")
	if err := bus.EnsureStreams(t.Context(), js, messages.NewSubjects(""), bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	var fs []follower
	for i := range n {
		fs = append(fs, watchStored(t, bustest.Connect(t, s, fmt.Sprintf("worker-%d", i))))
	}
	return js, fs, func(name string) *nats.Conn { return bustest.Connect(t, s, name) }
}

// watchStored starts a watcher on nc that keeps its log.
func watchStored(t *testing.T, nc *nats.Conn) follower {
	t.Helper()
	rec := &bustest.LogRecorder{Min: slog.LevelDebug}
	w, err := control.Watch(t.Context(), nc, control.WatchOptions{Resync: time.Hour, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return follower{w, rec}
}

// publishState stores st on the control subject with raw nats.go, as a
// trainer written from the docs would, with the given headers.
func publishState(ctx context.Context, js jetstream.JetStream, st messages.PolicyState, hdr nats.Header) (*jetstream.PubAck, error) {
	st.V = messages.Version
	data, err := messages.Marshal(&st)
	if err != nil {
		return nil, err
	}
	return js.PublishMsg(ctx, &nats.Msg{Subject: messages.NewSubjects("").Control(), Data: data, Header: hdr})
}

// lastSeq is the control subject's last stream sequence.
func lastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), messages.NewSubjects("").StreamControl())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), messages.NewSubjects("").Control())
	if err != nil {
		t.Fatal(err)
	}
	return m.Sequence
}

// onState waits until every follower applies want.
func onState(t *testing.T, fs []follower, want messages.PolicyState) {
	t.Helper()
	bustest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		on := 0
		for _, f := range fs {
			if f.w.State() == want {
				on++
			}
		}
		if on != len(fs) {
			return fmt.Errorf("%d of %d workers on the stored state %+v (worker 0 on %+v)", on, len(fs), want, fs[0].w.State())
		}
		return nil
	})
}

var appliedLine = regexp.MustCompile(`^DEBUG policy state applied seq=(\d+) .* time_ns=(-?\d+)$`)

// appliedOnlyStored checks that every state a follower applied is the
// state the stream stored at the sequence it names.
func appliedOnlyStored(t *testing.T, js jetstream.JetStream, fs []follower) {
	t.Helper()
	subj := messages.NewSubjects("")
	stored := map[uint64]int64{}
	for _, m := range bustest.StoredMessages(t, js, subj.StreamControl(), subj.Control()) {
		st, err := messages.Decode[messages.PolicyState](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		stored[m.Sequence] = st.Time
	}
	bad, n := 0, 0
	for i, f := range fs {
		for _, line := range f.log.Lines() {
			m := appliedLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n++
			seq, _ := strconv.ParseUint(m[1], 10, 64)
			at, _ := strconv.ParseInt(m[2], 10, 64)
			if ts, ok := stored[seq]; !ok || ts != at {
				bad++
				t.Errorf("worker %d applied a state not stored: %s", i, line)
			}
		}
	}
	t.Logf("%d states applied, %d not stored, over %d workers", n, bad, len(fs))
}

// Announcements the stream refuses reach the subject's subscribers, but no
// worker applies them, and the next stored one is applied by all.
func TestWatchersApplyOnlyStoredStates(t *testing.T) {
	js, fs, connect := storeFleet(t, 5)
	ctx := t.Context()
	c, err := control.NewClient(connect("trainer"), messages.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	version := int64(1)
	st, err := c.Resume(ctx, version)
	if err != nil {
		t.Fatal(err)
	}
	onState(t, fs, st)

	expect := func(seq uint64) nats.Header {
		return nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(seq, 10)}}
	}
	// Each publishes an announcement the stream refuses (an error, or an
	// acknowledgement of a duplicate), given the state and last sequence.
	cases := []struct {
		name   string
		refuse func(t *testing.T, cur messages.PolicyState, seq uint64) (*jetstream.PubAck, error)
	}{
		{"wrong expected last sequence", func(_ *testing.T, cur messages.PolicyState, seq uint64) (*jetstream.PubAck, error) {
			return publishState(ctx, js, messages.PolicyState{Epoch: cur.Epoch + 1, Version: 99}, expect(seq+7))
		}},
		{"expected-empty subject", func(_ *testing.T, cur messages.PolicyState, _ uint64) (*jetstream.PubAck, error) {
			return publishState(ctx, js, messages.PolicyState{Epoch: cur.Epoch + 1, Version: 98}, expect(0))
		}},
		{"refused pause", func(_ *testing.T, cur messages.PolicyState, seq uint64) (*jetstream.PubAck, error) {
			return publishState(ctx, js, messages.PolicyState{Epoch: cur.Epoch + 1, Version: cur.Version, Paused: true, OnPause: messages.OnPauseAbort}, expect(seq-1))
		}},
		{"far-future epoch", func(_ *testing.T, _ messages.PolicyState, seq uint64) (*jetstream.PubAck, error) {
			return publishState(ctx, js, messages.PolicyState{Epoch: 1 << 40, Version: 97}, expect(seq+1))
		}},
		{"reused message id", func(t *testing.T, cur messages.PolicyState, seq uint64) (*jetstream.PubAck, error) {
			// The first is stored; the second, under its id, is dropped
			// as a duplicate, though acknowledged.
			id := nats.Header{jetstream.MsgIDHeader: {"announcement-" + strconv.FormatUint(seq, 10)}}
			first := messages.PolicyState{Epoch: cur.Epoch + 1, Version: cur.Version, Time: time.Now().UnixNano()}
			if _, err := publishState(ctx, js, first, id); err != nil {
				t.Fatalf("first announcement under the id: %v", err)
			}
			return publishState(ctx, js, messages.PolicyState{Epoch: cur.Epoch + 2, Version: 96, Paused: true}, id)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur, err := c.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ack, err := tc.refuse(t, cur, lastSeq(t, js)); err == nil && !ack.Duplicate {
				t.Fatalf("the stream stored the announcement at %d", ack.Sequence)
			}
			// The next announcement is stored, and applied by every worker.
			version++
			st, err := c.Resume(ctx, version)
			if err != nil {
				t.Fatal(err)
			}
			onState(t, fs, st)
		})
	}
	appliedOnlyStored(t, js, fs)
}

// A stored state with a lower version than an earlier one is refused by
// every worker, by one started after it too, and by the client.
func TestVersionsNeverMoveBackwards(t *testing.T) {
	js, fs, connect := storeFleet(t, 4)
	ctx := t.Context()
	c, err := control.NewClient(connect("trainer"), messages.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Resume(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	onState(t, fs, st)
	// Correctly sequenced, so stored.
	ack, err := publishState(ctx, js, messages.PolicyState{Epoch: st.Epoch + 1, Version: 2},
		nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(lastSeq(t, js), 10)}})
	if err != nil {
		t.Fatal(err)
	}
	refused := fmt.Sprintf("WARN policy state refused: its version is lower than the one applied, and versions never decrease seq=%d ", ack.Sequence)
	bustest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		for i, f := range fs {
			if !hasPrefixLine(f.log.Lines(), refused) {
				return fmt.Errorf("worker %d has not refused version 2 (state %+v)", i, f.w.State())
			}
		}
		return nil
	})
	late := watchStored(t, connect("late"))
	for i, f := range append(fs, late) {
		if got := f.w.State(); got != st {
			t.Errorf("worker %d on %+v, want %+v", i, got, st)
		}
	}
	if got, err := c.State(ctx); err != nil || got != st {
		t.Fatalf("client's state %+v (%v), want %+v", got, err, st)
	}
	if _, err := c.Resume(ctx, 4); !errors.Is(err, control.ErrVersionBackwards) {
		t.Fatalf("resume to 4 after 5: %v, want ErrVersionBackwards", err)
	}
	paused, err := c.Pause(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if paused.Version != 5 || paused.Epoch != st.Epoch+2 {
		t.Fatalf("pause announced %+v, want version 5 at epoch %d", paused, st.Epoch+2)
	}
	onState(t, append(fs, late), paused)
	appliedOnlyStored(t, js, append(fs, late))
}

// hasPrefixLine reports whether a line of lines starts with prefix.
func hasPrefixLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// Two trainers on connections of their own announce at once: each loses
// some races, whose announcements the stream refuses. Every worker ends on
// the stored state and never applied one it did not store.
func TestRacingTrainersEndOnTheStoredState(t *testing.T) {
	js, fs, connect := storeFleet(t, 4)
	ctx := t.Context()
	seen := sample(t, fs)
	const rounds = 25 // 50 announcements at most: the stream keeps 64
	var stored atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		c, err := control.NewClient(connect(fmt.Sprintf("trainer-%d", i)), messages.Subjects{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for r := range rounds {
				_, err := c.Resume(ctx, int64(r))
				switch {
				case err == nil:
					stored.Add(1)
				case !errors.Is(err, control.ErrVersionBackwards):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, err := control.NewClient(connect("reader"), messages.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := lastSeq(t, js); st.Epoch != n || n != stored.Load() {
		t.Fatalf("state %+v after %d stored announcements, %d made", st, n, stored.Load())
	}
	onState(t, fs, st)
	appliedOnlyStored(t, js, fs)
	storedStates := map[messages.PolicyState]bool{}
	for _, m := range bustest.StoredMessages(t, js, messages.NewSubjects("").StreamControl(), "") {
		st, err := messages.Decode[messages.PolicyState](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		storedStates[*st] = true
	}
	for i, states := range seen() {
		for _, st := range states {
			if st.Epoch > 0 && !storedStates[st] {
				t.Errorf("worker %d was on %+v, which the stream did not store", i, st)
			}
		}
	}
}

// sample records the state of each follower after each change, until the
// test ends; the function returned stops and returns what it recorded.
func sample(t *testing.T, fs []follower) func() [][]messages.PolicyState {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	seen := make([][]messages.PolicyState, len(fs))
	for i, f := range fs {
		wg.Go(func() {
			for {
				ch := f.w.Changed()
				seen[i] = append(seen[i], f.w.State())
				select {
				case <-ch:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() [][]messages.PolicyState {
		cancel()
		wg.Wait()
		return seen
	}
}

// TestResetControlStream: an operator who purges the control stream, or
// deletes and makes it anew, resets the fleet's policy: the next stored
// state is applied by every worker and read by every client whatever its
// version, where a lower version would be refused while the higher one is
// still stored.
func TestResetControlStream(t *testing.T) {
	for _, reset := range []string{"purge", "recreate"} {
		t.Run(reset, func(t *testing.T) {
			js, fs, connect := storeFleet(t, 3)
			ctx := t.Context()
			subj := messages.NewSubjects("")
			c, err := control.NewClient(connect("trainer"), subj)
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Resume(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if st, err = c.Pause(ctx, ""); err != nil {
				t.Fatal(err)
			}
			onState(t, fs, st)
			switch reset {
			case "purge":
				s, err := js.Stream(ctx, subj.StreamControl())
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Purge(ctx); err != nil {
					t.Fatal(err)
				}
			case "recreate":
				if err := js.DeleteStream(ctx, subj.StreamControl()); err != nil {
					t.Fatal(err)
				}
				if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			fresh, err := control.NewClient(connect("next-trainer"), subj)
			if err != nil {
				t.Fatal(err)
			}
			next, err := fresh.Resume(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			onState(t, fs, next)
			for name, cl := range map[string]*control.Client{"the first client": c, "a fresh client": fresh} {
				if got, err := cl.State(ctx); err != nil || got != next {
					t.Errorf("%s reads %+v (%v), want %+v", name, got, err, next)
				}
			}
		})
	}
}
