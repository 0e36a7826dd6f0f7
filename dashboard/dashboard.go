// Package dashboard serves a live web page of a rollfleet fleet: throughput,
// per-env success rate and mean reward over time, turn-latency and
// episode-length distributions, failures by kind with the latest reasons,
// workers and their load, and the backlog of the streams.
//
// The data comes from NATS without taking anything from anyone: a core NATS
// subscription to the trajectory and failure subjects (the output streams
// are work queues read by the run or a trainer; a core subscriber gets a
// copy of each message and consumes nothing), the control plane's status
// requests for the workers and the policy state, and JetStream stream and
// consumer info for the backlog. Outcomes are folded into fixed-size rings
// of time buckets, so memory stays bounded however long the fleet runs.
//
// The page (index.html, app.js, style.css) is embedded in the binary and
// loads nothing from elsewhere. It is updated over Server-Sent Events: one
// /events stream of JSON snapshots, one a second. The same snapshot is
// served at /api/snapshot.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/messages"
)

//go:embed static
var static embed.FS

// Ranges of a snapshot's series: RangeRecent the recent ring (by default
// 2 s buckets over 15 minutes), RangeLong the long one (1 min buckets over
// 24 hours).
const (
	RangeRecent = "recent"
	RangeLong   = "long"
)

// Options configure a Dashboard. Zero values take the defaults.
type Options struct {
	// Subjects are the fleet's subjects (zero value: prefix "rf").
	Subjects messages.Subjects
	// Run, when set, limits the outcomes counted to this run's.
	Run string
	// Step and Buckets shape the recent range (default 2s × 450: 15
	// minutes); LongStep and LongBuckets the long one (default 1m × 1440:
	// 24 hours).
	Step        time.Duration
	Buckets     int
	LongStep    time.Duration
	LongBuckets int
	// MaxEnvs bounds the envs shown one by one (default 16); the outcomes
	// of any further env are counted together.
	MaxEnvs int
	// LatestFailures is how many of the latest failure reasons are kept
	// (default 20).
	LatestFailures int
	// Dedup is how many recent outcomes are remembered to count an outcome
	// published twice once (default 65536).
	Dedup int
	// Poll is how often the workers, the policy state and the streams are
	// read (default 3s).
	Poll time.Duration
	// Push is how often /events sends a snapshot (default 1s).
	Push time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&o.Step, 2*time.Second)
	def(&o.Buckets, 450)
	defDur(&o.LongStep, time.Minute)
	def(&o.LongBuckets, 1440)
	def(&o.MaxEnvs, 16)
	def(&o.LatestFailures, 20)
	def(&o.Dedup, 1<<16)
	defDur(&o.Poll, 3*time.Second)
	defDur(&o.Push, time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Snapshot is what the page shows at one moment, as /api/snapshot and each
// /events message carry it in JSON.
type Snapshot struct {
	// Time is when the snapshot was taken; Started when the dashboard began
	// counting (every total is since then).
	Time    time.Time `json:"time"`
	Started time.Time `json:"started"`
	// Run is the run the dashboard counts, empty for every run.
	Run string `json:"run,omitempty"`
	// Totals count every outcome; Rates are over the last 10 seconds.
	Totals Totals `json:"totals"`
	Rates  Rates  `json:"rates"`
	// Series holds the throughput of each bucket of the range.
	Series Series `json:"series"`
	// Envs breaks the outcomes down by env, by id.
	Envs []EnvStats `json:"envs"`
	// TurnLatency is the distribution of each trajectory's mean time per
	// turn spent generating (Trajectory.GenerateNanos / turns), in ms;
	// EpisodeTurns that of trajectory lengths in turns.
	TurnLatency  Histogram `json:"turn_latency"`
	EpisodeTurns Histogram `json:"episode_turns"`
	// FailureKinds counts failures by kind, the most frequent first;
	// LatestFailures are the last failure records, newest first.
	FailureKinds   []KindCount   `json:"failure_kinds"`
	LatestFailures []FailureNote `json:"latest_failures"`
	// Fleet is what the last poll of the fleet found.
	Fleet FleetState `json:"fleet"`
}

// Dashboard aggregates a fleet's outcomes and serves the page. Create it
// with New, feed it with Watch, serve Handler, and Close it to end the
// event streams.
type Dashboard struct {
	opts Options
	mux  *http.ServeMux

	mu    sync.Mutex
	agg   *aggregator
	fleet FleetState
	// dropped counts the messages the NATS client dropped for each
	// subscription that has ended, added to those of the current ones.
	dropped int64
	subs    []*nats.Subscription

	done      chan struct{}
	closeOnce sync.Once
}

// New returns a dashboard that has counted nothing yet.
func New(opts Options) *Dashboard {
	opts.setDefaults()
	d := &Dashboard{opts: opts, agg: newAggregator(opts, opts.Now()), done: make(chan struct{})}
	d.mux = http.NewServeMux()
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	d.mux.Handle("GET /", http.FileServerFS(files))
	d.mux.HandleFunc("GET /events", d.serveEvents)
	d.mux.HandleFunc("GET /api/snapshot", d.serveSnapshot)
	return d
}

// Handler serves the page (/), its event stream (/events) and the snapshot
// (/api/snapshot).
func (d *Dashboard) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page uses comes from this server.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		d.mux.ServeHTTP(w, r)
	})
}

