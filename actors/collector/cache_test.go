package collector

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

func cachedStep(id string, turn int32, tokens int) stored {
	return stored{seq: uint64(turn + 1), ev: &messages.StepEvent{
		V: messages.Version, EpisodeID: id, Turn: turn, ActionTokens: make(messages.Tokens, tokens),
		ActionLogprobs: make(messages.Logprobs, tokens),
	}}
}

// TestCacheBounds: orphaned episodes cannot grow the cache past its bounds
// in episodes or bytes, and idle ones expire.
func TestCacheBounds(t *testing.T) {
	now := time.Unix(0, 0)
	t.Run("episodes", func(t *testing.T) {
		c := newCache(100, 1<<30)
		for i := range 1000 {
			c.add(runKey{attempt: 1}, cachedStep(fmt.Sprint(i), 0, 10), now)
		}
		if n, _, evicted := c.size(); n != 100 || evicted != 900 {
			t.Fatalf("%d cached, %d evicted; want 100 and 900", n, evicted)
		}
		if cached(c, "999") == nil || cached(c, "0") != nil {
			t.Fatal("not the least recently touched episodes were evicted")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c := newCache(1<<20, 1<<20)
		for i := range 1000 {
			c.add(runKey{attempt: 1}, cachedStep(fmt.Sprint(i), 0, 1000), now)
		}
		if _, bytes, _ := c.size(); bytes > 1<<20 {
			t.Fatalf("%d bytes cached, bound 1 MiB", bytes)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c := newCache(100, 1<<30)
		c.add(runKey{attempt: 1}, cachedStep("old", 0, 1), now)
		c.add(runKey{attempt: 1}, cachedStep("new", 0, 1), now.Add(time.Minute))
		if n := c.expire(now.Add(90*time.Second), time.Minute); n != 1 {
			t.Fatalf("expired %d, want 1", n)
		}
		if cached(c, "old") != nil || cached(c, "new") == nil {
			t.Fatal("expired the wrong episode")
		}
		c.drop("new")
		if n, bytes, _ := c.size(); n != 0 || bytes != 0 {
			t.Fatalf("%d episodes and %d bytes left after dropping all", n, bytes)
		}
	})
}

// TestGroupsBounded: groups that can never complete here (their other
// members were decided elsewhere) are dropped oldest first beyond MaxGroups.
func TestGroupsBounded(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	c := f.start(t, Options{MaxGroups: 4})
	for i := range 10 {
		// One member of a group of two: the other never comes.
		f.publish(t, oneTurn(request(fmt.Sprintf("gb-%d", i), fmt.Sprintf("g-%d", i), 0, 2), 1))
	}
	f.settled(t, "collector")
	if st := c.Stats(); st.Trajectories != 10 || st.GroupsEvicted != 6 {
		t.Fatalf("stats %+v, want 10 trajectories and 6 groups evicted", st)
	}
	// The newest groups are still held: their second members complete them.
	for i := 6; i < 10; i++ {
		f.publish(t, oneTurn(request(fmt.Sprintf("gb-%d-b", i), fmt.Sprintf("g-%d", i), 1, 2), 1))
	}
	f.settled(t, "collector")
	if st := c.Stats(); st.GroupsKept != 4 {
		t.Fatalf("stats %+v, want the 4 newest groups kept", st)
	}
}

// TestFullGroupsStreamHoldsTheGroup: a group the groups stream refuses
// (full, nobody reading) is retried until the stream takes it, never
// dropped after one attempt.
func TestFullGroupsStreamHoldsTheGroup(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.subj.StreamGroups())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs = 1
	if _, err := f.js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	// One group fills the stream; the second is refused until it has room.
	c := f.start(t, Options{})
	f.publish(t, oneTurn(request("fg-1", "fg-1", 0, 1), 1))
	f.settled(t, "collector")
	f.publish(t, oneTurn(request("fg-2", "fg-2", 0, 1), 1))
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if st := c.Stats(); st.Trajectories != 2 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if st := c.Stats(); !slices.Equal(st.FullStreams, []string{"group"}) {
			return fmt.Errorf("stats %+v: the groups stream not reported full", st)
		}
		return nil
	})
	if st := c.Stats(); st.GroupsKept != 1 {
		t.Fatalf("stats %+v: the second group was not held back", st)
	}
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		if st := c.Stats(); st.GroupsKept != 2 || len(st.FullStreams) != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if got := len(f.outputs(t).groups); got != 2 {
		t.Fatalf("%d groups stored, want 2", got)
	}
}

// cached is the cached first run of episode id (nil when none).
func cached(c *cache, id string) run {
	r, _ := c.runAndSeqs(id, runKey{attempt: 1})
	return r
}
