package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// Standing is a fleet that stays up to play whatever episodes are submitted
// to it, of any run: an embedded NATS server (or an external one), an LLM
// worker, an env worker, a collector and, without VLLM URLs, the stand-in
// model. A trainer submits batches to it and reads their outcomes.
type Standing struct {
	stack   cleanup
	connect func(name string) (*nats.Conn, error)
}

// StartStanding starts a standing fleet as Run starts its own, with the
// options Run takes for its server and actors (NATS, NATSAuth, DataDir,
// VLLM, Model, LLMMaxInFlight, LLMRouting, LLMRoutingWait, Concurrency,
// MaxDeliver, Remote, ToyLLM, Filter, Streams, Logger); the options that describe episodes are
// ignored. ctx bounds the start; Close stops the fleet.
func StartStanding(ctx context.Context, opts Options) (_ *Standing, err error) {
	opts.Episodes, opts.Dataset = 0, ""
	opts.setDefaults()
	s := &Standing{}
	defer func() {
		if err != nil {
			s.stack.run()
		}
	}()
	if s.connect, err = startBus(&s.stack, opts); err != nil {
		return nil, err
	}
	nc, err := s.connect("standing")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: jetstream: %w", err)
	}
	if err := bus.EnsureStreams(ctx, js, messages.NewSubjects(""), opts.Streams); errors.Is(err, bus.ErrStreamMismatch) {
		opts.Logger.Warn("streams left as they are", "err", err)
	} else if err != nil {
		return nil, err
	}
	// The fleet outlives ctx, which bounds only its start.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stack.push(stop)
	if _, err := startActors(runCtx, &s.stack, opts, "", s.connect); err != nil {
		return nil, err
	}
	opts.Logger.Log(ctx, slog.LevelDebug, "standing fleet started")
	return s, nil
}

// Connect opens a named connection to the fleet's server; it is closed
// (drained) by Close, after the actors have stopped.
func (s *Standing) Connect(name string) (*nats.Conn, error) { return s.connect(name) }

// Close stops the actors (the env worker first, so episodes in flight end or
// are handed back), drains the connections and shuts the embedded server
// down.
func (s *Standing) Close() { s.stack.run(); s.stack.fns = nil }
