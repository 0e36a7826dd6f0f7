package vllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// ErrNoLoad means the server's /metrics is missing or reports neither of
// vLLM's scheduler gauges (vllm:num_requests_running and
// vllm:num_requests_waiting).
var ErrNoLoad = errors.New("vllm: no scheduler gauges in /metrics")

// Load is a server's scheduler state as its GET /metrics reports it.
type Load struct {
	// Running and Waiting are the requests in the model's batches and those
	// queued for one, summed over the server's engines.
	Running, Waiting float64
	// KVCacheUsage is the fraction of the KV cache in use, in [0, 1]
	// (vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc before vLLM
	// 0.10; the largest of the engines'), or -1 when not reported.
	KVCacheUsage float64
}

// The gauges Load reads.
var (
	gaugeRunning  = []byte("vllm:num_requests_running")
	gaugeWaiting  = []byte("vllm:num_requests_waiting")
	gaugeKVUsage  = []byte("vllm:kv_cache_usage_perc")
	gaugeGPUUsage = []byte("vllm:gpu_cache_usage_perc")
)

// Load reads the server's scheduler state from GET /metrics (Prometheus'
// text format). A server without /metrics, or whose metrics lack the
// scheduler gauges, fails with ErrNoLoad.
func (c *Client) Load(ctx context.Context) (Load, error) {
	buf, err := c.do(ctx, c.metricsURL, nil)
	if err != nil {
		if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", ErrNoLoad, err)
		}
		return Load{}, opError("metrics", c.metricsURL, err)
	}
	defer putBuffer(buf)
	l, err := ParseLoad(buf.Bytes())
	if err != nil {
		return Load{}, opError("metrics", c.metricsURL, err)
	}
	return l, nil
}

// ParseLoad reads the scheduler gauges from a /metrics body in Prometheus'
// text format. A sample of those gauges that cannot be parsed, or a value
// that is not a finite non-negative number, fails with ErrBadResponse; a
// body with neither request gauge fails with ErrNoLoad.
func ParseLoad(data []byte) (Load, error) {
	l := Load{KVCacheUsage: -1}
	gpuUsage := -1.0
	found := false
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimLeft(line, " \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, rest := metricName(line)
		var dst *float64
		switch {
		case bytes.Equal(name, gaugeRunning):
			dst = &l.Running
		case bytes.Equal(name, gaugeWaiting):
			dst = &l.Waiting
		case bytes.Equal(name, gaugeKVUsage), bytes.Equal(name, gaugeGPUUsage):
		default:
			continue
		}
		v, err := sampleValue(rest)
		if err != nil {
			return Load{}, fmt.Errorf("%w: %s: %w", ErrBadResponse, name, err)
		}
		switch {
		case dst != nil:
			*dst += v
			found = true
		case bytes.Equal(name, gaugeKVUsage):
			l.KVCacheUsage = max(l.KVCacheUsage, min(v, 1))
		default:
			gpuUsage = max(gpuUsage, min(v, 1))
		}
	}
	if !found {
		return Load{}, ErrNoLoad
	}
	if math.IsInf(l.Running, 0) || math.IsInf(l.Waiting, 0) {
		return Load{}, fmt.Errorf("%w: request gauges sum to infinity", ErrBadResponse)
	}
	if l.KVCacheUsage < 0 {
		l.KVCacheUsage = gpuUsage
	}
	return l, nil
}

// metricName splits a sample line into its metric name and the rest.
func metricName(line []byte) (name, rest []byte) {
	i := bytes.IndexAny(line, "{ \t")
	if i < 0 {
		return line, nil
	}
	return line[:i], line[i:]
}

// sampleValue reads the value of a sample from what follows its name: an
// optional label set, then the value, then an optional timestamp.
func sampleValue(rest []byte) (float64, error) {
	if len(rest) > 0 && rest[0] == '{' {
		end, err := labelsEnd(rest)
		if err != nil {
			return 0, err
		}
		rest = rest[end:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return 0, errors.New("want a value and at most a timestamp after the labels")
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("value %q is not a finite non-negative number", fields[0])
	}
	return v, nil
}

// labelsEnd returns the index just past the label set that b starts with,
// skipping quoted label values (which may hold braces and escaped quotes).
func labelsEnd(b []byte) (int, error) {
	quoted := false
	for i := 1; i < len(b); i++ {
		switch {
		case quoted && b[i] == '\\':
			i++ // the escaped character
		case b[i] == '"':
			quoted = !quoted
		case !quoted && b[i] == '}':
			return i + 1, nil
		}
	}
	return 0, errors.New("unterminated label set")
}
