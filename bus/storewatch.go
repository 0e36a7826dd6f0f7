package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Store watch defaults.
const (
	// DefaultStoreCheckInterval is how often WatchStore looks at the store.
	DefaultStoreCheckInterval = time.Second
	// DefaultStoreMinFree is the free space the store's file system must
	// have before WatchStore restarts JetStream on it: room for a few of the
	// largest message blocks the server writes, so that a restart does not
	// run straight into the next "no space left on device".
	DefaultStoreMinFree = 64 << 20
)

// ErrStoreNotWritable means the store's file system does not take writes
// yet: it is full (or has less than the minimum free space), read-only, or
// the probe file could not be written for another reason.
var ErrStoreNotWritable = errors.New("bus: JetStream store not writable")

// StoreWatchOptions configures WatchStore. Zero values take the defaults
// noted.
type StoreWatchOptions struct {
	// Interval between two looks at the store (default
	// DefaultStoreCheckInterval).
	Interval time.Duration
	// MinFree is the free space, in bytes, the store's file system must
	// have before JetStream is restarted on it (default
	// DefaultStoreMinFree).
	MinFree int64
	// Logger receives one line per change of the store's state; nil
	// discards them.
	Logger *slog.Logger
}

// Restart pacing: a store that fails again soon after a restart is
// restarted again only after a pause that doubles each time, up to
// maxRestartBackoff; a store that stays healthy for stableAfter starts over
// from firstRestartBackoff.
const (
	firstRestartBackoff = time.Second
	maxRestartBackoff   = 2 * time.Minute
	stableAfter         = 5 * time.Minute
)

// probeSize is what the probe writes (and syncs) into the store directory.
const probeSize = 64 << 10

// probeName is the probe file, in the store directory beside the server's
// own "jetstream" directory.
const probeName = ".rollfleet-store-probe"

// WatchStore watches the JetStream store of s, a server started with
// StartServer(opts), and restarts JetStream once its store takes writes
// again after it stopped taking them. It returns when ctx ends or the
// server has shut down; the caller owns it and runs it beside the server.
//
// nats-server (2.15) does not recover from a full or read-only disk by
// itself. On a single server, the first write that fails with "no space
// left on device" or "read-only file system" is kept by the stream as a
// critical write error: every later publish to that stream fails the same
// way, with no reply to the publisher (it times out), until JetStream is
// restarted, however much space there is by then. A write refused for
// permissions, and on a cluster one out of space, shut JetStream down
// ("will be DISABLED") until it is enabled again. And JetStream's own store
// limit, set from the free disk space when it started unless configured,
// stays as small as it was after the disk has grown, refusing publishes with
// "insufficient resources".
//
// WatchStore sees each of these (a stream's write error in the server's
// health report, JetStream disabled, the store limit reached while the
// file system has grown) and waits until the store's file system has
// MinFree bytes free and a probe file can be written and synced there; then
// it shuts JetStream down (keeping its state) and enables it again with the
// server's configuration. Streams and consumers are recovered from the
// store (the tests check that every message acknowledged before the fault
// is still there). Clients keep their connections: publishes that timed
// out meanwhile succeed when retried.
func WatchStore(ctx context.Context, s *server.Server, opts ServerOptions, wopts StoreWatchOptions) error {
	sopts, err := opts.serverOptions()
	if err != nil {
		return err
	}
	if wopts.Interval <= 0 {
		wopts.Interval = DefaultStoreCheckInterval
	}
	if wopts.MinFree <= 0 {
		wopts.MinFree = DefaultStoreMinFree
	}
	if wopts.Logger == nil {
		wopts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &storeWatch{
		s: s, cfg: jetStreamConfig(sopts), dir: sopts.StoreDir,
		dynamicMax: sopts.JetStreamMaxStore <= 0,
		minFree:    wopts.MinFree, log: wopts.Logger.With("src", "storewatch"),
		backoff: firstRestartBackoff,
	}
	t := time.NewTicker(wopts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !s.Running() {
			return nil
		}
		w.check(time.Now())
	}
}

// jetStreamConfig is the JetStream configuration nats-server starts with
// for o (as server.Start builds it).
func jetStreamConfig(o *server.Options) server.JetStreamConfig {
	return server.JetStreamConfig{
		StoreDir:     o.StoreDir,
		SyncInterval: o.SyncInterval,
		SyncAlways:   o.SyncAlways,
		Strict:       !o.NoJetStreamStrict,
		MaxMemory:    o.JetStreamMaxMemory,
		MaxStore:     o.JetStreamMaxStore,
		Domain:       o.JetStreamDomain,
		CompressOK:   true,
		UniqueTag:    o.JetStreamUniqueTag,
	}
}

// storeWatch is WatchStore's state, owned by its goroutine.
type storeWatch struct {
	s          *server.Server
	cfg        server.JetStreamConfig // to enable JetStream with
	dir        string                 // the store directory (the server's StoreDir)
	dynamicMax bool                   // the store limit comes from the free space at start
	minFree    int64
	log        *slog.Logger

	fault   string    // what is wrong with the store; empty while it is healthy
	since   time.Time // when the fault was first seen
	waiting string    // why the store was last found not writable, as logged
	settled bool      // JetStream was seen disabled on the previous look too

	restarts    int       // restarts during this fault
	next        time.Time // no restart before this
	backoff     time.Duration
	lastRestart time.Time
}

// check looks at the store once and acts on what it finds.
func (w *storeWatch) check(now time.Time) {
	fault, limit, ready := w.diagnose()
	if fault == "" {
		if w.fault != "" {
			w.log.Info("JetStream store healthy again", "after", now.Sub(w.since).Round(time.Millisecond), "restarts", w.restarts)
			w.fault, w.waiting, w.restarts = "", "", 0
		}
		if !w.lastRestart.IsZero() && now.Sub(w.lastRestart) > stableAfter {
			w.backoff, w.lastRestart = firstRestartBackoff, time.Time{}
		}
		return
	}
	if w.fault == "" {
		w.fault, w.since = fault, now
		w.log.Error("JetStream store fault; JetStream will be restarted once the store takes writes again", "fault", fault)
	}
	if !ready || now.Before(w.next) {
		return
	}
	if err := w.writable(limit); err != nil {
		if msg := err.Error(); msg != w.waiting {
			w.waiting = msg
			w.log.Warn("waiting for the JetStream store to take writes", "err", err)
		}
		return
	}
	w.waiting = ""
	w.restarts++
	w.lastRestart = now
	w.next = now.Add(w.backoff)
	w.backoff = min(2*w.backoff, maxRestartBackoff)
	w.log.Warn("restarting JetStream: its store takes writes again", "fault", fault, "down", now.Sub(w.since).Round(time.Millisecond), "restart", w.restarts)
	if err := w.restart(); err != nil {
		w.log.Error("restart JetStream", "err", err, "retry_in", w.next.Sub(now))
	}
}

// jetStreamDisabled is the fault while the server has JetStream off.
const jetStreamDisabled = "JetStream is disabled (the server shuts it down when a store write fails)"

// diagnose reports what keeps the store from taking writes, if anything.
// limit is set when the fault is JetStream's own store limit; ready is
// false while the fault must not be acted on yet.
func (w *storeWatch) diagnose() (fault string, limit *storeLimit, ready bool) {
	s := w.s
	if !s.JetStreamEnabled() {
		// The server shuts JetStream down in a goroutine of its own: act
		// only once that is over (no configuration left) on two looks in a
		// row.
		gone := s.JetStreamConfig() == nil
		ready, w.settled = gone && w.settled, gone
		return jetStreamDisabled, nil, ready
	}
	w.settled = false
	// A stream's write error is sticky, and its health entry is the only
	// place the server shows it.
	h := s.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			return e.Error, nil, true
		}
	}
	if !s.JetStreamEnabled() {
		// Disabled between the two looks (the health check then reports
		// no stream at all): not healthy, acted on at the next look.
		w.settled = false
		return jetStreamDisabled, nil, false
	}
	if !w.dynamicMax {
		return "", nil, true
	}
	jsz, err := s.Jsz(nil)
	if err == nil && jsz.Disabled {
		return jetStreamDisabled, nil, false
	}
	if err != nil || jsz.Config.MaxStore <= 0 {
		return "", nil, true
	}
	used, max := int64(jsz.Store), jsz.Config.MaxStore
	if used < max-max/100 {
		return "", nil, true // room left: publishes are refused once used exceeds max
	}
	return fmt.Sprintf("JetStream store limit reached: %d of %d bytes used (a limit set from the free disk space when JetStream started)", used, max),
		&storeLimit{used: used, max: max}, true
}

