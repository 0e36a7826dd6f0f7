package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		ok   bool
	}{
		{"0/1", Shard{0, 1}, true},
		{"3/4", Shard{3, 4}, true},
		{"15/16", Shard{15, 16}, true},
		{"4/4", Shard{}, false},
		{"1/3", Shard{}, false},
		{"0/32", Shard{}, false},
		{"-1/4", Shard{}, false},
		{"0/0", Shard{}, false},
		{"1", Shard{}, false},
		{"a/b", Shard{}, false},
		{"", Shard{}, false},
	} {
		got, err := ParseShard(tc.in)
		if tc.ok != (err == nil) || tc.ok && got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.ok && !errors.Is(err, ErrBadShard) {
			t.Errorf("ParseShard(%q): %v is not ErrBadShard", tc.in, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("ParseShard(%q).String() = %q", tc.in, got.String())
		}
	}
}

// The shards of a count split the steps: each episode's in exactly one.
func TestShardFilters(t *testing.T) {
	subj := messages.NewSubjects("")
	if got := (Shard{}).filter(subj); got != subj.StepsAll() {
		t.Errorf("whole stream: %q", got)
	}
	if got := (Shard{}).Consumer("collector"); got != "collector" {
		t.Errorf("whole stream's consumer %q", got)
	}
	if got := (Shard{Index: 2, Count: 8}).Consumer("collector"); got != "collector-2of8" {
		t.Errorf("shard 2/8's consumer %q", got)
	}
	for count := 1; count <= messages.MaxStepShards; count *= 2 {
		for g := range 200 {
			group := fmt.Sprintf("g%d", g)
			subject := subj.Steps("run", group, group+"-0")
			var in []int
			for i := range count {
				if server.SubjectMatchesFilter(subject, Shard{Index: i, Count: count}.filter(subj)) {
					in = append(in, i)
				}
			}
			if len(in) != 1 || in[0] != messages.StepSlot(group)%count {
				t.Fatalf("%d shards: %s in shards %v", count, subject, in)
			}
		}
	}
}

// Four collectors, each on a shard of four, assemble every group whole:
// each sees all the steps of the groups in its slots and no other.
func TestShardedCollectors(t *testing.T) {
	const groups, size, shards = 48, 3, 4
	f := newFixture(t, bus.ServerOptions{})
	var colls []*running
	for i := range shards {
		colls = append(colls, f.start(t, Options{Shard: Shard{Index: i, Count: shards}}))
	}
	wantGroups := make([]uint64, shards)
	for g := range groups {
		group := fmt.Sprintf("shard-g%02d", g)
		wantGroups[messages.StepSlot(group)%shards]++
		for i := range size {
			req := request(fmt.Sprintf("%s-%d", group, i), group, int32(i), size)
			first := oneTurn(req, 0)
			first.Done = false
			last := oneTurn(req, float64(i)/2)
			last.Turn, last.Episode, last.PromptTokens = 1, nil, nil
			f.publish(t, first, last)
		}
	}
	bustest.CheckFor(t, waitTimeout, 10*time.Millisecond, func() error {
		var trajs, kept uint64
		for _, c := range colls {
			st := c.Stats()
			trajs, kept = trajs+st.Trajectories, kept+st.GroupsKept
		}
		if trajs != groups*size || kept != groups {
			return fmt.Errorf("%d trajectories and %d groups, want %d and %d", trajs, kept, groups*size, groups)
		}
		return nil
	})
	for i, c := range colls {
		st := c.Stats()
		// Every step of its episodes came to it: nothing read back, nothing
		// purged, every step deleted by sequence.
		if st.GroupsKept != wantGroups[i] || st.Trajectories != wantGroups[i]*size || st.Reloaded != 0 ||
			st.Failures != 0 || st.Purges != 0 || st.GroupsEvicted != 0 {
			t.Errorf("shard %d/%d: %+v, want %d groups", i, shards, st, wantGroups[i])
		}
		if _, err := f.js.Consumer(context.Background(), f.subj.StreamSteps(), fmt.Sprintf("collector-%dof%d", i, shards)); err != nil {
			t.Errorf("shard %d's consumer: %v", i, err)
		}
	}
	out := f.outputs(t)
	if len(out.groups) != groups || len(out.trajs) != groups*size || len(out.failures) != 0 {
		t.Fatalf("%d groups, %d trajectories, failures %s", len(out.groups), len(out.trajs), describe(out.failures))
	}
	for _, g := range out.groups {
		if len(g.Trajectories) != size {
			t.Errorf("group %s has %d trajectories", g.GroupID, len(g.Trajectories))
		}
	}
}

