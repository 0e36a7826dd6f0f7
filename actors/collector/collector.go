// Package collector is the collector actor: it consumes StepEvents,
// assembles each episode into an OpenRLHF-ready Trajectory, checks the
// invariants before publishing (a violation becomes a Failure, never a bad
// trajectory), and assembles the n samples of a prompt into a Group. An
// episode survives a collector restart: its steps that an earlier collector
// acknowledged are read back from the steps stream.
package collector

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/lograte"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
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
	// Durable is the consumer name on the steps stream (default "collector"); a collector of a
	// shard of several uses Durable-<index>of<count> (see Shard.Consumer).
	Durable string
	// Shard is the part of the steps stream this collector assembles; the zero value is all
	// of it. Every shard of a count needs a collector of its own (and may have hot standbys,
	// which run with the same shard).
	Shard Shard
	// PinnedTTL is how long a standby collector waits, after the active one
	// stopped pulling, before it takes over (default 10s).
	PinnedTTL time.Duration
	// Filter enables dynamic filtering of groups; nil keeps every complete group.
	Filter *ScoreRange
	// MaxAttempts is the highest attempt number a step may carry (default
	// messages.MaxAttempts, 16). An env worker numbers its runs of an
	// episode by delivery and gives up after its --max-deliver (default 5),
	// so no honest step has a higher one; such steps are ignored, never
	// assembled. Env workers ignore them too.
	MaxAttempts int32
	// CacheEpisodes and CacheBytes bound the steps held in memory for
	// episodes being assembled (defaults 65,536 episodes and 256 MiB). An
	// episode evicted from the cache is read back from the steps stream
	// when it ends, so the bounds trade memory for reads, never for data.
	CacheEpisodes int
	CacheBytes    int64
	// IdleTimeout evicts an episode whose steps stopped arriving for this
	// long (default 5m): usually one that another collector decided or a
	// run that a redelivery superseded.
	IdleTimeout time.Duration
	// MaxGroups and GroupBytes bound the unfinished groups held (defaults
	// 16,384 groups and 512 MiB of their trajectories); beyond them the
	// oldest is dropped (Stats.GroupsEvicted).
	MaxGroups  int
	GroupBytes int64
	// CompactInterval is how often the collector checks whether the steps
	// stream has emptied and, if so, reclaims its file store blocks (default
	// 5s; see compactSteps).
	CompactInterval time.Duration
	// Metrics, when set, receives every outcome stored.
	Metrics Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tracer, when set, records a span per episode outcome stored, in the
	// episode's trace; nil (the default) records none.
	Tracer trace.Tracer
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
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = messages.MaxAttempts
	}
	if o.CacheEpisodes <= 0 {
		o.CacheEpisodes = 1 << 16
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 256 << 20
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = 1 << 14
	}
	if o.GroupBytes <= 0 {
		o.GroupBytes = 512 << 20
	}
	if o.CompactInterval <= 0 {
		o.CompactInterval = 5 * time.Second
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
	// GroupsEvicted counts unfinished groups dropped to bound memory.
	GroupsEvicted uint64
	// InFlight is the number of episodes whose steps are cached, CachedBytes
	// their estimated size.
	InFlight    int
	CachedBytes int64
	// Evicted counts episodes dropped from the cache (bounds or idleness);
	// Reloaded the episodes assembled from the steps stream because this
	// collector had not seen all their steps; Rejected the steps ignored as
	// no honest env worker sends them.
	Evicted, Reloaded, Rejected uint64
	// Compactions counts the times the emptied steps stream's disk was
	// reclaimed (see Options.CompactInterval).
	Compactions uint64
	// StepsDeleted counts decided steps removed one by one by sequence (an
	// episode's first run, held whole); Purges the decided episodes whose
	// steps were purged by subject instead.
	StepsDeleted, Purges uint64
	// FullStreams names the output kinds ("failure", "group",
	// "trajectory") whose stream refuses records now for being full, with
	// no consumer reading; their outcomes wait, nothing is dropped.
	FullStreams []string
}

