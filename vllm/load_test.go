package vllm

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"

	"github.com/rollfleet/rollfleet/toyllm"
)

// vllmMetrics is an excerpt of a vLLM 0.11 /metrics body with two engines
// (data parallel) and a histogram around the gauges.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 120.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 118.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-8B"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.71
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.69
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="Qwen/Qwen3-8B"} 12.0
`

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want Load
		err  error
	}{
		{"vLLM, two engines", vllmMetrics, Load{Running: 238, Waiting: 3, KVCacheUsage: 0.71}, nil},
		{"older vLLM: gpu_cache_usage_perc", "vllm:num_requests_running{model_name=\"m\"} 5\nvllm:num_requests_waiting{model_name=\"m\"} 0\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n",
			Load{Running: 5, KVCacheUsage: 0.25}, nil},
		{"the newer name wins", "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.5\n",
			Load{Running: 1, KVCacheUsage: 0.5}, nil},
		{"no KV usage, no labels, a timestamp", "vllm:num_requests_waiting 7 1736000000000\n", Load{Waiting: 7, KVCacheUsage: -1}, nil},
		{"usage above 1 is full", "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 1.5\n", Load{Running: 1, KVCacheUsage: 1}, nil},
		{"quoted braces and escapes in labels", "vllm:num_requests_running{model_name=\"a}\\\"b{\"} 4\r\n", Load{Running: 4, KVCacheUsage: -1}, nil},
		{"similar names are other metrics", "vllm:num_requests_running_total 9\nvllm:num_requests_waiting_by_reason{reason=\"x\"} 2\n", Load{}, ErrNoLoad},
		{"empty", "", Load{}, ErrNoLoad},
		{"negative", "vllm:num_requests_running -1\n", Load{}, ErrBadResponse},
		{"NaN", "vllm:num_requests_waiting NaN\n", Load{}, ErrBadResponse},
		{"no value", "vllm:num_requests_running{a=\"b\"}\n", Load{}, ErrBadResponse},
		{"unterminated labels", "vllm:num_requests_running{a=\"}\" 3\n", Load{}, ErrBadResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLoad([]byte(tc.body))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	_, c := toyServer(t, toyllm.Options{MaxConcurrent: 4})
	l, err := c.Load(context.Background())
	if err != nil || l != (Load{}) {
		t.Fatalf("idle stand-in: %+v, %v", l, err)
	}
	c404, _ := server(t, reply(http.StatusNotFound, `{"detail":"Not Found"}`))
	if _, err := c404.Load(context.Background()); !errors.Is(err, ErrNoLoad) {
		t.Errorf("no /metrics: %v, want ErrNoLoad", err)
	}
	c503, _ := server(t, reply(http.StatusServiceUnavailable, ``))
	if _, err := c503.Load(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("503: %v, want ErrUnavailable", err)
	}
}

func FuzzParseLoad(f *testing.F) {
	for _, s := range []string{vllmMetrics, "vllm:num_requests_running{a=\"\\\\\"} 1e3 5\n", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc +Inf\n", "#\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLoad(data)
		if err != nil {
			if !errors.Is(err, ErrBadResponse) && !errors.Is(err, ErrNoLoad) {
				t.Fatalf("error %v is neither ErrBadResponse nor ErrNoLoad", err)
			}
			return
		}
		for _, v := range []float64{l.Running, l.Waiting} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("load %+v", l)
			}
		}
		if l.KVCacheUsage != -1 && !(l.KVCacheUsage >= 0 && l.KVCacheUsage <= 1) {
			t.Fatalf("KV usage %v", l.KVCacheUsage)
		}
	})
}