// storeLimit is JetStream's own store limit and what it holds.
type storeLimit struct{ used, max int64 }

// writable reports whether the store's file system takes writes again: it
// has minFree bytes free (and, when the fault is JetStream's own limit,
// enough to raise that limit by a tenth on restart) and a probe file can be
// written and synced in the store directory.
func (w *storeWatch) writable(limit *storeLimit) error {
	free, err := freeSpace(w.statDir())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStoreNotWritable, err)
	}
	if free >= 0 && free < w.minFree {
		return fmt.Errorf("%w: %d bytes free, want %d", ErrStoreNotWritable, free, w.minFree)
	}
	if limit != nil && free >= 0 {
		// nats-server sets a dynamic limit to 3/4 of the free space plus
		// 3/4 of what the store already holds.
		if next := (free + limit.used) / 4 * 3; next < limit.max+limit.max/10 {
			return fmt.Errorf("%w: the store limit would stay at %d bytes (%d bytes free); the file system has not grown", ErrStoreNotWritable, next, free)
		}
	}
	if err := probe(w.dir); err != nil {
		return fmt.Errorf("%w: %v", ErrStoreNotWritable, err)
	}
	return nil
}

// statDir is the directory whose file system holds the store.
func (w *storeWatch) statDir() string {
	if d := filepath.Join(w.dir, server.JetStreamStoreDir); dirExists(d) {
		return d
	}
	return w.dir
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// probe writes, syncs and removes a file in dir.
func probe(dir string) (err error) {
	name := filepath.Join(dir, probeName)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if rerr := os.Remove(name); err == nil {
			err = rerr
		}
	}()
	if _, err := f.Write(make([]byte, probeSize)); err != nil {
		return err
	}
	return f.Sync()
}

// restart shuts JetStream down, keeping its state on disk, and enables it
// again with the server's configuration: the streams and consumers are
// recovered from the store without the write errors they had.
func (w *storeWatch) restart() error {
	if w.s.JetStreamEnabled() {
		if err := w.s.ShutdownJetStream(); err != nil {
			return fmt.Errorf("bus: shut JetStream down: %w", err)
		}
	}
	cfg := w.cfg // EnableJetStream changes the config it is given
	if err := w.s.EnableJetStream(&cfg); err != nil {
		return fmt.Errorf("bus: enable JetStream: %w", err)
	}
	return nil
}