// PassRate is the share of complete groups that passed dynamic filtering.
func (s Stats) PassRate() float64 {
	if n := s.GroupsKept + s.GroupsFiltered; n > 0 {
		return float64(s.GroupsKept) / float64(n)
	}
	return 0
}

// Collector assembles trajectories. Create it with New and run it with Run.
//
// The steps stream is the collector's truth; what it holds in memory is a
// cache. An episode is decided when its terminal step (done, or an error)
// is delivered: the run that step ends is assembled from the cache when
// every earlier step of the run came to this collector, and read back from
// the stream otherwise — after a restart, or when a standby collector
// acknowledged some of its steps while it held the pin. The outcome is
// published with the episode id as its message id, then an outcome marker
// on the episode's steps subject, then the episode's steps are deleted (by
// sequence when this collector was delivered them all, else purged by
// subject): any later step of the episode, on any collector, finds it
// decided.
type Collector struct {
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	steps    jetstream.Stream // set by Run before the first message
	cache    *cache
	finished *recent // only the consume goroutine touches it
	groups   map[string]*group
	// groupOrder holds the unfinished groups oldest first; groupBytes their
	// estimated size.
	groupOrder *list.List
	groupBytes int64
	groupWarn  lograte.Every
	// settleWarn limits the log of failed outcomes.
	settleWarn lograte.Every
	// halt closes when Run's context ends: retries that could wait forever
	// (a group the stream keeps refusing) give up then.
	halt <-chan struct{}
	// decisions is the stream of episodes' decisions, set by Run.
	decisions jetstream.Stream
	purgeWarn lograte.Every
	// deletes carries decided steps' sequences to deleteLoop; deleteWarn
	// limits the log of failed deletes.
	deletes    chan uint64
	deleteWarn lograte.Every
	// full follows the output streams that refuse records for being full.
	full fullStreams

	mu      sync.Mutex
	stats   Stats
	counted *sync.Cond // on mu; broadcast whenever stats change
}

// New builds a collector.
func New(js jetstream.JetStream, opts Options) *Collector {
	opts.setDefaults()
	c := &Collector{
		js: js, opts: opts, log: opts.Logger.With("actor", "collector"),
		cache: newCache(opts.CacheEpisodes, opts.CacheBytes),
		// Only a shortcut: the decisions stream recognises older ones.
		finished:   newRecent(1 << 16),
		groups:     make(map[string]*group),
		purgeWarn:  lograte.Every{Interval: time.Minute},
		deleteWarn: lograte.Every{Interval: time.Minute},
		settleWarn: lograte.Every{Interval: time.Minute},
		groupWarn:  lograte.Every{Interval: time.Minute},
		groupOrder: list.New(),
		deletes:    make(chan uint64, 1<<14),
	}
	c.full = fullStreams{interval: time.Minute, log: c.log}
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
	st := c.stats
	c.mu.Unlock()
	st.FullStreams = c.full.kinds()
	return st
}

func (c *Collector) count(f func(*Stats)) {
	episodes, bytes, evicted := c.cache.size()
	c.mu.Lock()
	f(&c.stats)
	c.stats.InFlight, c.stats.CachedBytes, c.stats.Evicted = episodes, bytes, evicted
	c.counted.Broadcast()
	c.mu.Unlock()
}

