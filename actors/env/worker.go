// Package env is the env worker actor: it pulls EpisodeRequests from
// JetStream, runs each episode as its own actor (one goroutine owning the
// game state for the episode's whole life) and publishes one StepEvent per
// model turn. It holds no game rules: those live in package envs.
package env

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/internal/lograte"
	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// Options configures a Worker. Zero values take the defaults noted.
type Options struct {
	// Concurrency is the most episodes this worker runs at once (default 256).
	Concurrency int
	// Judge, when set, is the LLM judge asked for the envs that want one
	// (math episodes with the judge option); nil leaves their grader's word.
	Judge *JudgeOptions
	// MathStrict grades math episodes whose env options do not set "strict"
	// with mathgrade's Strict options instead of NeMo Gym's (no rounded
	// decimals, no unlabelled equations' right-hand sides).
	MathStrict bool
	// Subjects names subjects and streams (default prefix "rf").
	Subjects messages.Subjects
	// Durable is the shared consumer name all env workers pull from
	// (default "envworker").
	Durable string
	// Run limits the worker to the episodes of one run (EpisodeRequest.RunID),
	// as rollout run's own worker does, so that leftovers of another run on
	// the same server are never played by it; empty serves every run. A
	// worker of one run has its own consumer, named after the run, which
	// the server deletes after an hour unused.
	Run string
	// Envs limits the worker to these env ids; empty hosts every env.
	// Workers hosting the same set share a consumer named after the set.
	// The episodes stream is a work queue, which refuses consumers whose
	// subjects overlap: the sets in use must be disjoint, and a worker
	// hosting every env cannot run beside workers hosting a subset.
	Envs []string
	// RequestTimeout bounds one generate or tokenize request (default 180s).
	RequestTimeout time.Duration
	// RequestAttempts is how often a request that found no LLM worker, timed
	// out or came back unavailable is tried before the episode fails
	// (default 4).
	RequestAttempts int
	// AckWait is the redelivery timeout of an episode. The worker signals
	// progress for every running episode three times per AckWait, so only a
	// worker that stops doing so (a crash) loses its episodes to another
	// (default 1m).
	AckWait time.Duration
	// MaxDeliver is how often an episode is delivered without progress
	// before its failure is recorded instead of handing it back once more
	// (default 5): each turn its runs have stored allows one delivery more,
	// so only an episode that keeps ending at the same turn gives up. A
	// delivery beyond the allowance (its worker died during the last one)
	// records the failure at once.
	MaxDeliver int
	// RetryDelay is how long a handed-back episode waits, times its
	// delivery count, capped at 30s (default 1s).
	RetryDelay time.Duration
	// UnhealthyAfter is the number of requests in a row that found no
	// working LLM worker after which this worker stops taking new episodes
	// and waits, backing off, until a request succeeds again (default 3).
	UnhealthyAfter int
	// Remote lists the remote envs (served over HTTP) this worker hosts
	// besides the registered ones; with Envs set, their ids must be listed
	// there too.
	Remote []remoteenv.Config
	// Transport carries remote env calls (default http.DefaultTransport).
	Transport http.RoundTripper
	// MaxStaleness is the staleness bound of episodes whose request sets
	// none: a turn starts only while the fleet's policy version minus the
	// version of the episode's first turn is at most this. Negative means
	// no bound; nil (the default) means -1.
	MaxStaleness *int32
	// StalePolicy is what happens to an episode past its bound when its
	// request says nothing (default messages.StaleDrop).
	StalePolicy string
	// MaxRestarts bounds the restarts of one episode under
	// messages.StaleRestart; past it, the episode is dropped as stale
	// (0 means the default, 3; negative means none).
	MaxRestarts int
	// ID names the worker in status answers (default "env-" and a unique
	// suffix).
	ID string
	// Metrics, when set, receives the worker's measurements.
	Metrics Metrics
	// Logger defaults to slog.Default(). An episode's lines carry its id and trace id.
	Logger *slog.Logger
	// Tracer, when set, records a span per turn (and one per episode delivery) in the
	// episode's trace; nil (the default) records none.
	Tracer trace.Tracer
}

