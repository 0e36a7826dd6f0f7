package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// errNotConnected is the readiness of a process that has no NATS
// connection to check yet (it is still connecting).
var errNotConnected = errors.New("not connected to NATS yet")

// readiness holds a process's readiness checks.
type readiness struct {
	mu     sync.Mutex
	checks []check
}

type check struct {
	name string
	fn   func(context.Context) error
}

func (r *readiness) add(name string, fn func(context.Context) error) {
	r.mu.Lock()
	r.checks = append(r.checks, check{name, fn})
	r.mu.Unlock()
}

// check runs the checks in the order they were added and returns the first
// failure. Without a NATS connection to check, the process is not ready.
func (r *readiness) check(ctx context.Context) error {
	r.mu.Lock()
	checks := r.checks
	r.mu.Unlock()
	if len(checks) == 0 {
		return errNotConnected
	}
	for _, c := range checks {
		if err := c.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// Ready reports whether the process is ready (see WatchNATS and WatchLLM),
// and if not, why.
func (m *Metrics) Ready(ctx context.Context) error {
	if m == nil {
		return errNotConnected
	}
	return m.readiness.check(ctx)
}

// streamCheckTTL is how long a stream lookup's result answers readiness
// probes: a probe every second costs the server a few lookups at most.
const streamCheckTTL = time.Second

// WatchNATS makes readiness depend on nc being connected and the fleet's
// streams (those of bus.StreamConfigs) being present, and adds, on its
// first call, the streams' sizes and their consumers' pending counts,
// read from JetStream at scrape time (at most every two seconds).
func (m *Metrics) WatchNATS(nc *nats.Conn, js jetstream.JetStream, subj messages.Subjects) {
	if m == nil {
		return
	}
	var names []string
	for _, c := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		names = append(names, c.Name)
	}
	m.readiness.add("nats", func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("connection %s", st)
		}
		return nil
	})
	var mu sync.Mutex
	var checked time.Time
	var last error
	m.readiness.add("streams", func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(checked) < streamCheckTTL {
			return last
		}
		last = nil
		for _, name := range names {
			if _, err := js.Stream(ctx, name); err != nil {
				last = fmt.Errorf("stream %s: %w", name, err)
				break
			}
		}
		checked = time.Now()
		return last
	})
	m.streams.Do(func() {
		m.reg.MustRegister(&streamCollector{nc: nc, js: js, names: names})
	})
}

// streamCacheTTL is how long a scrape's reading of the streams is reused.
const streamCacheTTL = 2 * time.Second

// Stream and consumer families, read from JetStream at scrape time.
var (
	streamMessages     = desc("stream_messages", "Messages a stream holds.", "stream")
	streamBytes        = desc("stream_bytes", "Bytes a stream holds.", "stream")
	consumerPending    = desc("consumer_pending_messages", "Messages of the stream a consumer has yet to be delivered.", "stream", "consumer")
	consumerAckPending = desc("consumer_ack_pending_messages", "Messages delivered to a consumer and not yet acknowledged.", "stream", "consumer")
)

// streamCollector reads the fleet's streams and their consumers when
// scraped, caching the reading briefly. A role that may not list
// consumers reports the streams alone.
type streamCollector struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names []string

	mu      sync.Mutex
	read    time.Time
	metrics []prometheus.Metric
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamMessages, streamBytes, consumerPending, consumerAckPending} {
		ch <- d
	}
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.read) >= streamCacheTTL {
		c.metrics = c.readStreams()
		c.read = time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// readStreams reads the streams, within two seconds in all; nothing while
// the connection is down (a request would only wait for its timeout).
func (c *streamCollector) readStreams() []prometheus.Metric {
	if c.nc.Status() != nats.CONNECTED {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []prometheus.Metric
	for _, name := range c.names {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			continue // left out of this scrape; the readiness check (/readyz) names it
		}
		info := st.CachedInfo()
		out = append(out,
			prometheus.MustNewConstMetric(streamMessages, prometheus.GaugeValue, float64(info.State.Msgs), name),
			prometheus.MustNewConstMetric(streamBytes, prometheus.GaugeValue, float64(info.State.Bytes), name))
		consumers := st.ListConsumers(ctx)
		for ci := range consumers.Info() {
			out = append(out,
				prometheus.MustNewConstMetric(consumerPending, prometheus.GaugeValue, float64(ci.NumPending), name, ci.Name),
				prometheus.MustNewConstMetric(consumerAckPending, prometheus.GaugeValue, float64(ci.NumAckPending), name, ci.Name))
		}
	}
	return out
}
