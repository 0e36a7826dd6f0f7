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
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/lograte"
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