func (o *Options) setDefaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 256
	}
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	if o.Durable == "" {
		o.Durable = "envworker"
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 180 * time.Second
	}
	if o.RequestAttempts <= 0 {
		o.RequestAttempts = 4
	}
	if o.AckWait <= 0 {
		o.AckWait = time.Minute
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = time.Second
	}
	if o.UnhealthyAfter <= 0 {
		o.UnhealthyAfter = 3
	}
	if o.MaxStaleness == nil {
		unbounded := int32(-1)
		o.MaxStaleness = &unbounded
	}
	if o.StalePolicy == "" {
		o.StalePolicy = messages.StaleDrop
	}
	if o.MaxRestarts == 0 {
		o.MaxRestarts = 3
	}
	if o.ID == "" {
		o.ID = "env-" + nuid.Next()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Stats are a worker's counters.
type Stats struct {
	Started, Finished, Failed, Malformed, Turns, Resumed uint64
	InFlight                                             int64
	// Unhealthy is set while requests keep finding no working LLM worker:
	// the worker takes no new episodes then.
	Unhealthy bool
	// StoreWaiting is the number of episodes waiting for the JetStream store
	// to take their steps (or answer their reads) again; the worker takes
	// no new episodes meanwhile. StoreWaits counts the episodes that ever
	// had to wait.
	StoreWaiting int64
	StoreWaits   uint64
	// Held is the number of turns waiting for the fleet to resume.
	Held int64
	// StaleDrops and Restarts count episodes dropped, and plays started
	// over, for going past their max_staleness.
	StaleDrops, Restarts uint64
}

// Worker runs episodes. Create it with New and run it with Run.
type Worker struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	started, finished, failed, malformed, turns, resumes atomic.Uint64
	// infraStreak counts requests in a row that found no working LLM
	// worker; any answered request resets it.
	infraStreak atomic.Int64
	inFlight    atomic.Int64

	// ctl follows the fleet's policy state (set by Run); held counts the
	// turns waiting for a resume.
	// watcher follows the fleet's policy state; set by Run before any
	// episode starts, atomic for Policy's readers on other goroutines.
	watcher              atomic.Pointer[control.Watcher]
	held                 atomic.Int64
	staleDrops, restarts atomic.Uint64

	// storeWaiting counts the episodes waiting for the store now,
	// storeWaits those that ever did; storeState paces the log lines about
	// it; handBacks keeps why this worker last handed each episode back.
	storeWaiting atomic.Int64
	storeWaits   atomic.Uint64
	storeState   storeState
	// judgeWarn paces the log of failed judge asks: during a judge outage
	// every judged episode fails alike.
	judgeWarn lograte.Every
	handBacks handBacks
	// tokens caches the tokenizations of short plain texts (episode.tokenize).
	tokens tokcache.Cache

	// live maps each running *episode to its message, for keepAlive.
	live sync.Map

	remote    map[string]remoteenv.Config
	transport http.RoundTripper
}

// New builds an env worker. It fails only on a bad remote env config.
func New(nc *nats.Conn, js jetstream.JetStream, opts Options) (*Worker, error) {
	opts.setDefaults()
	remote, err := remoteConfigs(opts.Remote)
	if err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	transport := opts.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &Worker{nc: nc, js: js, opts: opts, log: opts.Logger.With("actor", "env"), remote: remote, transport: transport,
		judgeWarn: lograte.Every{Interval: time.Minute}}, nil
}

// Stats returns a snapshot of the counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Started: w.started.Load(), Finished: w.finished.Load(), Failed: w.failed.Load(),
		Malformed: w.malformed.Load(), Turns: w.turns.Load(), Resumed: w.resumes.Load(), InFlight: w.inFlight.Load(),
		Unhealthy: w.unhealthy(), StoreWaiting: w.storeWaiting.Load(), StoreWaits: w.storeWaits.Load(),
		Held: w.held.Load(), StaleDrops: w.staleDrops.Load(), Restarts: w.restarts.Load(),
	}
}

// ConsumerConfig is the durable pull consumer the env workers share.
func ConsumerConfig(opts Options) jetstream.ConsumerConfig {
	opts.setDefaults()
	cfg := jetstream.ConsumerConfig{
		Durable:   opts.Durable,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   opts.AckWait,
		// No server-side limit: a worker killed during the last allowed
		// delivery would leave the episode with no outcome. The worker
		// counts deliveries itself and records the failure (see runEpisode).
		MaxDeliver: -1,
		// Each worker bounds itself by Concurrency; this bounds the fleet.
		MaxAckPending: 1 << 16,
		FilterSubject: opts.Subjects.EpisodesAll(),
	}
	run := messages.AnyRun
	if opts.Run != "" {
		run = opts.Run
		cfg.FilterSubject = opts.Subjects.EpisodesOfRun(run)
		cfg.Durable = fmt.Sprintf("%s-run-%s", opts.Durable, messages.NameToken(run))
		cfg.InactiveThreshold = time.Hour
	}
	if len(opts.Envs) > 0 {
		// Workers hosting the same envs share one consumer; each set of envs
		// has its own, named after it, and pulls only its envs' subjects.
		ids := slices.Sorted(slices.Values(opts.Envs))
		ids = slices.Compact(ids)
		h := fnv.New32a()
		for _, id := range ids {
			h.Write([]byte(id))
			h.Write([]byte{0})
			cfg.FilterSubjects = append(cfg.FilterSubjects, opts.Subjects.EpisodesFilter(run, id))
		}
		cfg.FilterSubject = ""
		cfg.Durable = fmt.Sprintf("%s-%08x", cfg.Durable, h.Sum32())
	}
	return cfg
}

