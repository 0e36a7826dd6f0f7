// Package cmdutil holds the wiring every rollfleet command shares: logging,
// signal handling and the NATS connection of a fleet process.
package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
	"github.com/rollfleet/rollfleet/tracing"
)

// Fleet holds the flags every fleet process takes.
type Fleet struct {
	NATS string `default:"nats://127.0.0.1:4222" env:"RF_NATS" help:"NATS server URL(s), comma-separated."`
	NATSAuth
	Prefix         string `default:"rf" help:"Subject prefix."`
	Replicas       int    `default:"1" help:"Stream replicas (3 on a JetStream cluster)."`
	StreamMaxBytes int64  `default:"268435456" help:"Size limit of each output stream and of the episodes queue, in bytes; a full stream refuses new messages (-1: unlimited)."`
	StepsMaxBytes  int64  `default:"1073741824" help:"Size limit of the steps stream, in bytes (-1: unlimited)."`
	InitStreams    bool   `help:"Create the missing streams and exit: run once as a user allowed to create streams (the admin) when the others may not."`
	LogLevel       string `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat      string `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
	OTLP           string `placeholder:"URL" help:"Send OpenTelemetry spans to this OTLP/HTTP collector (http://host:4318); off when empty."`
	Metrics        string `placeholder:"ADDR" help:"Serve Prometheus metrics (/metrics), liveness (/healthz) and readiness (/readyz) over HTTP on this address (host:port)."`
	GC
}

// ErrStreamPermission means the user may not look up or create a stream it
// needs: the streams must exist before users without the right to create
// them connect.
var ErrStreamPermission = errors.New("not allowed to set up the streams")

// ErrConnectionClosed means the NATS connection closed for good while the
// process ran, such as when the server refused the credentials on a
// reconnect.
var ErrConnectionClosed = errors.New("nats connection closed")

// Streams is the stream configuration the flags ask for. With
// --init-streams it includes the trainers' batches stream, which the other
// processes never use: the admin makes it with the others, for trainers
// that may not create streams.
func (f *Fleet) Streams() bus.StreamOptions {
	return bus.StreamOptions{Replicas: f.Replicas, MaxBytes: f.StreamMaxBytes, StepsMaxBytes: f.StepsMaxBytes, Batches: f.InitStreams}
}

// Logger returns a text logger on stderr at the given level (see NewLogger).
func Logger(level string) *slog.Logger { return NewLogger(level, LogText) }

// SignalContext is cancelled by SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Connect connects a fleet process, makes sure the streams exist and
// returns the connection, its JetStream context and the subjects. Refused
// credentials and failed TLS end it at once with the flags to check, and a
// server older than bus.MinServerVersion with both versions; a server not
// up yet is waited for.
func (f *Fleet) Connect(ctx context.Context, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, messages.Subjects, error) {
	if err := messages.ValidatePrefix(f.Prefix); err != nil {
		return nil, nil, messages.Subjects{}, fmt.Errorf("--prefix: %w", err)
	}
	subj := messages.NewSubjects(f.Prefix)
	co := f.ConnectOptions()
	nc, err := bus.Connect(f.NATS, name, log, co)
	if err != nil {
		return nil, nil, subj, f.Explain(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, subj, fmt.Errorf("jetstream: %w", err)
	}
	// The first connect may still be retrying in the background, or the
	// server may be restarting: wait for the streams as long as it takes (a
	// fleet process outlives its server), logging now and then.
	for attempt := 0; ; attempt++ {
		// A server too old for the fleet is refused before anything is
		// made on it; one not reached yet is checked on a later attempt.
		if err = bus.CheckServerVersion(nc); err != nil {
			break
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		go watchStreamPermission(sctx, nc, cancel)
		err = bus.EnsureStreams(sctx, js, subj, f.Streams())
		cancel()
		// A stream left as it is because the store's disk is full is
		// waited for like one that could not be made.
		if errors.Is(err, bus.ErrStreamMismatch) && !bus.StoreUnwritable(err) {
			log.Warn("streams left as they are", "err", err)
			err = nil
		}
		if err == nil {
			// Connected now, perhaps only during this attempt.
			err = bus.CheckServerVersion(nc)
			break
		}
		if ctx.Err() != nil {
			break
		}
		if nc.IsClosed() {
			// nats.go gave up, on refused credentials for one.
			err = f.Explain(co.Explain(f.NATS, nc.LastError()))
			break
		}
		if perr := nc.LastError(); streamPermissionError(perr) {
			err = fmt.Errorf("%w: %w (the streams must exist before users that may not create them connect: create them once as the admin user with --init-streams; see docs/security.md)", ErrStreamPermission, perr)
			break
		}
		if attempt%streamWaitLogEvery == 0 {
			log.Warn("waiting for NATS JetStream", "attempts", attempt+1, "err", err)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if err != nil {
		nc.Close()
		return nil, nil, subj, err
	}
	return nc, js, subj, nil
}

// streamPermissionError reports whether err is the server refusing a
// stream lookup or creation.
func streamPermissionError(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "$JS.API.STREAM.")
}

// watchStreamPermission cancels ctx as soon as nc reports a refused stream
// request: the server answers nothing to a request it refuses, so the
// request would otherwise wait for its timeout.
// streamWaitLogEvery is how many waits for the streams pass between two log
// lines about them (each try waits up to 5 s, then half a second).
const streamWaitLogEvery = 30

func watchStreamPermission(ctx context.Context, nc *nats.Conn, cancel context.CancelFunc) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if streamPermissionError(nc.LastError()) {
				cancel()
				return
			}
		}
	}
}

