package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/fleetstatus"
	"github.com/rollfleet/rollfleet/messages"
)

// FleetState is what a poll of the fleet found: its workers, its policy
// state and its streams. A part that could not be read says why in its
// Error field and keeps what the last successful poll found.
type FleetState struct {
	// Polled is when the last poll ended (zero before the first).
	Polled       time.Time             `json:"polled"`
	Workers      []Worker              `json:"workers"`
	WorkersError string                `json:"workers_error,omitempty"`
	Policy       *messages.PolicyState `json:"policy,omitempty"`
	PolicyError  string                `json:"policy_error,omitempty"`
	Streams      []Stream              `json:"streams"`
	StreamsError string                `json:"streams_error,omitempty"`
}

// Worker is an env or LLM worker as the control plane's status requests
// see it: what it last answered, and whether it answered the last request.
type Worker struct {
	messages.WorkerStatus
	// Health is as rollout status judges it for a worker that answered
	// the last status request: "ok" (it applies the fleet's current policy
	// state), "paused" (it applies a pause) or "behind" (an older policy
	// epoch); and "silent" for one that answered an earlier request only. A
	// worker silent for five minutes is forgotten.
	Health   string    `json:"health"`
	LastSeen time.Time `json:"last_seen"`
}

// Stream is a stream's backlog: what it holds and how much each consumer
// has still to read.
type Stream struct {
	Name      string     `json:"name"`
	Messages  uint64     `json:"messages"`
	Bytes     uint64     `json:"bytes"`
	MaxBytes  int64      `json:"max_bytes"`
	Consumers []Consumer `json:"consumers"`
	// MoreConsumers counts the consumers left out of Consumers.
	MoreConsumers int `json:"more_consumers,omitempty"`
}

// Consumer is one consumer of a stream: messages not yet delivered to it
// (Pending) and delivered but not yet acknowledged (AckPending).
type Consumer struct {
	Name       string `json:"name"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
}

// Bounds of what a poll keeps.
const (
	maxWorkers   = 1024
	maxConsumers = 16
	workerForget = 5 * time.Minute
	pollTimeout  = 5 * time.Second
	// healthSilent: a worker known from an earlier poll that did not answer
	// this one (the other health values are fleetstatus's).
	healthSilent = "silent"
)

// poller reads the fleet's state through one connection.
type poller struct {
	opts    Options
	ctl     *control.Client
	js      jetstream.JetStream
	streams []string
	workers map[string]Worker // by kind and id
	last    FleetState
}

func newPoller(nc *nats.Conn, opts Options) (*poller, error) {
	ctl, err := control.NewClient(nc, opts.Subjects)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("dashboard: jetstream: %w", err)
	}
	p := &poller{opts: opts, ctl: ctl, js: js, workers: map[string]Worker{}}
	for _, c := range bus.StreamConfigs(opts.Subjects, bus.StreamOptions{Batches: true}) {
		p.streams = append(p.streams, c.Name)
	}
	return p, nil
}

// run polls at once and then every Options.Poll until ctx ends, handing
// each result to publish.
func (p *poller) run(ctx context.Context, publish func(FleetState)) {
	tick := time.NewTicker(p.opts.Poll)
	defer tick.Stop()
	for {
		st := p.poll(ctx)
		if ctx.Err() != nil {
			return
		}
		publish(st)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// poll reads the workers, the policy state and the streams once.
func (p *poller) poll(ctx context.Context) FleetState {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	st := p.last
	st.WorkersError, st.PolicyError, st.StreamsError = "", "", ""

	now := p.opts.Now()
	if pol, err := p.ctl.State(ctx); err != nil {
		st.PolicyError = err.Error()
	} else {
		st.Policy = &pol
	}
	if ws, err := p.ctl.Workers(ctx); err != nil {
		st.WorkersError = err.Error()
	} else {
		st.Workers = p.mergeWorkers(now, ws, st.Policy)
	}
	streams, err := p.readStreams(ctx)
	if err != nil {
		st.StreamsError = err.Error()
	}
	if streams != nil || err == nil {
		st.Streams = streams
	}
	st.Polled = p.opts.Now()
	p.last = st
	return st
}

// mergeWorkers updates the known workers with the answers of one request,
// judged against the policy state, and returns them, LLM workers first, by
// id.
func (p *poller) mergeWorkers(now time.Time, answers []messages.WorkerStatus, policy *messages.PolicyState) []Worker {
	for k, w := range p.workers {
		w.Health = healthSilent
		if now.Sub(w.LastSeen) > workerForget {
			delete(p.workers, k)
			continue
		}
		p.workers[k] = w
	}
	for _, a := range answers {
		k := a.Kind + "\x00" + a.ID
		if _, ok := p.workers[k]; !ok && len(p.workers) >= maxWorkers {
			continue
		}
		p.workers[k] = Worker{WorkerStatus: a, Health: fleetstatus.Health(a, policy), LastSeen: now}
	}
	out := slices.Collect(maps.Values(p.workers))
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(-cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) // "llm" before "env"
	})
	return out
}

// readStreams returns the backlog of every rollfleet stream that exists.
func (p *poller) readStreams(ctx context.Context) ([]Stream, error) {
	var out []Stream
	var errs []error
	for _, name := range p.streams {
		s, err := p.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // the batches stream exists only for trainers
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		info := s.CachedInfo()
		st := Stream{Name: name, Messages: info.State.Msgs, Bytes: info.State.Bytes, MaxBytes: info.Config.MaxBytes}
		list := s.ListConsumers(ctx)
		for ci := range list.Info() {
			if len(st.Consumers) == maxConsumers {
				st.MoreConsumers++
				continue
			}
			st.Consumers = append(st.Consumers, Consumer{Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending})
		}
		if err := list.Err(); err != nil {
			errs = append(errs, fmt.Errorf("consumers of %s: %w", name, err))
		}
		slices.SortFunc(st.Consumers, func(a, b Consumer) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, st)
	}
	return out, errors.Join(errs...)
}