// Run pulls and runs episodes until ctx is cancelled, then waits for the
// running episodes to finish. It pulls one episode per free slot, never
// ahead: a prefetched episode would sit unacknowledged in a buffer, and if it
// waited longer than AckWait it would be delivered to another worker too.
func (w *Worker) Run(ctx context.Context) error {
	// The policy state first: an episode started during a pause holds its
	// first turn.
	ctl, err := control.Watch(ctx, w.nc, control.WatchOptions{Subjects: w.opts.Subjects, Logger: w.log})
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	defer ctl.Close()
	w.watcher.Store(ctl)
	status, err := control.ServeStatus(w.nc, w.opts.Subjects, w.status)
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	defer func() { _ = status.Unsubscribe() }()
	// A worker that starts during a leader election, or while the store's
	// disk is full, waits it out.
	var cons jetstream.Consumer
	if err := bus.RetryStore(ctx, w.log, "create the episodes consumer", func(ctx context.Context) error {
		var err error
		cons, err = w.js.CreateOrUpdateConsumer(ctx, w.opts.Subjects.StreamEpisodes(), ConsumerConfig(w.opts))
		return err
	}); err != nil {
		return fmt.Errorf("env: consumer: %w", err)
	}
	w.log.Info("env worker ready", "concurrency", w.opts.Concurrency)

	slots := make(chan struct{}, w.opts.Concurrency)
	var wg, keeper sync.WaitGroup
	stopKeeper := make(chan struct{})
	keeper.Go(func() { w.keepAlive(stopKeeper) })
	defer func() {
		wg.Wait()
		close(stopKeeper)
		keeper.Wait()
	}()
	// Episodes outlive a shutdown request: they finish rather than leave
	// half-published state behind.
	work := context.WithoutCancel(ctx)
	backoff := time.Duration(0)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if w.unhealthy() {
			// The model side is down: taking more episodes would only hand
			// them back. Running episodes keep probing; wait for them.
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			w.log.Error("unhealthy: requests keep finding no working LLM worker; pausing new episodes", "wait", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				<-slots
				return nil
			}
			if w.unhealthy() && w.inFlight.Load() > 0 {
				<-slots
				continue
			}
			// Healthy again, or nothing running to probe with: one episode
			// goes through, and while it runs the worker stays paused.
		} else {
			backoff = 0
		}
		if !w.waitForStore(ctx) {
			<-slots
			return nil
		}
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			<-slots
			switch {
			case ctx.Err() != nil:
				return nil
			case w.nc.IsClosed():
				return fmt.Errorf("env: pull: %w", nats.ErrConnectionClosed)
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				return fmt.Errorf("env: pull: %w", err)
			}
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn("pull failed", "err", err)
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			w.runEpisode(work, ctx.Done(), msg)
		})
	}
}

func (w *Worker) unhealthy() bool { return w.infraStreak.Load() >= int64(w.opts.UnhealthyAfter) }

// waitForStore holds new episodes back while running ones wait for the
// store: a new one would only wait too. It reports false when ctx ended.
func (w *Worker) waitForStore(ctx context.Context) bool {
	if !w.storeDown() {
		return true
	}
	t := time.NewTicker(storeFirstBackoff)
	defer t.Stop()
	for w.storeDown() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// keepAlive tells JetStream, three times per AckWait, that every running
// episode is still being worked on, so a slow model never causes a second
// delivery while the first run is alive. It runs until stop is closed.
func (w *Worker) keepAlive(stop <-chan struct{}) {
	t := time.NewTicker(w.opts.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		}
		w.live.Range(func(_, m any) bool {
			_ = m.(jetstream.Msg).InProgress()
			return true
		})
	}
}
