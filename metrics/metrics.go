// Package metrics exposes a rollfleet process to Prometheus: the metric
// families of the actors it runs, of its NATS connection and streams, and
// of the Go runtime, on an HTTP server with /metrics, /healthz (the process
// is alive) and /readyz (it can work: connected to NATS, its streams
// present and, for an LLM worker, a model endpoint healthy).
//
// Counters and histograms are fed where the work happens, through the
// actors' hooks (Env, LLM, Collector) and the bus's observer (ObserveBus);
// the rest is read at scrape time from the actors' own counters
// (WatchEnv, WatchLLM, WatchCollector) and from JetStream (WatchNATS).
// A nil *Metrics is valid and measures nothing.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rollfleet/rollfleet/bus"
)

// Namespace prefixes every rollfleet metric name.
const Namespace = "rollfleet"

// Bucket bounds of the latency histograms, in seconds.
var (
	// modelBuckets cover a model call: a cached short completion to a long
	// generation on a loaded server.
	modelBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	// tokenizeBuckets cover a tokenize call.
	tokenizeBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5}
	// stepBuckets cover an env step: a built-in game's microseconds to a
	// remote env's seconds.
	stepBuckets = []float64{.000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// publishBuckets cover a JetStream publish, retries included.
	publishBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20}
	// stalenessBuckets are policy versions.
	stalenessBuckets = []float64{0, 1, 2, 3, 4, 6, 8, 16}
	// rewardBuckets cover the usual reward range.
	rewardBuckets = []float64{-1, -0.5, 0, 0.25, 0.5, 0.75, 1}
)

// Metrics holds a process's metric families and readiness checks. Create
// it with New.
type Metrics struct {
	reg *prometheus.Registry

	// Bus.
	publish       prometheus.Observer
	publishErrors prometheus.Counter
	retries       prometheus.Counter

	// Env workers.
	started, resumed, turns    *prometheus.CounterVec
	promptTokens, actionTokens *prometheus.CounterVec
	finished, failed           *prometheus.CounterVec
	step                       *prometheus.HistogramVec
	envMu                      sync.RWMutex
	envs                       map[string]*episodeObserver

	// LLM workers.
	generate, tokenize *prometheus.HistogramVec
	modelErrors        *prometheus.CounterVec

	// Collectors.
	trajectories, successes, failures *prometheus.CounterVec
	staleness                         prometheus.Observer
	reward                            *prometheus.HistogramVec

	// Readers of output records.
	recordsRead, recordsMalformed *prometheus.CounterVec

	readiness readiness
	policies  policies
	streams   sync.Once
}

// New makes the metric families of a process, with the Go runtime, process
// and build collectors, in a registry of their own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), envs: map[string]*episodeObserver{}}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		&m.policies,
	)
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}

	m.publish = histogram("jetstream_publish_duration_seconds", "Time to store one message in JetStream, retries included.", publishBuckets).WithLabelValues()
	m.publishErrors = counter("jetstream_publish_errors_total", "JetStream publishes that failed after their retries.").WithLabelValues()
	m.retries = counter("jetstream_retries_total", "JetStream calls repeated after a transient error (no leader, reconnecting, timeout).").WithLabelValues()

	m.started = counter("episodes_started_total", "Episode deliveries an env worker started (a redelivered episode counts again).", "env")
	m.resumed = counter("episodes_resumed_total", "Deliveries that resumed an episode from the last turn an earlier delivery stored.", "env")
	m.finished = counter("episodes_finished_total", "Episodes an env worker played to their end, by the last turn's finish reason (decided: an earlier delivery had).", "env", "reason")
	m.failed = counter("episodes_failed_total", "Episodes an env worker recorded as failed, by failure kind.", "env", "kind")
	m.turns = counter("turns_total", "Turns played and stored.", "env")
	m.promptTokens = counter("prompt_tokens_total", "Tokens of the prompts sent to the model, each turn's whole prompt.", "env")
	m.actionTokens = counter("action_tokens_total", "Tokens the model generated as actions.", "env")
	m.step = histogram("env_step_duration_seconds", "Time an env took to step on an action.", stepBuckets, "env")

	m.generate = histogram("generate_duration_seconds", "Time of one completion call to a model endpoint, failed calls included.", modelBuckets, "endpoint")
	m.tokenize = histogram("tokenize_duration_seconds", "Time of one tokenize call to a model endpoint, failed calls included.", tokenizeBuckets, "endpoint")
	m.modelErrors = counter("model_errors_total", "Calls to a model endpoint that failed.", "endpoint", "op")

	m.trajectories = counter("trajectories_total", "Trajectories the collector stored.", "env")
	m.successes = counter("trajectory_successes_total", "Stored trajectories of episodes the env judged won.", "env")
	m.failures = counter("failures_total", "Failure records the collector stored, by kind.", "kind")
	m.staleness = histogram("trajectory_staleness_versions", "Policy versions between the first and the last turn of a stored trajectory.", stalenessBuckets).WithLabelValues()
	m.reward = histogram("trajectory_reward", "Reward of stored trajectories.", rewardBuckets, "env")

	m.recordsRead = counter("records_read_total", "Output records a reader took from its stream and acknowledged, by kind.", "kind")
	m.recordsMalformed = counter("records_malformed_total", "Output records a reader could not decode or write (acknowledged all the same), by kind.", "kind")
	return m
}

// ObserveBus makes this process's JetStream publishes and retries feed m
// (see bus.SetObserver); restore puts back the observer it replaced.
func (m *Metrics) ObserveBus() (restore func()) {
	if m == nil {
		return func() {}
	}
	old := bus.SetObserver(busObserver{m})
	return func() { bus.SetObserver(old) }
}

// busObserver feeds the bus's measurements to m.
type busObserver struct{ m *Metrics }

func (o busObserver) Published(d time.Duration, err error) {
	o.m.publish.Observe(d.Seconds())
	if err != nil {
		o.m.publishErrors.Inc()
	}
}

func (o busObserver) Retried() { o.m.retries.Inc() }
