// Package env is the env worker actor: it pulls EpisodeRequests from
// JetStream, runs each episode as its own actor (one goroutine owning the
// game state for the episode's whole life) and publishes one StepEvent per
// model turn. It holds no game rules: those live in package envs.
package env

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// Options configures a Worker. Zero values take the defaults noted.
type Options struct {
	// Concurrency is the most episodes this worker runs at once (default 256).
	Concurrency int
	// Subjects names subjects and streams (default prefix "rf").
	Subjects messages.Subjects
	// Durable is the shared consumer name all env workers pull from
	// (default "envworker").
	Durable string
	// RequestTimeout bounds one generate or tokenize request (default 180s).
	RequestTimeout time.Duration
	// RequestAttempts is how often a request that found no LLM worker, timed
	// out or came back unavailable is tried before the episode fails
	// (default 4).
	RequestAttempts int
	// AckWait is the redelivery timeout of an episode; the worker signals
	// progress every turn, so it only needs to cover one turn (default 5m).
	AckWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
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
		o.AckWait = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Stats are a worker's counters.
type Stats struct {
	Started, Finished, Failed, Malformed, Turns uint64
	InFlight                                    int64
}

// Worker runs episodes. Create it with New and run it with Run.
type Worker struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	started, finished, failed, malformed, turns atomic.Uint64
	inFlight                                    atomic.Int64
}

// New builds an env worker.
func New(nc *nats.Conn, js jetstream.JetStream, opts Options) *Worker {
	opts.setDefaults()
	return &Worker{nc: nc, js: js, opts: opts, log: opts.Logger.With("actor", "env")}
}

// Stats returns a snapshot of the counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Started: w.started.Load(), Finished: w.finished.Load(), Failed: w.failed.Load(),
		Malformed: w.malformed.Load(), Turns: w.turns.Load(), InFlight: w.inFlight.Load(),
	}
}

// ConsumerConfig is the durable pull consumer the env workers share.
func ConsumerConfig(opts Options) jetstream.ConsumerConfig {
	opts.setDefaults()
	return jetstream.ConsumerConfig{
		Durable:       opts.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       opts.AckWait,
		MaxDeliver:    5,
		MaxAckPending: -1, // each worker bounds itself by Concurrency
		FilterSubject: opts.Subjects.EpisodesAll(),
	}
}

// Run pulls and runs episodes until ctx is cancelled. It then stops pulling,
// hands back (naks) what it pulled but did not start, and waits for running
// episodes to finish their current turn loop.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, w.opts.Subjects.StreamEpisodes(), ConsumerConfig(w.opts))
	if err != nil {
		return fmt.Errorf("env: consumer: %w", err)
	}
	// Pull no more than we can start, so queued episodes stay available to
	// other workers.
	iter, err := cons.Messages(jetstream.PullMaxMessages(max(1, min(w.opts.Concurrency, 256))))
	if err != nil {
		return fmt.Errorf("env: pull: %w", err)
	}
	stopDrain := context.AfterFunc(ctx, iter.Drain)
	defer stopDrain()
	w.log.Info("env worker ready", "concurrency", w.opts.Concurrency)

	slots := make(chan struct{}, w.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	// Episodes outlive a shutdown request: they finish rather than leave
	// half-published state behind.
	work := context.WithoutCancel(ctx)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			nakRest(iter)
			return nil
		}
		msg, err := iter.Next()
		if err != nil {
			<-slots
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if w.nc.IsClosed() {
				return fmt.Errorf("env: pull: %w", nats.ErrConnectionClosed)
			}
			w.log.Warn("pull failed", "err", err)
			continue
		}
		if ctx.Err() != nil {
			<-slots
			_ = msg.Nak()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			w.runEpisode(work, msg)
		})
	}
}

// nakRest returns every message still buffered in a draining iterator to the
// stream so another worker picks it up at once.
func nakRest(iter jetstream.MessagesContext) {
	for {
		m, err := iter.Next()
		if err != nil {
			return
		}
		_ = m.Nak()
	}
}
