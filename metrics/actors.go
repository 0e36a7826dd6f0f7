package metrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/vllm"
)

// Env is the hook of an env worker (envactor.Options.Metrics); nil for a
// nil m.
func (m *Metrics) Env() envactor.Metrics {
	if m == nil {
		return nil
	}
	return envHook{m}
}

type envHook struct{ m *Metrics }

// Episode returns env's observer, made on the env's first episode: each
// turn then feeds counters and a histogram already resolved.
func (h envHook) Episode(env string) envactor.EpisodeMetrics {
	m := h.m
	m.envMu.RLock()
	o := m.envs[env]
	m.envMu.RUnlock()
	if o != nil {
		return o
	}
	m.envMu.Lock()
	defer m.envMu.Unlock()
	if o = m.envs[env]; o == nil {
		// Every kind at 0 from the env's first episode on, so that rate()
		// and increase() count its first failure too.
		for _, kind := range envFailureKinds {
			m.failed.WithLabelValues(env, kind)
		}
		o = &episodeObserver{
			m: m, env: env,
			started: m.started.WithLabelValues(env), resumed: m.resumed.WithLabelValues(env),
			turns: m.turns.WithLabelValues(env), promptTokens: m.promptTokens.WithLabelValues(env),
			actionTokens: m.actionTokens.WithLabelValues(env), step: m.step.WithLabelValues(env),
		}
		m.envs[env] = o
	}
	return o
}

// envFailureKinds are the failure kinds an env worker records (see
// messages.StepEvent's FailureKind): its closed set of kind labels.
var envFailureKinds = []string{messages.FailureEpisode, messages.FailurePromptTooLong, messages.FailureStale}

// failureKinds are all the kinds of failure records, the closed set of the
// collector's kind labels.
var failureKinds = append([]string{messages.FailureMalformed, messages.FailureInvariant}, envFailureKinds...)

// episodeObserver is the observer of one env's episodes.
type episodeObserver struct {
	m                          *Metrics
	env                        string
	started, resumed, turns    prometheus.Counter
	promptTokens, actionTokens prometheus.Counter
	step                       prometheus.Observer
}

func (o *episodeObserver) Started() { o.started.Inc() }
func (o *episodeObserver) Resumed() { o.resumed.Inc() }

func (o *episodeObserver) Turn(prompt, action int, step time.Duration) {
	o.turns.Inc()
	if prompt > 0 {
		o.promptTokens.Add(float64(prompt))
	}
	if action > 0 {
		o.actionTokens.Add(float64(action))
	}
	o.step.Observe(step.Seconds())
}

func (o *episodeObserver) Finished(reason string) {
	if reason == "" {
		reason = "unknown"
	}
	o.m.finished.WithLabelValues(o.env, reason).Inc()
}

func (o *episodeObserver) Failed(kind string) { o.m.failed.WithLabelValues(o.env, kind).Inc() }

// LLM is the hook of an LLM worker (llm.Options.Metrics); nil for a nil m.
func (m *Metrics) LLM() llm.Metrics {
	if m == nil {
		return nil
	}
	return llmHook{m}
}

type llmHook struct{ m *Metrics }

// Endpoint returns the observer of the endpoint at url, its histograms and
// counters resolved once.
func (h llmHook) Endpoint(url string) vllm.Observer {
	return &endpointObserver{
		generate: h.m.generate.WithLabelValues(url), tokenize: h.m.tokenize.WithLabelValues(url),
		generateErrors: h.m.modelErrors.WithLabelValues(url, "generate"),
		tokenizeErrors: h.m.modelErrors.WithLabelValues(url, "tokenize"),
	}
}

type endpointObserver struct {
	generate, tokenize             prometheus.Observer
	generateErrors, tokenizeErrors prometheus.Counter
}

func (o *endpointObserver) Completed(d time.Duration, err error) {
	o.generate.Observe(d.Seconds())
	if err != nil {
		o.generateErrors.Inc()
	}
}

func (o *endpointObserver) Tokenized(d time.Duration, err error) {
	o.tokenize.Observe(d.Seconds())
	if err != nil {
		o.tokenizeErrors.Inc()
	}
}

// Collector is the hook of a collector (collector.Options.Metrics); nil for
// a nil m.
func (m *Metrics) Collector() collector.Metrics {
	if m == nil {
		return nil
	}
	return collectorHook{m}
}

type collectorHook struct{ m *Metrics }