// ConsumerConfig is the collector's durable consumer on the steps stream. It
// panics on an invalid opts.Shard, which Run refuses first.
func ConsumerConfig(opts Options) jetstream.ConsumerConfig {
	opts.setDefaults()
	return jetstream.ConsumerConfig{
		Durable:       opts.Shard.Consumer(opts.Durable),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 8192,
		// One subject filter: the server finds a filtered consumer's next
		// step by a walk through the stream, where several filters make it
		// intersect every stored subject with them.
		FilterSubject: opts.Shard.filter(opts.Subjects),
		// Pinning makes any further collector on the same durable a hot
		// standby. Correctness does not depend on it (a hand-over in the
		// middle of an episode is read back from the stream), but groups
		// are assembled in the active collector's memory.
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
	if err := c.opts.Shard.Validate(); err != nil {
		return err
	}
	var (
		steps jetstream.Stream
		cons  jetstream.Consumer
	)
	// A collector that starts during a leader election waits it out.
	if err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		steps, err = c.js.Stream(ctx, c.opts.Subjects.StreamSteps())
		return err
	}); err != nil {
		return fmt.Errorf("collector: steps stream: %w", err)
	}
	if err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		c.decisions, err = c.js.Stream(ctx, c.opts.Subjects.StreamDecided())
		return err
	}); err != nil {
		return fmt.Errorf("collector: decisions stream: %w", err)
	}
	if err := bus.RetryStore(ctx, c.log, "create the steps consumer", func(ctx context.Context) error {
		var err error
		cons, err = steps.CreateOrUpdateConsumer(ctx, ConsumerConfig(c.opts))
		return err
	}); err != nil {
		return fmt.Errorf("collector: consumer: %w", err)
	}
	c.steps = steps
	// Handlers get their own context: the messages a shutdown drains still
	// have their outcomes published (each publish is bounded by bus.Publish)
	// instead of failing and coming back to another collector.
	work := context.WithoutCancel(ctx)
	// The deleters outlive ctx by at most deleteGrace, so a shutdown while
	// the server is unreachable does not wait out every queued delete.
	delCtx, stopDeleting := context.WithCancel(work)
	defer stopDeleting()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(deleteGrace, stopDeleting) })
	defer stopGrace()
	var deleting sync.WaitGroup
	for range deleters {
		deleting.Go(func() { c.deleteLoop(delCtx) })
	}
	// No handler runs any more when this is called: the deleters finish
	// what they were handed.
	stopDeleters := func() {
		close(c.deletes)
		deleting.Wait()
	}
	c.halt = ctx.Done()
	// Consume delivers serially on one goroutine.
	cc, err := cons.Consume(func(m jetstream.Msg) { c.handle(work, m) },
		jetstream.PullMaxMessages(1024), jetstream.PullPriorityGroup(pinGroup),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrNoHeartbeat):
			case errors.Is(err, jetstream.ErrPinIDMismatch):
				// Another collector holds the pin now; this one waits as
				// the standby. Nothing it holds depends on the pin.
				c.log.Debug("pin moved to another collector")
			default:
				c.log.Warn("consume", "err", err)
			}
		}))
	if err != nil {
		stopDeleters()
		return fmt.Errorf("collector: consume: %w", err)
	}
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		c.sweep(ctx)
	}()
	compactDone := make(chan struct{})
	go func() {
		defer close(compactDone)
		c.compactLoop(ctx)
	}()
	c.log.Info("collector ready")
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	stopDeleters()
	<-sweepDone
	<-compactDone
	st := c.Stats()
	c.log.Info("collector stopped", "trajectories", st.Trajectories, "failures", st.Failures,
		"groups_kept", st.GroupsKept, "groups_filtered", st.GroupsFiltered, "in_flight", st.InFlight)
	return nil
}

// sweep expires idle cache entries until ctx ends.
func (c *Collector) sweep(ctx context.Context) {
	t := time.NewTicker(max(c.opts.IdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if c.cache.expire(now, c.opts.IdleTimeout) > 0 {
				c.count(func(*Stats) {})
			}
		}
	}
}

// compactLoop calls compactSteps every CompactInterval until ctx ends.
func (c *Collector) compactLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.CompactInterval)
	defer t.Stop()
	var compacted uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			compacted = c.compactSteps(ctx, compacted)
		}
	}
}

// compactSteps reclaims the steps stream's disk once it holds no step
// (bus.CompactIfEmpty), and returns the last sequence reclaimed.
func (c *Collector) compactSteps(ctx context.Context, compacted uint64) uint64 {
	last, err := bus.CompactIfEmpty(ctx, c.steps, compacted)
	if err != nil {
		if ok, n := c.purgeWarn.Allow(time.Now()); ok {
			c.log.Warn("reclaiming the empty steps stream's disk failed", "err", err, "unlogged_failures", n)
		}
		return compacted
	}
	if last != compacted {
		c.count(func(s *Stats) { s.Compactions++ })
	}
	return last
}

