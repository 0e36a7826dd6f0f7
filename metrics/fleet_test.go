package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/metrics"
)

// families is one scrape, parsed.
type families map[string]*dto.MetricFamily

// scrape reads url's /metrics over HTTP and parses it with the Prometheus
// text parser.
func scrape(t testing.TB, base string) families {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value sums the samples of a family whose labels include want: counters
// and gauges by value, histograms by sample count.
func (f families) value(name string, want map[string]string) (float64, bool) {
	fam, ok := f[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
outer:
	for _, m := range fam.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue outer
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

// get fetches path and returns its status and body.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// runFleet runs a job with metrics served over HTTP and returns a scrape
// taken half-way through the run and one after it.
func runFleet(t *testing.T, opts fleet.Options) (srv *metrics.Server, during, after families, sum fleet.Summary) {
	t.Helper()
	m := metrics.New()
	srv, err := m.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	t.Cleanup(m.ObserveBus())
	if code, body := get(t, srv.URL()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not connected") {
		t.Errorf("/readyz before the fleet connected: %d %q", code, body)
	}
	var once sync.Once
	opts.Metrics = m
	opts.DataDir = filepath.Join(t.TempDir(), "nats")
	opts.Progress = func(done, total int) {
		if done >= total/2 {
			once.Do(func() {
				during = scrape(t, srv.URL())
				if code, body := get(t, srv.URL()+"/readyz"); code != http.StatusOK {
					t.Errorf("/readyz during the run: %d %q", code, body)
				}
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err = fleet.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv, during, scrape(t, srv.URL()), sum
}

// TestFamiliesMove runs a fleet with metrics and checks that every family
// fed by the run's work has moved, by as much as the run's own counts
// where they are known.
func TestFamiliesMove(t *testing.T) {
	const env = "game:GuessTheNumber-v0"
	_, during, after, sum := runFleet(t, fleet.Options{Env: env, Episodes: 64, NSamples: 4, Concurrency: 16, MaxTokens: 64})
	if sum.Trajectories != 64 {
		t.Fatalf("run: %s", sum)
	}
	e := map[string]string{"env": env}
	for _, c := range []struct {
		name   string
		labels map[string]string
		scrape families
		want   float64 // exact value; 0: positive
	}{
		{"rollfleet_episodes_started_total", e, after, 64},
		{"rollfleet_episodes_finished_total", e, after, 64},
		{"rollfleet_turns_total", e, after, float64(sum.Turns)},
		{"rollfleet_prompt_tokens_total", e, after, 0},
		{"rollfleet_action_tokens_total", e, after, float64(sum.ActionTokens)},
		{"rollfleet_env_step_duration_seconds", e, after, float64(sum.Turns)},
		{"rollfleet_trajectories_total", e, after, 64},
		{"rollfleet_trajectory_successes_total", e, after, 0},
		{"rollfleet_trajectory_reward", e, after, 64},
		{"rollfleet_trajectory_staleness_versions", nil, after, 64},
		{"rollfleet_groups_total", map[string]string{"outcome": "kept"}, after, 16},
		{"rollfleet_generate_duration_seconds", nil, after, 0},
		{"rollfleet_tokenize_duration_seconds", nil, after, 0},
		{"rollfleet_llm_requests_total", map[string]string{"kind": "generate"}, after, float64(sum.Turns)},
		{"rollfleet_model_endpoint_healthy", nil, after, 1},
		{"rollfleet_model_endpoint_max_in_flight", nil, after, 64},
		{"rollfleet_jetstream_publish_duration_seconds", nil, after, 0},
		{"rollfleet_policy_version", map[string]string{"actor": "envworker"}, after, -1},
		{"rollfleet_policy_paused", map[string]string{"actor": "llmworker"}, after, -1},
		{"rollfleet_episodes_in_flight", nil, during, 0},
		{"rollfleet_stream_messages", map[string]string{"stream": "RF_CONTROL"}, during, -1},
		{"rollfleet_consumer_pending_messages", map[string]string{"stream": "RF_EPISODES"}, during, -1},
		{"rollfleet_consumer_ack_pending_messages", map[string]string{"stream": "RF_STEPS"}, during, -1},
		{"go_goroutines", nil, after, 0},
		{"process_cpu_seconds_total", nil, after, -1},
		{"rollfleet_output_stream_full", map[string]string{"kind": "group"}, after, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ok := c.scrape.value(c.name, c.labels)
			switch {
			case !ok:
				t.Errorf("%s%v missing", c.name, c.labels)
			case c.want > 0 && v != c.want:
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
			case c.want == 0 && v <= 0:
				t.Errorf("%s%v = %v, want > 0", c.name, c.labels, v)
			}
		})
	}
	// The failure counters are there at 0 before any failure: a run with
	// none serves every kind, so rate() counts the first one.
	zero := map[string][]string{
		"rollfleet_failures_total":        {"episode", "malformed", "invariant", "prompt_too_long", "stale"},
		"rollfleet_episodes_failed_total": {"episode", "prompt_too_long", "stale"},
	}
	for name, kinds := range zero {
		for _, kind := range kinds {
			labels := map[string]string{"kind": kind}
			if name == "rollfleet_episodes_failed_total" {
				labels["env"] = env
			}
			if v, ok := during.value(name, labels); !ok || v != 0 {
				t.Errorf("%s%v = %v (served: %v) with no failure, want 0", name, labels, v, ok)
			}
		}
	}
	checkDashboard(t, during, after)
}

// troubleFamilies move only when something goes wrong (see
// TestFailureFamiliesMove, TestBusFamiliesMove, TestLLMWorkerFamilies).
var troubleFamilies = map[string]bool{
	"rollfleet_episodes_resumed_total": true, "rollfleet_model_errors_total": true, "rollfleet_jetstream_retries_total": true,
}

// checkDashboard checks that every rollfleet metric the example Grafana
// dashboard queries is one the fleet serves.
func checkDashboard(t *testing.T, scrapes ...families) {
	t.Helper()
	data, err := os.ReadFile("../examples/grafana/rollfleet.json")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`rollfleet_[a-z_]+`).FindAllString(string(data), -1)
	if len(names) < 20 {
		t.Fatalf("the dashboard queries only %d rollfleet metrics", len(names))
	}
	for _, name := range names {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if troubleFamilies[family] {
			continue
		}
		if !slices.ContainsFunc(scrapes, func(f families) bool { _, ok := f[family]; return ok }) {
			t.Errorf("the dashboard queries %s, which the fleet does not serve", name)
		}
	}
}

// TestFailureFamiliesMove runs episodes whose prompts cannot fit and checks
// the failure families by kind.
func TestFailureFamiliesMove(t *testing.T) {
	const env = "game:GuessTheNumber-v0"
	_, _, after, sum := runFleet(t, fleet.Options{Env: env, Episodes: 8, NSamples: 4, MaxLength: 16, MaxTokens: 8})
	if sum.Failures != 8 {
		t.Fatalf("run: %s", sum)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rollfleet_episodes_started_total", map[string]string{"env": env}, 8},
		{"rollfleet_episodes_failed_total", map[string]string{"env": env, "kind": "prompt_too_long"}, 8},
		{"rollfleet_failures_total", map[string]string{"kind": "prompt_too_long"}, 8},
		{"rollfleet_groups_total", map[string]string{"outcome": "incomplete"}, 2},
	} {
		if v, _ := after.value(c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}

func ExampleMetrics_Serve() {
	m := metrics.New()
	srv, err := m.Serve("127.0.0.1:0", nil)
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	resp, err := http.Get(srv.URL() + "/healthz")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(b))
	// Output: 200 ok
}
