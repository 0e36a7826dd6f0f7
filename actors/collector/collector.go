// Package collector is the collector actor: it consumes StepEvents,
// assembles each episode into an OpenRLHF-ready Trajectory, checks the
// invariants before publishing (a violation becomes a Failure, never a bad
// trajectory), and assembles the n samples of a prompt into a Group. An
// episode survives a collector restart: its steps that an earlier collector
// acknowledged are read back from the steps stream.
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// ScoreRange is the dynamic-filtering window: a group is kept only when the
// mean of its scores lies strictly between Low and High.
type ScoreRange struct {
	Low, High float64
}

// Keeps reports whether a group with this mean score passes the filter.
func (r ScoreRange) Keeps(mean float64) bool { return r.Low < mean && mean < r.High }

// Options configures a Collector. Zero values take the defaults noted.
type Options struct {
	// Subjects names subjects and streams (default prefix "rf").
	Subjects messages.Subjects
	// Durable is the consumer name on the steps stream (default "collector").
	Durable string
	// PinnedTTL is how long a standby collector waits, after the active one
	// stopped pulling, before it takes over (default 10s).
	PinnedTTL time.Duration
	// Filter enables dynamic filtering of groups; nil keeps every complete group.
	Filter *ScoreRange
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	if o.Durable == "" {
		o.Durable = "collector"
	}
	if o.PinnedTTL <= 0 {
		o.PinnedTTL = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Stats are the collector's counters.
type Stats struct {
	Trajectories, Failures, Invariant, Malformed uint64
	// Groups counts groups whose n samples all ended; Kept those published,
	// Filtered those the score filter dropped, Incomplete those with a failed
	// member.
	Groups, GroupsKept, GroupsFiltered, GroupsIncomplete uint64
	// InFlight is the number of episodes being assembled.
	InFlight int
}

// PassRate is the share of complete groups that passed dynamic filtering.
func (s Stats) PassRate() float64 {
	if n := s.GroupsKept + s.GroupsFiltered; n > 0 {
		return float64(s.GroupsKept) / float64(n)
	}
	return 0
}

// Collector assembles trajectories. Create it with New and run it with Run.
type Collector struct {
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	// Only the consume goroutine touches these, except stats under mu.
	steps jetstream.Stream // set by Run before the first message
	// episodes holds the runs being assembled, by episode and attempt. A
	// redelivered episode usually has one live run, but a worker that lost
	// touch with the server for a while may finish its run after another
	// worker took the episode over: the first run to finish decides it.
	episodes map[string]map[int32]*partial
	finished *recent
	groups   map[string]*group

	mu      sync.Mutex
	stats   Stats
	counted *sync.Cond // on mu; broadcast whenever stats change
}

// New builds a collector.
func New(js jetstream.JetStream, opts Options) *Collector {
	opts.setDefaults()
	c := &Collector{
		js: js, opts: opts, log: opts.Logger.With("actor", "collector"),
		episodes: make(map[string]map[int32]*partial),
		finished: newRecent(1 << 18),
		groups:   make(map[string]*group),
	}
	c.counted = sync.NewCond(&c.mu)
	return c
}

// WaitGroups waits until at least n groups have ended (kept, filtered or
// incomplete) or ctx ends, and reports whether they had.
func (c *Collector) WaitGroups(ctx context.Context, n uint64) bool {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.counted.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.stats.Groups < n {
		if ctx.Err() != nil {
			return false
		}
		c.counted.Wait()
	}
	return true
}

// Stats returns a snapshot of the counters.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Collector) count(f func(*Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.stats.InFlight = len(c.episodes)
	c.counted.Broadcast()
	c.mu.Unlock()
}

// ConsumerConfig is the collector's durable consumer on the steps stream.
func ConsumerConfig(opts Options) jetstream.ConsumerConfig {
	opts.setDefaults()
	return jetstream.ConsumerConfig{
		Durable:       opts.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 8192,
		FilterSubject: opts.Subjects.StepsAll(),
		// An episode's steps must all reach one collector. Pinning makes any
		// further collector on the same durable a standby that takes over
		// when the active one stops pulling, instead of a second consumer
		// that would split episodes between the two.
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{pinGroup},
		PinnedTTL:      opts.PinnedTTL,
	}
}

// pinGroup is the priority group collectors pull in.
const pinGroup = "collector"

// Run consumes step events until ctx is cancelled. Outcomes being recorded
// then are still published before Run returns.
func (c *Collector) Run(ctx context.Context) error {
	steps, err := c.js.Stream(ctx, c.opts.Subjects.StreamSteps())
	if err != nil {
		return fmt.Errorf("collector: steps stream: %w", err)
	}
	cons, err := steps.CreateOrUpdateConsumer(ctx, ConsumerConfig(c.opts))
	if err != nil {
		return fmt.Errorf("collector: consumer: %w", err)
	}
	c.steps = steps
	// Handlers get their own context: the messages a shutdown drains still
	// have their outcomes published (each publish is bounded by bus.Publish)
	// instead of failing and coming back to a collector that lacks their
	// episodes' earlier steps.
	work := context.WithoutCancel(ctx)
	// Consume delivers serially on one goroutine: the episode maps need no lock.
	cc, err := cons.Consume(func(m jetstream.Msg) { c.handle(work, m) },
		jetstream.PullMaxMessages(1024), jetstream.PullPriorityGroup(pinGroup),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				c.log.Warn("consume", "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("collector: consume: %w", err)
	}
	c.log.Info("collector ready")
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	st := c.Stats()
	c.log.Info("collector stopped", "trajectories", st.Trajectories, "failures", st.Failures,
		"groups_kept", st.GroupsKept, "groups_filtered", st.GroupsFiltered, "in_flight", st.InFlight)
	return nil
}

func (c *Collector) handle(ctx context.Context, m jetstream.Msg) {
	ev, err := messages.Decode[messages.StepEvent](m.Data())
	if err != nil {
		c.malformed(ctx, m, err)
		return
	}
	if c.finished.has(ev.EpisodeID) {
		_ = m.Ack() // a redelivery of an episode already decided
		return
	}
	runs := c.episodes[ev.EpisodeID]
	p := runs[ev.Attempt]
	if p == nil {
		p = &partial{attempt: ev.Attempt, pending: map[int32]*messages.StepEvent{}}
		if ev.Turn > 0 {
			// A later turn of an episode this collector has not seen:
			// usually an earlier collector acknowledged the first steps and
			// stopped. The steps stream still holds them.
			decided, err := c.reload(ctx, m, ev.EpisodeID, p)
			if err != nil {
				c.settle(m, err, false)
				return
			}
			if decided {
				c.finished.add(ev.EpisodeID)
				_ = m.Ack()
				return
			}
		}
		if runs == nil {
			runs = make(map[int32]*partial, 1)
			c.episodes[ev.EpisodeID] = runs
		}
		runs[ev.Attempt] = p
		c.count(func(*Stats) {}) // refreshes InFlight
	}
	if ev.Error != "" && p.outcome == nil {
		// A run that failed decides at once: the turns it names before the
		// error may never have been stored.
		p.apply(ev)
		c.settle(m, c.finish(ctx, ev.EpisodeID, p), false)
		return
	}
	if ev.Turn < p.next && p.outcome == nil {
		_ = m.Ack() // duplicate of a turn already applied
		return
	}
	p.pending[ev.Turn] = ev
	for p.outcome == nil {
		next, ok := p.pending[p.next]
		if !ok {
			break
		}
		delete(p.pending, p.next)
		p.apply(next)
	}
	if p.outcome == nil {
		_ = m.Ack()
		return
	}
	c.settle(m, c.finish(ctx, ev.EpisodeID, p), false)
}

// malformed records a step event that cannot be decoded. Its subject still
// names its episode, which can then never be assembled: unless that episode
// was decided already, the record is the episode's one outcome, and the
// episode's other steps are dropped instead of waiting forever for the gap.
func (c *Collector) malformed(ctx context.Context, m jetstream.Msg, cause error) {
	c.log.Warn("malformed step event", "subject", m.Subject(), "err", cause)
	f := &messages.Failure{
		V: messages.Version, Kind: messages.FailureMalformed, Reason: cause.Error(),
		Subject: m.Subject(), Time: time.Now().UnixNano(), Payload: messages.FailurePayload(m.Data()),
	}
	id, err := messages.ParseToken(strings.TrimPrefix(m.Subject(), strings.TrimSuffix(c.opts.Subjects.StepsAll(), ">")))
	open := err == nil && !c.finished.has(id)
	var p *partial
	msgID := ""
	if open {
		for _, run := range c.episodes[id] {
			if run.req != nil {
				p = run
			}
		}
		f.EpisodeID, msgID = id, messages.TrajectoryMsgID(id)
		if p != nil {
			f.GroupID, f.Env = p.req.GroupID, p.req.Env
		}
	}
	if err := c.publish(ctx, c.opts.Subjects.Failures(messages.FailureMalformed), f, msgID); err != nil {
		c.settle(m, err, true)
		return
	}
	if open {
		delete(c.episodes, id)
		c.finished.add(id)
	}
	c.count(func(s *Stats) {
		s.Malformed++
		if open {
			s.Failures++
		}
	})
	if open && p != nil {
		c.addToGroup(ctx, p, nil)
	}
	c.settle(m, nil, true)
}

// reload queues into p the stored steps of episode id that precede m, so
// that an episode survives a collector restart. It reports whether one of
// them cannot be decoded: that step decided the episode when it was
// delivered (see malformed).
func (c *Collector) reload(ctx context.Context, m jetstream.Msg, id string, p *partial) (decided bool, err error) {
	meta, err := m.Metadata()
	if err != nil {
		return false, fmt.Errorf("reload episode %s: %w", id, err)
	}
	subject := c.opts.Subjects.Steps(id)
	// Later steps are left to their own delivery, so that each is handled
	// once, in order.
	for seq := uint64(1); seq < meta.Sequence.Stream; {
		raw, err := c.steps.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("reload episode %s: %w", id, err)
		}
		if raw.Sequence >= meta.Sequence.Stream {
			break
		}
		ev, err := messages.Decode[messages.StepEvent](raw.Data)
		if err != nil {
			return true, nil
		}
		if ev.Attempt == p.attempt {
			p.pending[ev.Turn] = ev
		}
		seq = raw.Sequence + 1
	}
	return false, nil
}

// settle acks a message whose effect is durable, or hands it back when
// recording that effect failed; term ends a message that can never succeed.
func (c *Collector) settle(m jetstream.Msg, err error, term bool) {
	switch {
	case err != nil:
		c.log.Error("recording outcome failed; will retry on redelivery", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
	case term:
		_ = m.Term()
	default:
		_ = m.Ack()
	}
}

// finish publishes an episode's outcome and feeds its group. On error the
// episode stays assembled, so the redelivered last step retries the publish.
func (c *Collector) finish(ctx context.Context, id string, p *partial) error {
	out := p.outcome
	if out.traj != nil {
		data, err := messages.Marshal(out.traj)
		if err == nil {
			err = c.publishRaw(ctx, c.opts.Subjects.Trajectories(out.traj.Env), data, messages.TrajectoryMsgID(id))
		}
		// Either limit makes the publish fail for good: the codec's, checked
		// while encoding, or the server's, checked before sending.
		if errors.Is(err, messages.ErrTooLarge) || errors.Is(err, bus.ErrTooLarge) {
			out.failure = p.failure(messages.FailureInvariant, fmt.Sprintf("trajectory too large to publish: %v", err))
			out.traj = nil
		} else if err != nil {
			return err
		}
	}
	if out.failure != nil {
		if err := c.publish(ctx, c.opts.Subjects.Failures(out.failure.Kind), out.failure, messages.TrajectoryMsgID(id)); err != nil {
			return err
		}
	}
	delete(c.episodes, id)
	c.finished.add(id)
	c.count(func(s *Stats) {
		if out.traj != nil {
			s.Trajectories++
			return
		}
		s.Failures++
		if out.failure.Kind == messages.FailureInvariant {
			s.Invariant++
		}
	})
	if out.failure != nil {
		c.log.Warn("episode failed", "episode", id, "kind", out.failure.Kind, "reason", out.failure.Reason)
	}
	c.addToGroup(ctx, p, out.traj)
	return nil
}

func (c *Collector) publish(ctx context.Context, subject string, v any, msgID string) error {
	data, err := messages.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return c.publishRaw(ctx, subject, data, msgID)
}

func (c *Collector) publishRaw(ctx context.Context, subject string, data []byte, msgID string) error {
	return bus.Publish(ctx, c.js, subject, data, msgID)
}

// group gathers the n samples of one prompt.
type group struct {
	size   int32
	env    string
	trajs  []messages.Trajectory
	failed int32
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
		g = &group{size: max(req.GroupSize, 1), env: req.Env}
		c.groups[req.GroupID] = g
	}
	if t != nil {
		g.trajs = append(g.trajs, *t)
	} else {
		g.failed++
	}
	if int32(len(g.trajs))+g.failed < g.size {
		return
	}
	delete(c.groups, req.GroupID)
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
	grp := &messages.Group{V: messages.Version, GroupID: req.GroupID, Env: g.env, MeanScore: mean, Trajectories: g.trajs}
	if err := c.publish(ctx, c.opts.Subjects.Groups(g.env), grp, req.GroupID); err != nil {
		c.log.Error("publish group", "group", req.GroupID, "err", err)
		return
	}
	c.count(func(s *Stats) { s.Groups++; s.GroupsKept++ })
}

// recent is a bounded set of recently finished episode ids, so redelivered
// steps of a decided episode are recognised without growing forever.
type recent struct {
	set  map[string]struct{}
	ring []string
	pos  int
}

func newRecent(n int) *recent {
	return &recent{set: make(map[string]struct{}), ring: make([]string, n)}
}

func (r *recent) has(id string) bool { _, ok := r.set[id]; return ok }

func (r *recent) add(id string) {
	if old := r.ring[r.pos]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.pos] = id
	r.set[id] = struct{}{}
	r.pos = (r.pos + 1) % len(r.ring)
}