// Watch counts the outcomes published on nc from now on and polls the fleet
// (workers, policy state, streams) every Options.Poll, until stop is called.
// stop unsubscribes and waits for the poller; nc stays open, the caller's
// to close.
func (d *Dashboard) Watch(nc *nats.Conn) (stop func(), err error) {
	subj := d.opts.Subjects
	trajSubject, failSubject := subj.TrajectoriesAll(), subj.FailuresAll()
	if d.opts.Run != "" {
		trajSubject, failSubject = subj.TrajectoriesOfRun(d.opts.Run), subj.FailuresOfRun(d.opts.Run)
	}
	tsub, err := nc.Subscribe(trajSubject, func(m *nats.Msg) {
		t, err := messages.Decode[messages.Trajectory](m.Data)
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			d.agg.malformed++
			return
		}
		d.agg.trajectory(d.opts.Now(), t)
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: subscribe %s: %w", trajSubject, err)
	}
	fsub, err := nc.Subscribe(failSubject, func(m *nats.Msg) {
		f, err := messages.Decode[messages.Failure](m.Data)
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			d.agg.malformed++
			return
		}
		d.agg.failure(d.opts.Now(), f)
	})
	if err != nil {
		_ = tsub.Unsubscribe()
		return nil, fmt.Errorf("dashboard: subscribe %s: %w", failSubject, err)
	}
	// The subscriptions are in place once the server has them (a connection
	// still being made sends them when it is).
	if err := nc.Flush(); err != nil && nc.IsConnected() {
		_ = tsub.Unsubscribe()
		_ = fsub.Unsubscribe()
		return nil, fmt.Errorf("dashboard: subscribe: %w", err)
	}
	d.mu.Lock()
	d.subs = append(d.subs, tsub, fsub)
	d.mu.Unlock()

	p, err := newPoller(nc, d.opts)
	if err != nil {
		_ = tsub.Unsubscribe()
		_ = fsub.Unsubscribe()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		p.run(ctx, func(st FleetState) {
			d.mu.Lock()
			d.fleet = st
			d.mu.Unlock()
		})
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			d.mu.Lock()
			defer d.mu.Unlock()
			for _, s := range []*nats.Subscription{tsub, fsub} {
				if n, err := s.Dropped(); err == nil {
					d.dropped += int64(n)
				}
				_ = s.Unsubscribe()
			}
			d.subs = deleteSubs(d.subs, tsub, fsub)
		})
	}, nil
}

func deleteSubs(subs []*nats.Subscription, gone ...*nats.Subscription) []*nats.Subscription {
	out := subs[:0]
	for _, s := range subs {
		keep := true
		for _, g := range gone {
			keep = keep && s != g
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// Snapshot returns what the page shows now, with the series of rng
// (RangeRecent or RangeLong; anything else is RangeRecent).
func (d *Dashboard) Snapshot(rng string) Snapshot {
	if rng != RangeLong {
		rng = RangeRecent
	}
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Snapshot{Time: now, Run: d.opts.Run, Fleet: d.fleet}
	d.agg.fill(&s, now, rng)
	s.Totals.Dropped = d.dropped
	for _, sub := range d.subs {
		if n, err := sub.Dropped(); err == nil {
			s.Totals.Dropped += int64(n)
		}
	}
	return s
}

// Close ends the event streams being served; the handler's other pages
// keep working.
func (d *Dashboard) Close() { d.closeOnce.Do(func() { close(d.done) }) }

func (d *Dashboard) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(d.Snapshot(r.URL.Query().Get("range"))); err != nil {
		d.opts.Logger.Debug("dashboard: write snapshot", "err", err)
	}
}

// eventWriteTimeout bounds each write of the event stream, so a client that
// stopped reading does not hold its handler for ever.
const eventWriteTimeout = 10 * time.Second

// serveEvents sends a snapshot at once and then every Options.Push, as
// Server-Sent Events, until the client goes away or the dashboard closes.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // no buffering in a reverse proxy
	rng := r.URL.Query().Get("range")
	send := func(first bool) error {
		data, err := json.Marshal(d.Snapshot(rng))
		if err != nil {
			return fmt.Errorf("dashboard: encode snapshot: %w", err)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if first {
			// A browser that lost the stream reconnects after 2 s.
			if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data); err != nil {
			return err
		}
		return rc.Flush()
	}
	tick := time.NewTicker(d.opts.Push)
	defer tick.Stop()
	for first := true; ; first = false {
		if err := send(first); err != nil {
			d.opts.Logger.Debug("dashboard: event stream ended", "err", err)
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		}
	}
}

// Server is a dashboard served over HTTP.
type Server struct {
	d   *Dashboard
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
}

// Listen serves d's Handler on addr ("host:port"; port 0 picks a free
// one) until Close.
func Listen(d *Dashboard, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen: %w", err)
	}
	s := &Server{d: d, ln: ln, srv: &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.opts.Logger.Error("dashboard: serve", "err", err)
		}
	})
	return s, nil
}

// URL is the page's address.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/" }

// Close ends the event streams and shuts the server down, waiting up to
// 5 s for requests in progress.
func (s *Server) Close() error {
	s.d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("dashboard: shut down: %w", err)
	}
	return nil
}
