// Package bus holds rollfleet's NATS plumbing: the embedded server, client
// connections with fleet-friendly reconnect settings, and the JetStream
// streams every actor relies on.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultMaxPayload is the largest message the embedded server accepts. NATS
// defaults to 1 MiB, which a long trajectory or a group can exceed.
const DefaultMaxPayload = 8 << 20

// ErrNotReady means the embedded server did not become ready in time. A bad
// store directory is the usual cause; the server's own log says more.
var ErrNotReady = errors.New("bus: embedded NATS server not ready")

// SyncAlways is the Sync policy that syncs every write before it is
// acknowledged: the default, and the one under which an acknowledged
// episode, step or trajectory survives a power loss.
const SyncAlways = "always"

// TempStoreSync is the sync policy for a store in a temp dir that is
// removed when its process ends, and so never read after a crash: syncing
// it would buy nothing. It is nats-server's own default interval.
const TempStoreSync = "2m"

// serverSyncInterval is nats-server's default sync interval, TempStoreSync.
const serverSyncInterval = 2 * time.Minute

// ErrBadSync means a Sync policy is neither SyncAlways nor a positive
// duration.
var ErrBadSync = errors.New("bus: sync must be \"always\" or a positive duration such as 2m")

// ParseSync reads a Sync policy: SyncAlways, or the interval between
// syncs. For SyncAlways, interval is nats-server's default, which it then
// uses only for its periodic index syncs.
func ParseSync(policy string) (always bool, interval time.Duration, err error) {
	if strings.EqualFold(policy, SyncAlways) {
		return true, serverSyncInterval, nil
	}
	d, err := time.ParseDuration(policy)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("%w, got %q", ErrBadSync, policy)
	}
	return false, d, nil
}

// ServerOptions configures an embedded NATS server with JetStream.
type ServerOptions struct {
	// Name is the server name; empty lets NATS pick one. A cluster node
	// needs one, unique in its cluster and the same across restarts:
	// JetStream knows its peers by name.
	Name string
	// Host and Port to listen on. Port -1 picks a free port; 0 means 4222.
	Host string
	Port int
	// DontListen serves in-process connections only (no TCP), which is the
	// fastest way to run everything in one process.
	DontListen bool
	// DataDir is the JetStream store directory. Required unless ConfigFile
	// names one: an empty one would silently land in the system temp
	// directory.
	DataDir string
	// MaxPayload defaults to DefaultMaxPayload.
	MaxPayload int32
	// Sync is when JetStream writes what it stores to disk (ParseSync):
	// SyncAlways, before it acknowledges each write, or an interval
	// between syncs ("2m" is nats-server's own default), which on a power
	// loss or an OS crash loses the writes acknowledged in the last
	// interval. Empty means the configuration file's sync_interval, and
	// SyncAlways where it sets none (see docs/reliability.md).
	Sync string
	// ReadyTimeout defaults to 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines; nil discards them.
	Logger *slog.Logger
	// ConfigFile names a nats-server configuration file (accounts, users and
	// their permissions, TLS, limits) to start from. The fields above
	// override its settings where they are set; Host, Port, DataDir and
	// MaxPayload keep the file's values where they are not (Host then
	// defaults to 127.0.0.1 only if the file names none). JetStream is on
	// either way.
	ConfigFile string

	// ClusterName names the cluster the server joins (default
	// DefaultClusterName when it joins one). Every node of a cluster has
	// the same.
	ClusterName string
	// ClusterHost and ClusterPort are where the server accepts routes
	// from the other nodes of its cluster (see docs/cluster.md).
	// ClusterPort 0 means no cluster unless the configuration file sets
	// one up, -1 a free port; ClusterHost defaults to Host.
	ClusterHost string
	ClusterPort int
	// Routes are the route URLs (nats-route://host:port) of the cluster's
	// nodes. JetStream needs at least one; a node's own URL is ignored, so
	// every node can take the same list.
	Routes []string
}

