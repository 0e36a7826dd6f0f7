package metrics_test

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestPrometheusExampleScrapesEveryProcess: the example scrape
// configuration has a job for every command that takes --metrics, and
// promtool (where installed) accepts it.
func TestPrometheusExampleScrapesEveryProcess(t *testing.T) {
	const path = "../examples/prometheus/prometheus.yml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, c := range cfg.ScrapeConfigs {
		jobs = append(jobs, c.JobName)
	}
	for _, process := range []string{"llmworker", "envworker", "collector", "run", "gateway", "api", "consume"} {
		if !slices.Contains(jobs, "rollfleet-"+process) {
			t.Errorf("no job rollfleet-%s in %s (jobs %v)", process, path, jobs)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: the configuration was parsed, not checked")
		return
	}
	if out, err := exec.Command(promtool, "check", "config", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
