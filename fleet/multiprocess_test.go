package fleet

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a fleet process started by the test.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs bytes.Buffer
}

// start runs a binary; when urlPrefix is set it waits (bounded) for the
// process to print a line starting with it and returns the rest of that line.
func start(t *testing.T, bin, name, urlPrefix string, args ...string) (*proc, string) {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(filepath.Join(bin, name), args...)}
	p.cmd.Stderr = &p.logs
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s %v logs:\n%s", name, args, p.logs.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if urlPrefix != "" && strings.HasPrefix(sc.Text(), urlPrefix) {
				lines <- strings.TrimPrefix(sc.Text(), urlPrefix)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	if urlPrefix == "" {
		return p, ""
	}
	select {
	case url := <-lines:
		return p, strings.TrimSpace(url)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not report its address; logs:\n%s", name, p.logs.String())
		return nil, ""
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited with %v; logs:\n%s", p.name, err, p.logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Errorf("%s did not stop on SIGTERM", p.name)
	}
}

// TestMultiProcessFleet runs the server, the stand-in model and each actor as
// separate OS processes on loopback TCP and pushes 100 episodes through.
func TestMultiProcessFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../cmd/rollout", "../cmd/envworker", "../cmd/llmworker", "../cmd/collector")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	server, natsURL := start(t, bin, "rollout", "nats server listening on ",
		"server", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "nats"))
	model, modelURL := start(t, bin, "rollout", "stand-in model listening on ",
		"toyllm", "--listen", "127.0.0.1:0")
	llmw, _ := start(t, bin, "llmworker", "", "--nats", natsURL, "--vllm", modelURL)
	envw, _ := start(t, bin, "envworker", "", "--nats", natsURL, "--concurrency", "32")
	coll, _ := start(t, bin, "collector", "", "--nats", natsURL)

	out := filepath.Join(t.TempDir(), "trajectories.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, filepath.Join(bin, "rollout"), "run", "--nats", natsURL, "--submit-only",
		"--env", "game:GuessTheNumber-v0", "--episodes", "100", "--n-samples", "4", "--seed", "11", "--out", out)
	msg, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("rollout run: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "trajectories=100 ") || strings.Contains(string(msg), "duplicate_outcomes") {
		t.Fatalf("summary should show 100 trajectories and no duplicate outcomes:\n%s", msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	trajs := readTrajectories(t, data)
	if len(trajs) != 100 {
		t.Fatalf("want 100 trajectories, got %d", len(trajs))
	}
	seen := map[string]bool{}
	for _, tr := range trajs {
		if err := tr.Validate(); err != nil {
			t.Fatalf("%s: %v", tr.EpisodeID, err)
		}
		if seen[tr.EpisodeID] {
			t.Fatalf("%s twice", tr.EpisodeID)
		}
		seen[tr.EpisodeID] = true
	}
	for _, p := range []*proc{envw, llmw, coll, model, server} {
		p.stop(t)
	}
}
