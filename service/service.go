// Package service registers fleet processes with the NATS service API
// (nats.go's micro package), so that "nats micro ls", "nats micro info" and
// "nats micro stats" list a fleet's env workers, LLM workers and
// collectors, and their load, with no extra server.
//
// Each actor is a service instance named NamePrefix plus its kind
// ("rollfleet-envworker", "rollfleet-llmworker", "rollfleet-collector"),
// with the worker's id in its metadata. Besides micro's PING, INFO and
// STATS, it has an endpoint "status", on "<prefix>.svc.<kind>.status"
// outside any queue group (every instance answers), which replies with the
// actor's status as JSON; STATS carries the same status as its data. An LLM
// worker's requests (generate, tokenize, tokenize_chat, detokenize,
// model_info) are endpoints of its service too, so STATS counts them; env
// workers and collectors take their work from JetStream, not by request, and
// their counts are in the status.
package service

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/messages"
)

// NamePrefix starts every rollfleet service name.
const NamePrefix = "rollfleet-"

// Kinds of actors, the rest of their service names.
const (
	KindEnv       = "envworker"
	KindLLM       = "llmworker"
	KindCollector = "collector"
)

// Config describes one actor to register.
type Config struct {
	// Kind is the actor's kind (KindEnv, KindLLM, KindCollector).
	Kind string
	// ID is the actor's own id (its status answers name it).
	ID string
	// Subjects gives the prefix of the status endpoint's subject.
	Subjects messages.Subjects
	// Status returns the actor's status, marshalled to JSON for the status
	// endpoint and STATS.
	Status func() any
	// Logger receives the service's errors (a permission refused, say);
	// nil means slog.Default().
	Logger *slog.Logger
}

// Status is what the status endpoint answers (and STATS carries).
type Status struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Policy is the policy state the actor follows, if it follows one.
	Policy *messages.PolicyState `json:"policy,omitempty"`
	// Stats are the actor's counters, by snake_case name (in_flight,
	// full_streams) like every other name here; Endpoints an LLM worker's
	// model endpoints.
	Stats     any                       `json:"stats"`
	Endpoints []messages.EndpointStatus `json:"endpoints,omitempty"`
}

// StatusSubject is the subject of the status endpoint of an actor kind.
func StatusSubject(subj messages.Subjects, kind string) string {
	return subj.Prefix + ".svc." + kind + ".status"
}

// Register registers an actor as a service instance on nc. Stop the
// returned service when the actor stops (closing nc stops it too).
func Register(nc *nats.Conn, cfg Config) (micro.Service, error) {
	if cfg.Subjects.Prefix == "" {
		cfg.Subjects = messages.NewSubjects("")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", NamePrefix+cfg.Kind)
	var warned sync.Once
	svc, err := micro.AddService(nc, micro.Config{
		Name:        NamePrefix + cfg.Kind,
		Version:     Version(),
		Description: descriptions[cfg.Kind],
		Metadata:    map[string]string{"worker_id": cfg.ID, "prefix": cfg.Subjects.Prefix},
		StatsHandler: func(*micro.Endpoint) any {
			return cfg.Status()
		},
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			// A server that refuses the service's subscriptions refuses
			// them all: say so once.
			warned.Do(func() {
				log.Warn("NATS service API unavailable (the service's subscriptions were refused; see docs/observability.md)", "subject", err.Subject, "err", err.Description)
			})
		},
	})
	if err != nil {
		return nil, fmt.Errorf("service: register %s: %w", cfg.Kind, err)
	}
	status := func(r micro.Request) {
		data, err := json.Marshal(cfg.Status())
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		_ = r.Respond(data, micro.WithHeaders(micro.Headers{"Content-Type": []string{"application/json"}}))
	}
	if err := svc.AddEndpoint("status", micro.HandlerFunc(status),
		micro.WithEndpointSubject(StatusSubject(cfg.Subjects, cfg.Kind)), micro.WithEndpointQueueGroupDisabled()); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("service: register %s: status endpoint: %w", cfg.Kind, err)
	}
	return svc, nil
}

var descriptions = map[string]string{
	KindEnv:       "rollfleet env worker: runs episodes' turn loops",
	KindLLM:       "rollfleet LLM worker: forwards generate and tokenize requests to model servers",
	KindCollector: "rollfleet collector: assembles steps into trajectories and groups",
}

// RegisterEnv registers an env worker.
func RegisterEnv(nc *nats.Conn, subj messages.Subjects, w *envactor.Worker, log *slog.Logger) (micro.Service, error) {
	return Register(nc, Config{Kind: KindEnv, ID: w.ID(), Subjects: subj, Logger: log, Status: func() any {
		st := Status{Kind: KindEnv, ID: w.ID(), Stats: snakeFields(w.Stats())}
		if p, ok := w.Policy(); ok {
			st.Policy = &p
		}
		return st
	}})
}

// RegisterLLM registers an LLM worker, before it runs: the worker then
// takes its requests through the service's endpoints (llm.Worker.
// ServeAsService).
func RegisterLLM(nc *nats.Conn, subj messages.Subjects, w *llm.Worker, log *slog.Logger) (micro.Service, error) {
	svc, err := Register(nc, Config{Kind: KindLLM, ID: w.ID(), Subjects: subj, Logger: log, Status: func() any {
		st := Status{Kind: KindLLM, ID: w.ID(), Stats: snakeFields(w.Stats()), Endpoints: w.Endpoints()}
		if p, ok := w.Policy(); ok {
			st.Policy = &p
		}
		return st
	}})
	if err != nil {
		return nil, err
	}
	w.ServeAsService(svc, nc)
	return svc, nil
}

// RegisterCollector registers a collector, under a fresh id.
func RegisterCollector(nc *nats.Conn, subj messages.Subjects, c *collector.Collector, log *slog.Logger) (micro.Service, error) {
	id := "collector-" + nuid.Next()
	return Register(nc, Config{Kind: KindCollector, ID: id, Subjects: subj, Logger: log, Status: func() any {
		return Status{Kind: KindCollector, ID: id, Stats: snakeFields(c.Stats())}
	}})
}

// snakeFields returns the exported fields of stats, a struct of counters
// without JSON tags, under snake_case names: InFlight becomes in_flight.
func snakeFields(stats any) map[string]any {
	v := reflect.ValueOf(stats)
	out := make(map[string]any, v.NumField())
	for f := range v.Type().Fields() {
		if f.IsExported() {
			out[snakeCase(f.Name)] = v.FieldByIndex(f.Index).Interface()
		}
	}
	return out
}

// snakeCase turns a Go field name into snake_case: a word starts at an
// upper-case letter after a lower-case one or a digit, and at the last
// upper-case letter of a run followed by a lower-case one (IDCount:
// id_count).
func snakeCase(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && i+1 < len(r) && unicode.IsLower(r[i+1])) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// semver is the version form micro accepts (semver.org's expression).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Version is the version services register with: the main module's, or
// "0.0.0-dev" for a build that has none (go run, a work tree).
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semver.MatchString(v) {
			return v
		}
	}
	return "0.0.0-dev"
}