func (h collectorHook) Stored(t *messages.Trajectory, f *messages.Failure) {
	m := h.m
	if t != nil {
		m.trajectories.WithLabelValues(t.Env).Inc()
		if t.Success {
			m.successes.WithLabelValues(t.Env).Inc()
		}
		m.staleness.Observe(float64(t.Staleness))
		m.reward.WithLabelValues(t.Env).Observe(t.Reward)
	}
	if f != nil {
		m.failures.WithLabelValues(f.Kind).Inc()
	}
}

// desc describes a family read at scrape time.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// scrape is a prometheus.Collector that reads its values when scraped.
type scrape struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (s *scrape) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

func (s *scrape) Collect(ch chan<- prometheus.Metric) { s.collect(ch) }

func constant(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
}

func boolean(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Policy state gauges, labelled by the actor that follows the state.
var (
	policyVersion = desc("policy_version", "Policy version the actor follows (the fleet's current one).", "actor")
	policyPaused  = desc("policy_paused", "1 while the fleet is paused for a weight sync.", "actor")
)

// policySource is an actor that follows the policy state.
type policySource struct {
	actor string
	state func() (messages.PolicyState, bool)
}

// policies reports the policy state of the watched actors.
type policies struct {
	mu      sync.Mutex
	sources []policySource
}

func (p *policies) add(actor string, state func() (messages.PolicyState, bool)) {
	p.mu.Lock()
	p.sources = append(p.sources, policySource{actor, state})
	p.mu.Unlock()
}

func (p *policies) Describe(ch chan<- *prometheus.Desc) {
	ch <- policyVersion
	ch <- policyPaused
}

func (p *policies) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	sources := p.sources
	p.mu.Unlock()
	for _, s := range sources {
		st, known := s.state()
		if !known {
			continue
		}
		constant(ch, policyVersion, prometheus.GaugeValue, float64(st.Version), s.actor)
		constant(ch, policyPaused, prometheus.GaugeValue, boolean(st.Paused), s.actor)
	}
}

// register registers c, saying which actor a duplicate is.
func (m *Metrics) register(what string, c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			return fmt.Errorf("metrics: a second %s in one process: %w", what, err)
		}
		return fmt.Errorf("metrics: %s: %w", what, err)
	}
	return nil
}

// WatchEnv adds the env worker's state, read when scraped: episodes in
// flight, turns held by a pause, episodes waiting for the store, health,
// stale drops and restarts, and the policy state it follows.
func (m *Metrics) WatchEnv(w *envactor.Worker) error {
	if m == nil {
		return nil
	}
	inFlight := desc("episodes_in_flight", "Episodes the env worker runs now.")
	held := desc("turns_held", "Turns waiting for the fleet to resume.")
	storeWaiting := desc("episodes_store_waiting", "Episodes waiting for the JetStream store to take their steps again.")
	unhealthy := desc("env_worker_unhealthy", "1 while requests keep finding no working LLM worker (no new episodes are taken).")
	malformed := desc("episodes_malformed_total", "Episode requests that could not be decoded.")
	staleDrops := desc("episodes_stale_dropped_total", "Episodes dropped for going past their max_staleness.")
	restarts := desc("episodes_restarted_total", "Plays started over under the restart stale policy.")
	err := m.register("env worker", &scrape{
		descs: []*prometheus.Desc{inFlight, held, storeWaiting, unhealthy, malformed, staleDrops, restarts},
		collect: func(ch chan<- prometheus.Metric) {
			st := w.Stats()
			constant(ch, inFlight, prometheus.GaugeValue, float64(st.InFlight))
			constant(ch, held, prometheus.GaugeValue, float64(st.Held))
			constant(ch, storeWaiting, prometheus.GaugeValue, float64(st.StoreWaiting))
			constant(ch, unhealthy, prometheus.GaugeValue, boolean(st.Unhealthy))
			constant(ch, malformed, prometheus.CounterValue, float64(st.Malformed))
			constant(ch, staleDrops, prometheus.CounterValue, float64(st.StaleDrops))
			constant(ch, restarts, prometheus.CounterValue, float64(st.Restarts))
		},
	})
	if err == nil {
		m.policies.add("envworker", w.Policy)
	}
	return err
}