func (c *Collector) handle(ctx context.Context, m jetstream.Msg) {
	ev, err := messages.Decode[messages.StepEvent](m.Data())
	if err == nil {
		run, slot, id, perr := c.opts.Subjects.ParseSteps(m.Subject())
		switch {
		case perr != nil || id != ev.EpisodeID || run != ev.RunID:
			err = fmt.Errorf("step of episode %q published on subject %s", ev.EpisodeID, m.Subject())
		case ev.Episode != nil && messages.StepSlot(ev.Episode.GroupID) != slot:
			// Its group's other members are in another slot, maybe
			// another collector's.
			err = fmt.Errorf("step of episode %q of group %q published on subject %s, not in the group's slot %d",
				ev.EpisodeID, ev.Episode.GroupID, m.Subject(), messages.StepSlot(ev.Episode.GroupID))
		}
	}
	if err != nil {
		c.malformed(ctx, m, err)
		return
	}
	if c.finished.has(finishedKey(ev.RunID, ev.EpisodeID)) {
		// A redelivery, or a late run, of an episode already decided.
		if err := m.Ack(); err == nil {
			if meta, err := m.Metadata(); err == nil {
				c.deleteSteps([]uint64{meta.Sequence.Stream})
			}
		}
		return
	}
	// An error step is exempt: a worker records its give-up at whatever
	// delivery count it has reached, and an error can splice nothing.
	if ev.Attempt > c.opts.MaxAttempts && ev.Error == "" {
		c.reject(m, ev, fmt.Sprintf("attempt %d, above the highest possible %d", ev.Attempt, c.opts.MaxAttempts))
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		c.settle(m, fmt.Errorf("step metadata: %w", err), false)
		return
	}
	key := keyOf(ev)
	s := stored{seq: meta.Sequence.Stream, ev: slim(ev)}
	if !ev.Done && ev.Error == "" {
		c.cache.add(key, s, time.Now())
		c.count(func(*Stats) {})
		_ = m.Ack()
		return
	}
	steps, err := c.decide(ctx, m.Subject(), key, s)
	if err == nil && c.finished.has(finishedKey(ev.RunID, ev.EpisodeID)) {
		// The step decided its episode, and its outcome is stored.
		c.ackAndPurge(ctx, m, ev.EpisodeID, steps)
		return
	}
	c.settle(m, err, false)
}

// reject ignores a step no honest env worker sends. Runs are told apart by
// their delivery's nonce, so the step cannot join an honest run, and
// ignoring it loses nothing.
func (c *Collector) reject(m jetstream.Msg, ev *messages.StepEvent, why string) {
	c.log.Warn("step rejected", "subject", m.Subject(), "episode", ev.EpisodeID, "attempt", ev.Attempt, "turn", ev.Turn, "reason", why)
	c.count(func(s *Stats) { s.Rejected++ })
	_ = m.Term()
}