// StartServer starts an embedded NATS server with JetStream and waits until it
// accepts connections. The caller owns it and stops it with Shutdown.
//
// The server holds its data dir's lock (LockFileName in the dir) until it
// has shut down: a second server on the same dir, in this process or
// another, fails with ErrDataDirInUse naming the holder instead of
// corrupting the store.
func StartServer(opts ServerOptions) (*server.Server, error) {
	sopts, err := opts.serverOptions()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(sopts.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("bus: create data dir: %w", err)
	}
	lock, err := lockDataDir(sopts.StoreDir, opts.Logger)
	if err != nil {
		return nil, err
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		lock.unlock()
		return nil, fmt.Errorf("bus: new server: %w", err)
	}
	if opts.Logger != nil {
		s.SetLoggerV2(&slogAdapter{l: opts.Logger}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(opts.ReadyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		lock.unlock()
		return nil, fmt.Errorf("%w after %s (data dir %q; check it is writable)", ErrNotReady, opts.ReadyTimeout, sopts.StoreDir)
	}
	holdLock(s, lock)
	return s, nil
}

// serverOptions turns opts, and the configuration file it names, into the
// server's options.
func (opts ServerOptions) serverOptions() (*server.Options, error) {
	sopts := &server.Options{}
	if opts.ConfigFile != "" {
		var err error
		if sopts, err = server.ProcessConfigFile(opts.ConfigFile); err != nil {
			return nil, fmt.Errorf("bus: server config: %w", err)
		}
	}
	if opts.Name != "" {
		sopts.ServerName = opts.Name
	}
	switch {
	case opts.Host != "":
		sopts.Host = opts.Host
	case sopts.Host == "":
		sopts.Host = "127.0.0.1"
	}
	if opts.Port != 0 || opts.ConfigFile == "" {
		sopts.Port = opts.Port
	}
	if opts.DontListen {
		sopts.DontListen = true
	}
	if opts.DataDir != "" {
		sopts.StoreDir = opts.DataDir
	}
	if sopts.StoreDir == "" {
		// An empty one would silently land in the system temp directory.
		return nil, errors.New("bus: ServerOptions.DataDir is required (or a store_dir in the config file)")
	}
	switch {
	case opts.MaxPayload != 0:
		sopts.MaxPayload = opts.MaxPayload
	case sopts.MaxPayload == 0:
		sopts.MaxPayload = DefaultMaxPayload
	}
	if err := opts.clusterOptions(sopts); err != nil {
		return nil, err
	}
	switch {
	case opts.Sync != "":
		always, interval, err := ParseSync(opts.Sync)
		if err != nil {
			return nil, err
		}
		sopts.SyncAlways, sopts.SyncInterval = always, interval
	case !sopts.SyncAlways && sopts.SyncInterval == 0: // the file sets none
		sopts.SyncAlways = true
	}
	sopts.JetStream = true
	sopts.NoSigs = true
	sopts.NoLog = opts.Logger == nil
	return sopts, nil
}

// Shutdown stops an embedded server, waits for it to finish and releases
// its data dir's lock. (A server stopped with its own Shutdown method
// releases the lock a moment after it is done.)
func Shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
	releaseLock(s)
}

// ConnectInProcess connects to an embedded server without TCP. opts, at
// most one, adds credentials for a server started from a configuration
// file with users; TLS does not apply to in-process connections.
func ConnectInProcess(s *server.Server, name string, opts ...ConnectOptions) (*nats.Conn, error) {
	co, err := oneOf(opts)
	if err != nil {
		return nil, err
	}
	if co.TLS != (TLSOptions{}) {
		return nil, fmt.Errorf("%w: TLS does not apply to an in-process connection", ErrConnectOptions)
	}
	auth, err := co.credentials()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1)}, auth...)...)
	if err != nil {
		return nil, co.Explain("in-process", err)
	}
	return nc, nil
}

// oneOf returns the one ConnectOptions of a variadic argument, or the zero
// value for none.
func oneOf(opts []ConnectOptions) (ConnectOptions, error) {
	switch len(opts) {
	case 0:
		return ConnectOptions{}, nil
	case 1:
		return opts[0], nil
	}
	return ConnectOptions{}, fmt.Errorf("%w: at most one ConnectOptions, got %d", ErrConnectOptions, len(opts))
}

// firstErrorWait bounds how long Connect waits to learn why a first connect
// attempt failed; nats.go reports it at once.
const firstErrorWait = 5 * time.Second