// WatchLLM adds the LLM worker's state, read when scraped: each model
// endpoint's health and load, its request counters and the policy state
// it follows. Readiness then also wants a healthy model endpoint.
func (m *Metrics) WatchLLM(w *llm.Worker) error {
	if m == nil {
		return nil
	}
	healthy := desc("model_endpoint_healthy", "1 while the model endpoint is healthy, 0 while it is marked down.", "endpoint")
	inFlight := desc("model_endpoint_in_flight", "Requests the model endpoint serves now.", "endpoint")
	capacity := desc("model_endpoint_max_in_flight", "Most requests the worker sends the model endpoint at once.", "endpoint")
	requests := desc("llm_requests_total", "Requests the LLM worker answered, by kind.", "kind")
	retries := desc("llm_retries_total", "Requests retried on another model endpoint after an infrastructure failure.")
	errs := desc("llm_errors_total", "Requests answered with an error.")
	expired := desc("llm_expired_total", "Requests dropped because their deadline had passed (or a pause outlasted it).")
	aborted := desc("llm_aborted_total", "Generations cancelled by an aborting pause (generated again after the resume).")
	err := m.register("LLM worker", &scrape{
		descs: []*prometheus.Desc{healthy, inFlight, capacity, requests, retries, errs, expired, aborted},
		collect: func(ch chan<- prometheus.Metric) {
			for _, e := range w.Endpoints() {
				constant(ch, healthy, prometheus.GaugeValue, boolean(e.Healthy), e.URL)
				constant(ch, inFlight, prometheus.GaugeValue, float64(e.InFlight), e.URL)
				constant(ch, capacity, prometheus.GaugeValue, float64(e.Max), e.URL)
			}
			st := w.Stats()
			for kind, n := range map[string]uint64{"generate": st.Generate, "tokenize": st.Tokenize, "detokenize": st.Detokenize, "info": st.Info} {
				constant(ch, requests, prometheus.CounterValue, float64(n), kind)
			}
			constant(ch, retries, prometheus.CounterValue, float64(st.Retries))
			constant(ch, errs, prometheus.CounterValue, float64(st.Errors))
			constant(ch, expired, prometheus.CounterValue, float64(st.Expired))
			constant(ch, aborted, prometheus.CounterValue, float64(st.Aborted))
		},
	})
	if err != nil {
		return err
	}
	m.policies.add("llmworker", w.Policy)
	m.readiness.add("model endpoints", func(context.Context) error {
		for _, e := range w.Endpoints() {
			if e.Healthy {
				return nil
			}
		}
		return errors.New("no model endpoint is healthy")
	})
	return nil
}

// WatchCollector adds the collector's state, read when scraped: groups by
// outcome, malformed and rejected steps, the episodes it holds, and the
// output streams that refuse records for being full.
func (m *Metrics) WatchCollector(c *collector.Collector) error {
	if m == nil {
		return nil
	}
	groups := desc("groups_total", "Groups whose samples all ended, by outcome (kept: published; filtered: outside the score range; incomplete: a member failed; evicted: dropped unfinished to bound memory).", "outcome")
	malformed := desc("collector_malformed_total", "Step events the collector could not decode.")
	rejected := desc("collector_rejected_total", "Step events ignored as no honest env worker sends them.")
	reloaded := desc("collector_reloaded_total", "Episodes assembled from the steps stream rather than the collector's cache.")
	evicted := desc("collector_evicted_total", "Episodes dropped from the collector's cache (bounds or idleness).")
	cached := desc("collector_cached_episodes", "Episodes whose steps the collector holds.")
	cachedBytes := desc("collector_cached_bytes", "Estimated size of the steps the collector holds.")
	full := desc("output_stream_full", "1 while the output stream of this kind refuses records for being full (nobody reads it).", "kind")
	err := m.register("collector", &scrape{
		descs: []*prometheus.Desc{groups, malformed, rejected, reloaded, evicted, cached, cachedBytes, full},
		collect: func(ch chan<- prometheus.Metric) {
			st := c.Stats()
			for outcome, n := range map[string]uint64{"kept": st.GroupsKept, "filtered": st.GroupsFiltered, "incomplete": st.GroupsIncomplete, "evicted": st.GroupsEvicted} {
				constant(ch, groups, prometheus.CounterValue, float64(n), outcome)
			}
			constant(ch, malformed, prometheus.CounterValue, float64(st.Malformed))
			constant(ch, rejected, prometheus.CounterValue, float64(st.Rejected))
			constant(ch, reloaded, prometheus.CounterValue, float64(st.Reloaded))
			constant(ch, evicted, prometheus.CounterValue, float64(st.Evicted))
			constant(ch, cached, prometheus.GaugeValue, float64(st.InFlight))
			constant(ch, cachedBytes, prometheus.GaugeValue, float64(st.CachedBytes))
			for _, kind := range []string{"trajectory", "failure", "group"} {
				constant(ch, full, prometheus.GaugeValue, boolean(slices.Contains(st.FullStreams, kind)), kind)
			}
		},
	})
	if err == nil {
		// Every kind at 0 from the start: a failure panel has its series
		// before the first failure, and rate() counts that one too.
		for _, kind := range failureKinds {
			m.failures.WithLabelValues(kind)
		}
	}
	return err
}