// decide records the outcome of the run that the terminal step s, stored on
// subject, ends.
// When the run was assembled from what this collector was delivered, and it
// is the episode's first run (its first delivery, the only run cached), it
// returns the stream sequences of the episode's steps (s included), which
// can then be deleted one by one; otherwise nil, and the episode's steps
// are purged by subject: an earlier run's steps may have gone to another
// collector or out of the cache.
func (c *Collector) decide(ctx context.Context, subject string, key runKey, s stored) ([]uint64, error) {
	ev := s.ev
	id := ev.EpisodeID
	var p *partial
	if ev.Error != "" {
		// A run that failed decides at once: the turns it names before the
		// error may never have been stored. Its request (for the group)
		// travels with it, or is read back.
		p = &partial{req: ev.Episode}
		if p.req == nil {
			p.req = c.cache.request(id, key)
		}
		if p.req == nil {
			ep, err := c.readEpisode(ctx, subject, id)
			if err != nil {
				return nil, err
			}
			p.req = requestOf(ep.runs, key)
		}
		p.apply(ev)
		return nil, c.record(ctx, id, key.String(), p)
	}
	r, seqs := c.cache.runAndSeqs(id, key)
	if r == nil {
		r = make(run, 1)
	}
	r[ev.Turn] = s
	p, complete := assemble(r, ev.Turn)
	if complete {
		var steps []uint64
		if key.attempt <= 1 && (seqs != nil || ev.Turn == 0) {
			steps = append(seqs, s.seq)
		}
		return steps, c.record(ctx, id, key.String(), p)
	}
	// Some turns came to another collector, or were evicted here: the
	// stream has them, unless another run decided the episode already.
	d, err := c.decision(ctx, ev.RunID, id)
	if err != nil {
		return nil, err
	}
	if d != nil {
		if winner := d.Header.Get(messages.DecisionRunHeader); winner != key.String() {
			c.lostTo(ev.RunID, id, winner)
			return nil, nil
		}
	}
	ep, err := c.readEpisode(ctx, subject, id)
	if err != nil {
		return nil, err
	}
	r = ep.runs[key]
	if r == nil {
		r = make(run, 1)
	}
	r[ev.Turn] = s
	if p, complete = assemble(r, ev.Turn); !complete {
		// The stream holds no earlier turns of this run: no env
		// worker stores a terminal step before them.
		c.log.Warn("step rejected", "episode", id, "attempt", ev.Attempt, "turn", ev.Turn,
			"reason", "ends a run whose earlier turns were never stored")
		c.count(func(s *Stats) { s.Rejected++ })
		return nil, nil
	}
	c.count(func(s *Stats) { s.Reloaded++ })
	return nil, c.record(ctx, id, key.String(), p)
}

// finished forgets an episode whose outcome is stored: any later step of it
// is acknowledged at once. An episode decided for another collector's run
// is only dropped from the cache (forget): its outcome may still have to be
// stored from that run's terminal step, here or there.
func (c *Collector) finish(run, id string) {
	c.finished.add(finishedKey(run, id))
	c.forget(id)
}

// lostTo forgets an episode that another run, winner, decided. A malformed
// message's decision needs none of the episode's steps, which then go as a
// decided episode's do: the message may have come on another slot's subject
// (another shard's), whose purge left the steps on this one.
func (c *Collector) lostTo(run, id, winner string) {
	if winner == malformedRun {
		c.finish(run, id)
		return
	}
	c.forget(id)
}

func (c *Collector) forget(id string) {
	c.cache.drop(id)
	c.count(func(*Stats) {})
}

// malformedRun is the run a malformed step decides for: none.
const malformedRun = "malformed"

// malformed records a step event that cannot be decoded. Its subject still
// names its episode, which can then never be assembled: unless that episode
// was decided already, the record is the episode's one outcome.
func (c *Collector) malformed(ctx context.Context, m jetstream.Msg, cause error) {
	c.log.Warn("malformed step event", "subject", m.Subject(), "err", cause)
	f := &messages.Failure{
		V: messages.Version, Kind: messages.FailureMalformed, Reason: cause.Error(),
		Subject: m.Subject(), Time: time.Now().UnixNano(), Payload: messages.FailurePayload(m.Data()),
	}
	run, _, id, err := c.opts.Subjects.ParseSteps(m.Subject())
	f.RunID = run
	if err == nil && !c.finished.has(finishedKey(run, id)) {
		p := &partial{req: c.cache.request(id, runKey{}), run: run}
		f.EpisodeID = id
		if p.req != nil {
			f.GroupID, f.Env = p.req.GroupID, p.req.Env
		}
		p.outcome = &outcome{failure: f}
		won, _, err := c.claim(ctx, run, id, malformedRun, messages.FailureMalformed)
		if err == nil && won {
			err = c.store(ctx, id, malformedRun, p)
		}
		if err != nil {
			c.settle(m, err, false)
			return
		}
		if won {
			c.count(func(s *Stats) { s.Malformed++ })
			c.ackAndPurge(ctx, m, id, nil)
			return
		}
		c.forget(id)
		f.EpisodeID, f.GroupID, f.Env = "", "", ""
	}
	// Of no episode, or of one decided already: a record of the message only.
	if err := c.publish(ctx, c.opts.Subjects.Failures(f.RunID, messages.FailureMalformed), f, ""); err != nil {
		c.settle(m, err, false)
		return
	}
	c.count(func(s *Stats) { s.Malformed++ })
	c.settle(m, nil, true)
	// Nothing reads it again: it goes like a decided episode's late step.
	if meta, err := m.Metadata(); err == nil {
		c.deleteSteps([]uint64{meta.Sequence.Stream})
	}
}

