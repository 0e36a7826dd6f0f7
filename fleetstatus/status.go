// Package fleetstatus reads a fleet's state at a glance and follows its
// results as they arrive, for `rollout status` and `rollout tail` and for
// any other program that shows a fleet (a dashboard, say).
//
// Collect gathers a Snapshot: every rollfleet stream and its consumers, the
// workers that answer the control plane's status request, the policy state,
// the trainer's batches and the runs with work in the streams. A Snapshot
// has a JSON form (its json tags) and a text form (WriteText). Collect only
// reads: it creates no stream and no consumer, so it never takes records
// from the work-queue streams' readers.
//
// Tail prints the trajectories, groups or failure records published on the
// fleet as JSON lines, from a core NATS subscription (no consumer).
package fleetstatus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// Snapshot is the fleet's state as one Collect saw it.
type Snapshot struct {
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// Server is the NATS server's name and version.
	Server string `json:"server,omitempty"`
	// Prefix is the fleet's subject prefix.
	Prefix string `json:"prefix"`
	// Streams are the rollfleet streams that exist, in bus.StreamConfigs
	// order; Missing names those that do not.
	Streams []Stream `json:"streams"`
	Missing []string `json:"missing_streams,omitempty"`
	// Policy is the fleet's policy state; nil without a control stream.
	Policy *messages.PolicyState `json:"policy,omitempty"`
	// Workers are the workers that answered the status request, LLM
	// workers first, by id; Kinds sums them up per kind.
	Workers []Worker     `json:"workers"`
	Kinds   []WorkerKind `json:"worker_kinds"`
	// Batches are the trainer's batches kept (submitted, not closed),
	// oldest first.
	Batches []trainer.BatchStatus `json:"batches"`
	// Runs are the runs (rollout run's runs and trainer batches alike) with
	// episodes, steps, decisions, records or readers in the streams, by id.
	Runs []Run `json:"runs"`
	// Errors lists the parts of the state that could not be read; the rest
	// of the snapshot stands.
	Errors []string `json:"errors,omitempty"`
}

// Stream is one stream's configuration limits and state.
type Stream struct {
	Name     string   `json:"name"`
	Subjects []string `json:"subjects"`
	// Retention is "limits", "workqueue" or "interest"; Discard "new" or
	// "old".
	Retention string `json:"retention"`
	Discard   string `json:"discard"`
	Replicas  int    `json:"replicas"`
	// Messages and Bytes are what the stream holds now.
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// MaxBytes, MaxMsgs and MaxMsgsPerSubject are -1 when unlimited;
	// MaxAgeSeconds 0 when unlimited.
	MaxBytes          int64   `json:"max_bytes"`
	MaxMsgs           int64   `json:"max_msgs"`
	MaxMsgsPerSubject int64   `json:"max_msgs_per_subject"`
	MaxAgeSeconds     float64 `json:"max_age_seconds"`
	// Consumers are the stream's consumers, by name.
	Consumers []Consumer `json:"consumers"`
}

// Full reports how full the stream is against its byte limit, in [0, 1];
// 0 when it has none.
func (s Stream) Full() float64 {
	if s.MaxBytes <= 0 {
		return 0
	}
	return float64(s.Bytes) / float64(s.MaxBytes)
}

// Consumer is one consumer's counts.
type Consumer struct {
	Name string `json:"name"`
	// Filters are its filter subjects; Run is the run they select, empty
	// when they take every run's.
	Filters []string `json:"filters,omitempty"`
	Run     string   `json:"run,omitempty"`
	// Pending counts the messages not yet delivered; AckPending those
	// delivered and not yet acknowledged; Redelivered those delivered more
	// than once and not yet acknowledged; Waiting the pull requests
	// waiting.
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
	// Delivered counts deliveries (redeliveries included) so far.
	Delivered uint64 `json:"delivered"`
	// LastActive is when a message was last delivered, if ever.
	LastActive *time.Time `json:"last_active,omitempty"`
}