// A step stored outside its group's slot would reach the wrong shard: it
// is malformed, and its episode's one outcome is that failure.
func TestStepOutsideItsGroupsSlot(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	f.start(t, Options{})
	req := request("astray", "astray-group", 0, 1)
	data, err := messages.Marshal(oneTurn(req, 1))
	if err != nil {
		t.Fatal(err)
	}
	other := "other-group"
	for i := 0; messages.StepSlot(other) == messages.StepSlot(req.GroupID); i++ {
		other = fmt.Sprintf("other-group-%d", i)
	}
	f.publishRaw(t, f.subj.Steps(req.RunID, other, req.EpisodeID), data)
	f.settled(t, "collector")
	fail := f.outputs(t).onlyFailure(t)
	if fail.Kind != messages.FailureMalformed || fail.EpisodeID != "astray" || !strings.Contains(fail.Reason, "not in the group's slot") {
		t.Errorf("failure %+v", fail)
	}
}

func TestRunRefusesBadShard(t *testing.T) {
	f := newFixture(t, bus.ServerOptions{})
	c := New(bustest.JetStream(t, f.srv, "collector"), Options{Shard: Shard{Index: 3, Count: 3}})
	if err := c.Run(context.Background()); !errors.Is(err, ErrBadShard) {
		t.Errorf("Run: %v, want ErrBadShard", err)
	}
}

// A malformed message on the subject of another shard decides an episode
// whose honest steps are in this one: this shard's collector then deletes
// those steps as a decided episode's, and the message itself goes too;
// also when the collector that ends the episode is a successor that holds
// none of its earlier steps (it finds the decision instead of losing the
// claim).
func TestMalformedInAnotherShard(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { testMalformedInAnotherShard(t, restart) })
	}
}

func testMalformedInAnotherShard(t *testing.T, restart bool) {
	f := newFixture(t, bus.ServerOptions{})
	var colls []*running
	for i := range 2 {
		colls = append(colls, f.start(t, Options{Shard: Shard{Index: i, Count: 2}}))
	}
	req := request("split", "split-group", 0, 1)
	other := "other-group"
	for i := 0; messages.StepSlot(other)%2 == messages.StepSlot(req.GroupID)%2; i++ {
		other = fmt.Sprintf("other-group-%d", i)
	}
	first := oneTurn(req, 0)
	first.Done = false
	last := oneTurn(req, 1)
	last.Turn, last.Episode, last.PromptTokens = 1, nil, nil
	f.publish(t, first)
	if restart {
		home := messages.StepSlot(req.GroupID) % 2
		f.settled(t, Shard{Index: home, Count: 2}.Consumer("collector"))
		colls[home].stop()
		colls[home] = f.start(t, Options{Shard: Shard{Index: home, Count: 2}})
	}
	f.publishRaw(t, f.subj.Steps(req.RunID, other, req.EpisodeID), []byte("garbage"))
	malformed := func() uint64 { return colls[0].Stats().Malformed + colls[1].Stats().Malformed }
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		if n := malformed(); n != 1 {
			return fmt.Errorf("%d malformed", n)
		}
		return nil
	})
	f.publish(t, last)
	// A second malformed message of the decided episode is recorded alone.
	f.publishRaw(t, f.subj.Steps(req.RunID, other, req.EpisodeID), []byte("more garbage"))
	bustest.CheckFor(t, waitTimeout, 5*time.Millisecond, func() error {
		st, err := f.js.Stream(context.Background(), f.subj.StreamSteps())
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 0 || malformed() != 2 {
			return fmt.Errorf("%d steps stored, %d malformed", n, malformed())
		}
		return nil
	})
	out := f.outputs(t)
	if len(out.trajs) != 0 || len(out.failures) != 2 || out.failures[0].EpisodeID != "split" || out.failures[1].EpisodeID != "" {
		t.Errorf("%d trajectories, failures %s", len(out.trajs), describe(out.failures))
	}
}