// settle acks a message whose effect is durable, or hands it back when
// recording that effect failed; term ends a message that can never succeed.
func (c *Collector) settle(m jetstream.Msg, err error, term bool) {
	switch {
	case errors.Is(err, bus.ErrStreamFull):
		// Logged by c.full, once a minute per stream. The step waits longer
		// each time, so a stream nobody reads costs no busy loop.
		var n uint64
		if meta, merr := m.Metadata(); merr == nil {
			n = meta.NumDelivered
		}
		_ = m.NakWithDelay(retryDelay(n))
	case err != nil:
		// Every terminal step fails alike while a stream refuses outcomes:
		// one line a minute, with how many failed since, not one per step.
		if ok, n := c.settleWarn.Allow(time.Now()); ok {
			c.log.Error("recording outcome failed; will retry on redelivery", "subject", m.Subject(), "failures_since_last_line", n+1, "err", err)
		}
		_ = m.NakWithDelay(time.Second)
	case term:
		_ = m.Term()
	default:
		_ = m.Ack()
	}
}

// record decides the episode for run, unless it is decided already, and
// stores the outcome. On error the caller hands the terminal step back: a
// decision stored without its outcome is completed when the step comes
// again (to this collector or another), since the run named by the decision
// gives the same outcome.
func (c *Collector) record(ctx context.Context, id, run string, p *partial) error {
	out := p.outcome
	if out.traj != nil {
		// Known before deciding, so the decision names the kind stored.
		var err error
		if out.encoded, err = c.encode(out.traj); err != nil {
			out.failure = p.failure(messages.FailureInvariant, fmt.Sprintf("trajectory too large to publish: %v", err))
			out.traj = nil
		}
	}
	won, winner, err := c.claim(ctx, p.runID(), id, run, out.kind())
	if err != nil {
		return err
	}
	if !won {
		c.lostTo(p.runID(), id, winner)
		return nil
	}
	return c.store(ctx, id, run, p)
}

// outcomeMsgID is the de-duplication id of an episode's outcome decided
// for run: the same for every collector storing it, so a repeat is held
// back, and one no other role can know before the decision, for run ends
// in the nonce of the env worker's delivery. An id made of the episode id
// alone, which a trainer and a gateway know, would let a record published
// first under it in the same stream (the gateway's own run's) have the real
// one dropped as a duplicate, and would hold back the outcome of an episode
// id used again by a later run. The episode's own run (runID) scopes it
// too: a malformed message decides for malformedRun, which has no nonce.
func outcomeMsgID(runID, id, run string) string { return messages.EpisodeMsgID(runID, id) + "/" + run }

// store publishes the outcome of episode id, decided for run, and feeds
// its group. The caller then acknowledges the step that decided it and
// purges its steps (ackAndPurge).
func (c *Collector) store(ctx context.Context, id, run string, p *partial) error {
	out := p.outcome
	if tr := c.opts.Tracer; tr != nil {
		var span trace.Span
		ctx, span = tr.Start(tracing.WithTraceID(ctx, p.trace()), "outcome", trace.WithAttributes(
			attribute.String("rollfleet.episode", id), attribute.String("rollfleet.outcome", out.kind())))
		defer span.End()
	}
	kind, err := kindTrajectory, error(nil)
	if out.traj != nil {
		err = c.publishRaw(ctx, c.opts.Subjects.Trajectories(out.traj.RunID, out.traj.Env), out.encoded, outcomeMsgID(out.traj.RunID, id, run))
	} else {
		kind = kindFailure
		err = c.publish(ctx, c.opts.Subjects.Failures(out.failure.RunID, out.failure.Kind), out.failure, outcomeMsgID(out.failure.RunID, id, run))
	}
	if err != nil {
		c.full.refused(kind, err, time.Second)
		return err
	}
	c.full.stored(kind)
	c.finish(p.runID(), id)
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
	c.observe(out.traj, out.failure)
	if out.failure != nil {
		c.log.Warn("episode failed", "episode", id, "trace_id", out.failure.TraceID, "kind", out.failure.Kind, "reason", out.failure.Reason)
	}
	c.addToGroup(ctx, p, out.traj)
	return nil
}