// Worker is one worker's answer to the status request, with its health.
type Worker struct {
	messages.WorkerStatus
	// Health is HealthOK, HealthPaused or HealthBehind.
	Health string `json:"health"`
}

// Worker health.
const (
	// HealthOK: the worker applies the fleet's current policy state and
	// generates.
	HealthOK = "ok"
	// HealthPaused: it applies a pause.
	HealthPaused = "paused"
	// HealthBehind: it has not applied the current policy state yet (an
	// older epoch); a worker that stays behind missed an announcement.
	HealthBehind = "behind"
)

// WorkerKind sums up the workers of one kind.
type WorkerKind struct {
	Kind     string `json:"kind"`
	Workers  int    `json:"workers"`
	InFlight int64  `json:"in_flight"`
	Held     int64  `json:"held"`
	Paused   int    `json:"paused"`
	Behind   int    `json:"behind"`
}

// Run is one run's work in the streams. Counts come from the streams'
// subjects: what a stream holds of the run now.
type Run struct {
	ID string `json:"id"`
	// Kind is RunKindRun (rollout run's readers or env workers read it),
	// RunKindBatch (a trainer batch) or empty (only its leftovers are seen).
	Kind string `json:"kind,omitempty"`
	// Episodes is the batch's episode count from its manifest; 0 for other
	// runs, whose size is not stored on the fleet.
	Episodes int `json:"episodes,omitempty"`
	// Queued counts its episodes in the episodes work queue: submitted and
	// not yet finished by an env worker (those being played included).
	Queued uint64 `json:"queued"`
	// Playing counts its episodes with steps stored and no decision yet.
	Playing int `json:"playing"`
	// Decided counts its episodes decided within the decisions' max age
	// (an hour by default).
	Decided int `json:"decided"`
	// Trajectories, Groups and Failures count its records waiting for a
	// reader (or for a reader's acknowledgement).
	Trajectories uint64 `json:"trajectories_waiting"`
	Groups       uint64 `json:"groups_waiting"`
	Failures     uint64 `json:"failures_waiting"`
	// Readers are the consumers that read only this run, with their
	// pending counts.
	Readers []Reader `json:"readers,omitempty"`
}

// Active reports whether the run has work left in the fleet: episodes
// queued or playing, or records waiting.
func (r Run) Active() bool {
	return r.Queued > 0 || r.Playing > 0 || r.Trajectories > 0 || r.Groups > 0 || r.Failures > 0
}

// Reader is a consumer of one run.
type Reader struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
}

// Run kinds.
const (
	RunKindRun   = "run"
	RunKindBatch = "batch"
)

// Options configures Collect.
type Options struct {
	// Subjects names the fleet's subjects (default prefix "rf").
	Subjects messages.Subjects
}