// Connect dials a comma-separated list of NATS URLs with the settings a
// long-running fleet process wants: retry the first connect, reconnect forever,
// and log connection changes. opts, at most one, adds credentials and TLS;
// without it Connect authenticates only with what the URLs carry.
//
// A server that is not reachable yet is retried in the background, as is one
// that goes away later. A failure no retry can mend ends Connect with an
// error instead: credentials the server refuses (ErrAuthFailed, naming the
// identity refused), a failed TLS handshake (ErrTLSFailed), or a server
// older than MinServerVersion (ErrServerTooOld; one reached only after
// Connect returned is logged, and CheckServerVersion tells the caller). Should the
// server refuse the credentials on a later reconnect, nats.go closes the
// connection after the second refusal; its LastError then says why, and
// ConnectOptions.Explain words it the same way.
func Connect(urls, name string, log *slog.Logger, opts ...ConnectOptions) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	co, err := oneOf(opts)
	if err != nil {
		return nil, err
	}
	auth, err := co.natsOptions()
	if err != nil {
		return nil, err
	}
	if co.TLS.Insecure {
		log.Warn("TLS server verification is disabled: use this for tests only")
	}
	// first receives why the first connect attempt failed; failures counts
	// the attempts that failed in a row, so that a server that stays away
	// is logged now and then rather than at every attempt or never.
	first := make(chan error, 1)
	var failures atomic.Int64
	nopts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case first <- err:
			default:
			}
			n := failures.Add(1)
			if n == 1 && permanent(err) {
				return // Connect returns it
			}
			if n == 1 || n%reconnectLogEvery == 0 {
				log.Warn("nats connect failed; retrying", "urls", redactURLs(urls), "attempts", n, "err", co.Explain(urls, err))
			}
		}),
		nats.ConnectHandler(func(c *nats.Conn) {
			failures.Store(0)
			if c.IsClosed() {
				return // refused by Connect before this ran
			}
			log.Info("nats connected", "url", c.ConnectedUrlRedacted(), "server_version", c.ConnectedServerVersion())
			logTooOld(log, c)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			failures.Store(0)
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted(), "server_version", c.ConnectedServerVersion())
			logTooOld(log, c)
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			// A close the caller did not ask for: nats.go gives up on
			// credentials refused twice in a row.
			if err := c.LastError(); permanent(err) {
				log.Error("nats connection closed", "err", co.Explain(urls, err))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"err", err}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			switch {
			case errors.Is(err, nats.ErrPermissionViolation):
				log.Error("nats permission denied: the server's permissions for this user do not allow it", attrs...)
			case isAuthError(err):
				log.Error("nats refused the credentials", "err", co.Explain(urls, err))
			default:
				log.Error("nats async error", attrs...)
			}
		}),
	}, auth...)
	nc, err := nats.Connect(urls, nopts...)
	if err != nil {
		return nil, co.Explain(urls, err)
	}
	if nc.IsConnected() {
		if err := CheckServerVersion(nc); err != nil {
			nc.Close()
			return nil, err
		}
		return nc, nil
	}
	// The first attempt failed and nats.go retries in the background; it
	// reports why at once. Only an unreachable server is worth waiting for.
	t := time.NewTimer(firstErrorWait)
	defer t.Stop()
	select {
	case err := <-first:
		if permanent(err) {
			nc.Close()
			return nil, co.Explain(urls, err)
		}
	case <-t.C:
	}
	return nc, nil
}

// logTooOld logs a server older than MinServerVersion that a connection
// reached after Connect returned; the process's own check
// (CheckServerVersion once connected) decides what to do about it.
func logTooOld(log *slog.Logger, nc *nats.Conn) {
	if err := CheckServerVersion(nc); err != nil {
		log.Error("nats server too old", "err", err)
	}
}

// reconnectLogEvery is how many failed attempts in a row pass between two
// log lines about them: about every 10 s at the reconnect wait.
const reconnectLogEvery = 40

// Drain drains a connection and waits (bounded by ctx) until it is closed, so
// in-flight handlers finish and pending publishes are flushed.
func Drain(ctx context.Context, nc *nats.Conn) error {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return fmt.Errorf("bus: drain: %w", err)
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("bus: drain: %w", ctx.Err())
	}
}

// slogAdapter routes nats-server's printf-style logger to slog.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...), "src", "nats") }
func (a *slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...), "src", "nats") }
func (a *slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "src", "nats") }
func (a *slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "src", "nats") }
func (a *slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "src", "nats") }
func (a *slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "src", "nats") }