// ackAndPurge acknowledges the step that decided an episode (its outcome
// stored, its group fed), waiting for the server to confirm, and then
// deletes the episode's steps (steps, the sequences delivered here, or when
// nil a purge of its subject, m's): last, so from here on the episode looks
// handled. The order matters. A purge of a subject narrower than the
// consumer's filter that ends a pending delivery moves the consumer's ack
// floor (nats-server 2.15) past the other steps still pending, such as
// terminal steps handed back with a delay while an output stream is full,
// which are then never delivered again and their episodes never decided.
// An unconfirmed acknowledgement leaves the steps to their max age rather
// than risk that.
func (c *Collector) ackAndPurge(ctx context.Context, m jetstream.Msg, id string, steps []uint64) {
	if err := bus.Retry(ctx, m.DoubleAck); err != nil {
		if ok, n := c.purgeWarn.Allow(time.Now()); ok {
			c.log.Warn("acknowledging a decided episode's step failed; its steps stay until their max age", "episode", id, "err", err, "unlogged_failures", n)
		}
		return
	}
	if steps != nil {
		c.deleteSteps(steps)
		return
	}
	c.purge(ctx, m.Subject(), id)
}

// deleteGrace is how long the step deleters go on after Run's context ends.
const deleteGrace = 5 * time.Second

// deleteSteps hands the sequences of decided steps to the deleter, waiting
// while it is that far behind.
//
// Why not purge each episode by subject: the server then scans every
// stored step in the range the episode's steps span (the interleaved steps
// of every episode in flight) and makes every consumer of the stream
// recount its pending messages, which was about a quarter of a fleet's CPU.
// A delete by sequence costs the server neither.
func (c *Collector) deleteSteps(seqs []uint64) {
	for _, seq := range seqs {
		c.deletes <- seq
	}
}

// deleters is how many goroutines delete decided steps: each delete is a
// round trip (a raft commit on a replicated stream), so several overlap.
const deleters = 4

// deleteLoop deletes the steps handed to deleteSteps until the channel is
// closed; several run at once. A failure costs only disk until the steps'
// max age, so it is logged (once a minute at most), not retried beyond
// bus.Retry. Once ctx ends, what is still queued is dropped the same way.
func (c *Collector) deleteLoop(ctx context.Context) {
	for seq := range c.deletes {
		if ctx.Err() != nil {
			continue // stopping: left to the max age
		}
		err := bus.Retry(ctx, func(ctx context.Context) error { return c.steps.DeleteMsg(ctx, seq) })
		if err == nil {
			c.count(func(s *Stats) { s.StepsDeleted++ })
		}
		if err == nil || deletedAlready(err) {
			continue
		}
		if ok, n := c.deleteWarn.Allow(time.Now()); ok {
			c.log.Warn("deleting a decided episode's step failed; it stays until its max age", "seq", seq, "err", err, "unlogged_failures", n)
		}
	}
}

// deletedAlready reports whether a delete failed because the message is
// gone: a step delivered twice, or removed by a compaction. nats.go reports
// the server's refusal as text (ErrMsgDeleteUnsuccessful), without its code.
func deletedAlready(err error) bool {
	if !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "not found") || strings.Contains(msg, "no message")
}