// Collect reads the fleet's state through nc. It fails when the server
// cannot be asked at all (no JetStream, a dead connection); a part that
// cannot be read (the policy state, the batches) is noted in
// Snapshot.Errors instead.
func Collect(ctx context.Context, nc *nats.Conn, opts Options) (*Snapshot, error) {
	subj := opts.Subjects
	if subj.Prefix == "" {
		subj = messages.NewSubjects("")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleetstatus: jetstream: %w", err)
	}
	snap := &Snapshot{
		Time: time.Now().UTC(), Prefix: subj.Prefix,
		Streams: []Stream{}, Workers: []Worker{}, Kinds: []WorkerKind{},
		Batches: []trainer.BatchStatus{}, Runs: []Run{},
	}
	if info := nc.ConnectedServerName(); info != "" {
		snap.Server = info + " " + nc.ConnectedServerVersion()
	}
	runs := runSet{}
	have := map[string]jetstream.Stream{}
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{Batches: true}) {
		st, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			snap.Missing = append(snap.Missing, cfg.Name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fleetstatus: stream %s: %w", cfg.Name, err)
		}
		have[cfg.Name] = st
		s, err := readStream(ctx, st, subj, runs)
		if err != nil {
			return nil, err
		}
		snap.Streams = append(snap.Streams, s)
	}
	if err := countRuns(ctx, have, subj, runs); err != nil {
		return nil, err
	}

	// The policy, the workers and the batches: the trainer's status has all
	// three when the batches stream exists (one status request either way).
	var workers []messages.WorkerStatus
	_, hasControl := have[subj.StreamControl()]
	if _, hasBatches := have[subj.StreamBatches()]; hasBatches && hasControl {
		tc, err := trainer.New(nc, trainer.Options{Subjects: subj})
		if err != nil {
			return nil, fmt.Errorf("fleetstatus: %w", err)
		}
		st, err := tc.Status(ctx)
		if err != nil {
			snap.Errors = append(snap.Errors, fmt.Sprintf("trainer status: %v", err))
		} else {
			snap.Policy, workers, snap.Batches = &st.Policy, st.Workers, st.Batches
		}
	}
	if snap.Policy == nil {
		cc, err := control.NewClient(nc, subj)
		if err != nil {
			return nil, fmt.Errorf("fleetstatus: %w", err)
		}
		if hasControl {
			if p, err := cc.State(ctx); err != nil {
				snap.Errors = append(snap.Errors, fmt.Sprintf("policy state: %v", err))
			} else {
				snap.Policy = &p
			}
		}
		if workers, err = cc.Workers(ctx); err != nil {
			return nil, fmt.Errorf("fleetstatus: workers: %w", err)
		}
	}
	snap.Workers, snap.Kinds = workerHealth(workers, snap.Policy)
	for _, b := range snap.Batches {
		r := runs.get(b.Manifest.BatchID)
		r.Kind, r.Episodes = RunKindBatch, int(b.Manifest.Episodes)
	}
	snap.Runs = runs.sorted()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fleetstatus: %w", err)
	}
	return snap, nil
}

// readStream reads a stream's info and its consumers, and files the
// consumers that read one run under it.
func readStream(ctx context.Context, st jetstream.Stream, subj messages.Subjects, runs runSet) (Stream, error) {
	info := st.CachedInfo()
	cfg := info.Config
	s := Stream{
		Name: cfg.Name, Subjects: cfg.Subjects,
		Retention: strings.ToLower(cfg.Retention.String()), Discard: strings.ToLower(strings.TrimPrefix(cfg.Discard.String(), "Discard")),
		Replicas: cfg.Replicas, Messages: info.State.Msgs, Bytes: info.State.Bytes,
		MaxBytes: cfg.MaxBytes, MaxMsgs: cfg.MaxMsgs, MaxMsgsPerSubject: cfg.MaxMsgsPerSubject,
		MaxAgeSeconds: cfg.MaxAge.Seconds(), Consumers: []Consumer{},
	}
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		c := Consumer{
			Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
			Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting, Delivered: ci.Delivered.Consumer,
			LastActive: ci.Delivered.Last,
		}
		c.Filters = ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			c.Filters = []string{ci.Config.FilterSubject}
		}
		c.Run = filterRun(subj, c.Filters)
		if c.Run != "" {
			r := runs.get(c.Run)
			switch {
			case strings.HasPrefix(c.Name, "batch-"):
				r.Kind = RunKindBatch
			case r.Kind == "":
				r.Kind = RunKindRun
			}
			r.Readers = append(r.Readers, Reader{Stream: s.Name, Consumer: c.Name, Pending: c.Pending, AckPending: c.AckPending})
		}
		s.Consumers = append(s.Consumers, c)
	}
	if err := lister.Err(); err != nil {
		return s, fmt.Errorf("fleetstatus: consumers of %s: %w", s.Name, err)
	}
	slices.SortFunc(s.Consumers, func(a, b Consumer) int { return cmp.Compare(a.Name, b.Name) })
	return s, nil
}

// filterRun returns the run every filter selects, or "" when they select
// more than one run (or none in particular).
func filterRun(subj messages.Subjects, filters []string) string {
	run := ""
	for i, f := range filters {
		r, ok := subjectRun(subj, f)
		if !ok || r == "*" || r == ">" || (i > 0 && r != run) {
			return ""
		}
		run = r
	}
	if run == "" {
		return ""
	}
	id, err := messages.ParseToken(run)
	if err != nil {
		return ""
	}
	return id
}

