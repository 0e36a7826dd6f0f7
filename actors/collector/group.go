package collector

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// group gathers the n samples of one prompt.
type group struct {
	id     string
	size   int32
	env    string
	trajs  []messages.Trajectory
	failed int32
	bytes  int64
	elem   *list.Element // in Collector.groupOrder
}

// trajectoryBytes estimates the memory a trajectory held in a group takes.
func trajectoryBytes(t *messages.Trajectory) int64 {
	n := 512 + 8*int64(len(t.ObservationTokens)) + 8*int64(len(t.ActionRanges)) + 8*int64(len(t.StepRewards)) +
		int64(len(t.Prompt)+len(t.Label))
	for _, sm := range t.Samples {
		n += 64 + 8*int64(len(sm.ObservationTokens))
	}
	return n
}

// evictGroups drops the oldest unfinished groups while more than
// MaxGroups are held or they take more than GroupBytes. Their trajectories
// are all published; only the group record is lost, which happens when
// members were decided by another collector (a hand-over or a restart), so
// the group can never complete here.
func (c *Collector) evictGroups() {
	for c.groupOrder.Len() > 1 && (c.groupOrder.Len() > c.opts.MaxGroups || c.groupBytes > c.opts.GroupBytes) {
		g := c.groupOrder.Remove(c.groupOrder.Front()).(*group)
		delete(c.groups, g.id)
		c.groupBytes -= g.bytes
		c.count(func(s *Stats) { s.GroupsEvicted++ })
		if ok, n := c.groupWarn.Allow(time.Now()); ok {
			c.log.Warn("unfinished group dropped to bound memory; its trajectories are published", "group", g.id,
				"have", int32(len(g.trajs))+g.failed, "of", g.size, "unlogged", n)
		}
	}
}

func (c *Collector) dropGroup(g *group) {
	c.groupOrder.Remove(g.elem)
	delete(c.groups, g.id)
	c.groupBytes -= g.bytes
}

// addToGroup records an episode's outcome in its group and publishes the
// group once all n samples have ended.
func (c *Collector) addToGroup(ctx context.Context, p *partial, t *messages.Trajectory) {
	req := p.req
	if req == nil || req.GroupID == "" {
		return
	}
	g := c.groups[req.GroupID]
	if g == nil {
		g = &group{id: req.GroupID, size: max(req.GroupSize, 1), env: req.Env}
		g.elem = c.groupOrder.PushBack(g)
		c.groups[req.GroupID] = g
	}
	if t != nil {
		g.trajs = append(g.trajs, *t)
		n := trajectoryBytes(t)
		g.bytes += n
		c.groupBytes += n
	} else {
		g.failed++
	}
	if int32(len(g.trajs))+g.failed < g.size {
		c.evictGroups()
		return
	}
	c.dropGroup(g)
	if g.failed > 0 {
		c.count(func(s *Stats) { s.Groups++; s.GroupsIncomplete++ })
		return
	}
	var sum float64
	for i := range g.trajs {
		sum += g.trajs[i].Scores
	}
	mean := sum / float64(len(g.trajs))
	if f := c.opts.Filter; f != nil && !f.Keeps(mean) {
		c.count(func(s *Stats) { s.Groups++; s.GroupsFiltered++ })
		return
	}
	grp := &messages.Group{V: messages.Version, RunID: p.runID(), GroupID: req.GroupID, Env: g.env, MeanScore: mean, Trajectories: g.trajs}
	if err := c.publishGroup(ctx, grp); err != nil {
		c.log.Error("group not published", "group", req.GroupID, "err", err)
		return
	}
	c.count(func(s *Stats) { s.Groups++; s.GroupsKept++ })
}

// publishGroup publishes a complete group, retrying with growing delays
// (1 s to 30 s, one log line a minute) while the groups stream refuses it —
// full, with no consumer reading, say — rather than dropping it: the
// collector then stops taking steps, which holds the fleet back visibly
// instead of losing the group. It gives up only on a group too large to
// publish, or when the collector stops (groups live in its memory).
func (c *Collector) publishGroup(ctx context.Context, grp *messages.Group) error {
	delay := time.Second
	for {
		err := c.publish(ctx, c.opts.Subjects.Groups(grp.RunID, grp.Env), grp, messages.GroupMsgID(grp.RunID, grp.GroupID))
		if err == nil {
			c.full.stored(kindGroup)
		}
		if err == nil || errors.Is(err, bus.ErrTooLarge) || errors.Is(err, messages.ErrTooLarge) {
			return err
		}
		if !c.full.refused(kindGroup, err, delay) {
			if ok, n := c.groupWarn.Allow(time.Now()); ok {
				c.log.Warn("groups stream refuses a group (full, with no consumer reading?); retrying", "group", grp.GroupID, "retry_in", delay, "err", err, "unlogged", n)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.halt:
			t.Stop()
			return fmt.Errorf("collector stopping: %w", err)
		}
		delay = min(2*delay, 30*time.Second)
	}
}