// encode encodes a trajectory, or reports that it cannot be published: too
// large for the codec or for the server.
func (c *Collector) encode(t *messages.Trajectory) ([]byte, error) {
	data, err := messages.Marshal(t)
	if err != nil {
		return nil, err
	}
	if max := c.js.Conn().MaxPayload(); max > 0 && int64(len(data)) > max-maxHeaderRoom {
		return nil, fmt.Errorf("%w: %d bytes > %d", bus.ErrTooLarge, len(data), max-maxHeaderRoom)
	}
	return data, nil
}

// maxHeaderRoom is left of the server's max payload for a message's
// headers (its message id).
const maxHeaderRoom = 1024

// claim stores the episode's decision for run, on the condition that no
// decision is stored yet, and reports whether the decision is run's: stored
// now, by an earlier try of this call, or by another collector deciding for
// the same run. When it is not, winner is the run the decision names.
func (c *Collector) claim(ctx context.Context, runID, id, run, kind string) (won bool, winner string, err error) {
	subject := c.opts.Subjects.Decided(runID, id)
	msg := &nats.Msg{Subject: subject, Header: nats.Header{
		messages.DecisionHeader: []string{kind}, messages.DecisionRunHeader: []string{run},
	}}
	err = bus.Retry(ctx, func(ctx context.Context) error {
		_, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(outcomeMsgID(runID, id, run)), jetstream.WithExpectLastSequencePerSubject(0))
		return err
	})
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return true, run, nil
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		raw, err := c.decision(ctx, runID, id)
		if err != nil || raw == nil {
			return false, "", err
		}
		winner = raw.Header.Get(messages.DecisionRunHeader)
		return winner == run, winner, nil
	}
	return false, "", fmt.Errorf("decide episode %s: %w", id, err)
}

// decision returns the episode's stored decision, or nil when there is none.
func (c *Collector) decision(ctx context.Context, runID, id string) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.decisions.GetLastMsgForSubject(ctx, c.opts.Subjects.Decided(runID, id))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read decision of %s: %w", id, err)
	}
	return raw, nil
}

// purge drops a decided episode's steps, stored on subject. A failure costs only disk until
// the steps' max age, so it is logged (once a minute at most), not retried.
func (c *Collector) purge(ctx context.Context, subject, id string) {
	err := bus.Retry(ctx, func(ctx context.Context) error {
		return c.steps.Purge(ctx, jetstream.WithPurgeSubject(subject))
	})
	if err == nil {
		c.count(func(s *Stats) { s.Purges++ })
		return
	}
	if ok, n := c.purgeWarn.Allow(time.Now()); ok {
		c.log.Warn("purging a decided episode's steps failed; they stay until their max age", "episode", id, "err", err, "unlogged_failures", n)
	}
}

// getStep reads the first stored step on subject at or after seq, riding
// out a leader election on a cluster.
func (c *Collector) getStep(ctx context.Context, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.steps.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		return err
	})
	return raw, err
}

// storedEpisode is an episode's steps as the stream holds them, by run.
type storedEpisode struct {
	runs map[runKey]run
}

// readEpisode reads every stored step of an episode, on its steps subject. A message that cannot
// be decoded is skipped: its own delivery records it.
func (c *Collector) readEpisode(ctx context.Context, subject, id string) (*storedEpisode, error) {
	ep := &storedEpisode{runs: make(map[runKey]run)}
	for seq := uint64(1); ; {
		raw, err := c.getStep(ctx, seq, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ep, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read steps of %s: %w", id, err)
		}
		seq = raw.Sequence + 1
		ev, err := messages.Decode[messages.StepEvent](raw.Data)
		if err != nil || ev.EpisodeID != id {
			continue
		}
		key := keyOf(ev)
		if ep.runs[key] == nil {
			ep.runs[key] = make(run)
		}
		if _, dup := ep.runs[key][ev.Turn]; !dup {
			ep.runs[key][ev.Turn] = stored{seq: raw.Sequence, ev: ev}
		}
	}
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

// finishedKey names an episode of a run in the set of finished ones: an
// episode id that a later run uses again is another episode.
func finishedKey(run, id string) string { return messages.EpisodeMsgID(run, id) }

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
