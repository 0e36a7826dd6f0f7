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

// ServerOptions configures an embedded NATS server with JetStream.
type ServerOptions struct {
	// Name is the server name; empty lets NATS pick one.
	Name string
	// Host and Port to listen on. Port -1 picks a free port; 0 means 4222.
	Host string
	Port int
	// DontListen serves in-process connections only (no TCP), which is the
	// fastest way to run everything in one process.
	DontListen bool
	// DataDir is the JetStream store directory. Required: an empty one would
	// silently land in the system temp directory.
	DataDir string
	// MaxPayload defaults to DefaultMaxPayload.
	MaxPayload int32
	// ReadyTimeout defaults to 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines; nil discards them.
	Logger *slog.Logger
}

// StartServer starts an embedded NATS server with JetStream and waits until it
// accepts connections. The caller owns it and stops it with Shutdown.
func StartServer(opts ServerOptions) (*server.Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("bus: ServerOptions.DataDir is required")
	}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("bus: create data dir: %w", err)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	sopts := &server.Options{
		ServerName: opts.Name,
		Host:       opts.Host,
		Port:       opts.Port,
		DontListen: opts.DontListen,
		JetStream:  true,
		StoreDir:   opts.DataDir,
		MaxPayload: opts.MaxPayload,
		NoSigs:     true,
		NoLog:      opts.Logger == nil,
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("bus: new server: %w", err)
	}
	if opts.Logger != nil {
		s.SetLoggerV2(&slogAdapter{l: opts.Logger}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(opts.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("%w after %s (data dir %q; check it is writable)", ErrNotReady, opts.ReadyTimeout, opts.DataDir)
	}
	return s, nil
}

// Shutdown stops an embedded server and waits for it to finish.
func Shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// ConnectInProcess connects to an embedded server without TCP.
func ConnectInProcess(s *server.Server, name string) (*nats.Conn, error) {
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bus: in-process connect: %w", err)
	}
	return nc, nil
}

// Connect dials a comma-separated list of NATS URLs with the settings a
// long-running fleet process wants: retry the first connect, reconnect forever,
// and log connection changes.
func Connect(urls, name string, log *slog.Logger) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(urls,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("nats async error", "subject", subj, "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", urls, err)
	}
	return nc, nil
}

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