// subjectRun returns the run token of a subject (or filter) of the form
// <prefix>.<kind>.<run>.…, unparsed.
func subjectRun(subj messages.Subjects, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, subj.Prefix+".")
	if !ok {
		return "", false
	}
	_, rest, ok = strings.Cut(rest, ".") // the kind
	if !ok {
		return "", false
	}
	run, _, ok := strings.Cut(rest, ".")
	return run, ok
}

// countRuns counts each run's messages in the streams whose subjects carry
// the run: episodes queued, episodes with steps, decisions, and records
// waiting.
func countRuns(ctx context.Context, have map[string]jetstream.Stream, subj messages.Subjects, runs runSet) error {
	count := func(stream, filter string, add func(r *Run, msgs uint64)) error {
		st, ok := have[stream]
		if !ok {
			return nil
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return fmt.Errorf("fleetstatus: subjects of %s: %w", stream, err)
		}
		for subject, n := range info.State.Subjects {
			tok, ok := subjectRun(subj, subject)
			if !ok {
				continue
			}
			run, err := messages.ParseToken(tok)
			if err != nil {
				continue
			}
			add(runs.get(run), n)
		}
		return nil
	}
	for _, c := range []struct {
		stream, filter string
		add            func(r *Run, msgs uint64)
	}{
		{subj.StreamEpisodes(), subj.EpisodesAll(), func(r *Run, n uint64) { r.Queued += n }},
		// One subject per episode: steps are purged once it is decided.
		{subj.StreamSteps(), subj.StepsAll(), func(r *Run, _ uint64) { r.Playing++ }},
		{subj.StreamDecided(), subj.DecidedAll(), func(r *Run, _ uint64) { r.Decided++ }},
		{subj.StreamTrajectories(), subj.TrajectoriesAll(), func(r *Run, n uint64) { r.Trajectories += n }},
		{subj.StreamGroups(), subj.GroupsAll(), func(r *Run, n uint64) { r.Groups += n }},
		{subj.StreamFailures(), subj.FailuresAll(), func(r *Run, n uint64) { r.Failures += n }},
	} {
		if err := count(c.stream, c.filter, c.add); err != nil {
			return err
		}
	}
	return nil
}

// runSet collects runs by id.
type runSet map[string]*Run

func (s runSet) get(id string) *Run {
	r, ok := s[id]
	if !ok {
		r = &Run{ID: id}
		s[id] = r
	}
	return r
}

func (s runSet) sorted() []Run {
	out := make([]Run, 0, len(s))
	for _, r := range s {
		slices.SortFunc(r.Readers, func(a, b Reader) int {
			return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Consumer, b.Consumer))
		})
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Run) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Health judges a worker's answer against the fleet's policy state (nil
// when none is known): HealthBehind, HealthPaused or HealthOK.
func Health(w messages.WorkerStatus, policy *messages.PolicyState) string {
	switch {
	case policy != nil && w.Epoch < policy.Epoch:
		return HealthBehind
	case w.Paused:
		return HealthPaused
	}
	return HealthOK
}

// workerHealth judges each worker against the policy state and sums them
// up per kind (LLM workers first).
func workerHealth(ws []messages.WorkerStatus, policy *messages.PolicyState) ([]Worker, []WorkerKind) {
	out := make([]Worker, 0, len(ws))
	kinds := []WorkerKind{}
	for _, w := range ws {
		h := Health(w, policy)
		out = append(out, Worker{WorkerStatus: w, Health: h})
		i := slices.IndexFunc(kinds, func(k WorkerKind) bool { return k.Kind == w.Kind })
		if i < 0 {
			kinds = append(kinds, WorkerKind{Kind: w.Kind})
			i = len(kinds) - 1
		}
		k := &kinds[i]
		k.Workers++
		k.InFlight += w.InFlight
		k.Held += w.Held
		if w.Paused {
			k.Paused++
		}
		if h == HealthBehind {
			k.Behind++
		}
	}
	return out, kinds
}