// Process is what a fleet process's body gets: a context cancelled by
// SIGINT/SIGTERM, its connection and logger.
type Process struct {
	Ctx      context.Context
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects messages.Subjects
	Log      *slog.Logger
	// Tracing exports the process's spans (--otlp); nil when off, whose Tracer is nil.
	Tracing *tracing.Exporter
	// Metrics are the process's metrics: nil without --metrics (a nil
	// *metrics.Metrics measures nothing).
	Metrics *metrics.Metrics
}

// Main runs a fleet process: connect, run body until a signal, drain, and
// exit non-zero when anything failed.
func Main(name string, f Fleet, body func(Process) error) {
	log := NewLogger(f.LogLevel, f.LogFormat).With("process", name)
	if err := f.Tune(); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
	if err := run(name, f, log, body); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(name string, f Fleet, log *slog.Logger, body func(Process) error) error {
	sctx, stop := SignalContext()
	defer stop()
	// Spans are sent until the process's last: the exporter stops after the
	// connection has drained.
	exp, stopTracing, err := StartTracing(sctx, f.OTLP, name, log)
	if err != nil {
		return fmt.Errorf("--otlp: %w", err)
	}
	defer stopTracing()
	m, stopMetrics, err := ServeMetrics(f.Metrics, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	nc, js, subj, err := f.Connect(sctx, name, log)
	if err != nil {
		return err
	}
	m.WatchNATS(nc, js, subj)
	if f.InitStreams {
		log.Info("streams ready")
		return drain(nc, nil)
	}
	// A connection that closes for good (nats.go gives up on credentials
	// refused twice on a reconnect) ends the process with the reason,
	// rather than leaving it running without a connection.
	ctx, cancel := context.WithCancelCause(sctx)
	defer cancel(nil)
	nc.SetClosedHandler(func(c *nats.Conn) { cancel(f.closedError(c)) })
	if nc.IsClosed() {
		cancel(f.closedError(nc))
	}
	err = body(Process{Ctx: ctx, NC: nc, JS: js, Subjects: subj, Log: log, Metrics: m, Tracing: exp})
	if nc.IsClosed() {
		// The body may have seen the closed connection before the handler
		// ran: the reason matters more than the body's error.
		return f.closedError(nc)
	}
	return drain(nc, err)
}

// closedError says why nc closed for good.
func (f *Fleet) closedError(nc *nats.Conn) error {
	reason := f.Explain(f.ConnectOptions().Explain(f.NATS, nc.LastError()))
	if reason == nil {
		reason = errors.New("closed by the client")
	}
	return fmt.Errorf("%w: %w", ErrConnectionClosed, reason)
}

// drain drains nc (bounded) and returns err, or the drain's error if err is nil.
func drain(nc *nats.Conn, err error) error {
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if derr := bus.Drain(dctx, nc); derr != nil && err == nil {
		err = derr
	}
	return err
}

// FilterRange turns the --filter flags into a collector score range.
func FilterRange(on bool, bounds []float64) (*collector.ScoreRange, error) {
	if !on {
		return nil, nil
	}
	if len(bounds) != 2 || !(bounds[0] < bounds[1]) {
		return nil, fmt.Errorf("--filter-range wants low,high with low < high, got %v", bounds)
	}
	return &collector.ScoreRange{Low: bounds[0], High: bounds[1]}, nil
}
