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
	"runtime/debug"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// Fleet holds the flags every fleet process takes.
type Fleet struct {
	NATS     string `default:"nats://127.0.0.1:4222" env:"RF_NATS" help:"NATS server URL(s), comma-separated."`
	Prefix   string `default:"rf" help:"Subject prefix."`
	Replicas int    `default:"1" help:"Stream replicas (3 on a JetStream cluster)."`
	LogLevel string `default:"info" enum:"debug,info,warn,error" help:"Log level."`
}

// TuneGC makes the garbage collector run less often than Go's default unless
// GOGC is set: rollout processes allocate many short-lived messages and have
// memory to spare, and collection was a tenth of their CPU time.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// Logger returns a text logger on stderr at the given level.
func Logger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// SignalContext is cancelled by SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Connect connects a fleet process, makes sure the streams exist and
// returns the connection, its JetStream context and the subjects.
func (f *Fleet) Connect(ctx context.Context, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, messages.Subjects, error) {
	if err := messages.ValidatePrefix(f.Prefix); err != nil {
		return nil, nil, messages.Subjects{}, fmt.Errorf("--prefix: %w", err)
	}
	subj := messages.NewSubjects(f.Prefix)
	nc, err := bus.Connect(f.NATS, name, log)
	if err != nil {
		return nil, nil, subj, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, subj, fmt.Errorf("jetstream: %w", err)
	}
	// The first connect may still be retrying in the background: wait for
	// the streams with a bounded loop rather than fail at once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = bus.EnsureStreams(sctx, js, subj, bus.StreamOptions{Replicas: f.Replicas})
		cancel()
		if errors.Is(err, bus.ErrStreamMismatch) {
			log.Warn("streams left as they are", "err", err)
			err = nil
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		log.Warn("waiting for NATS JetStream", "err", err)
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

// Process is what a fleet process's body gets: a context cancelled by
// SIGINT/SIGTERM, its connection and logger.
type Process struct {
	Ctx      context.Context
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects messages.Subjects
	Log      *slog.Logger
}

// Main runs a fleet process: connect, run body until a signal, drain, and
// exit non-zero when anything failed.
func Main(name string, f Fleet, body func(Process) error) {
	TuneGC()
	log := Logger(f.LogLevel).With("process", name)
	if err := run(name, f, log, body); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(name string, f Fleet, log *slog.Logger, body func(Process) error) error {
	ctx, stop := SignalContext()
	defer stop()
	nc, js, subj, err := f.Connect(ctx, name, log)
	if err != nil {
		return err
	}
	err = body(Process{Ctx: ctx, NC: nc, JS: js, Subjects: subj, Log: log})
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
