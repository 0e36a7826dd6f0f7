package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet"
)

// binDir holds the rollout binary the tests build once; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var buildOnce struct {
	sync.Once
	path string
	err  error
}

// rolloutBin builds the rollout binary (once per test run) and returns its
// path.
func rolloutBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the rollout binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rollout-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		binDir = dir
		path := filepath.Join(dir, "rollout")
		out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		buildOnce.path = path
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

// rollout runs the rollout binary in dir to its end (bounded) and returns
// its exit status and standard error.
func rollout(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rolloutBin(t), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), stderr.String()
	}
	t.Fatalf("rollout %v: %v\n%s", args, err, stderr.String())
	return 0, ""
}

// lines is the number of lines in a file.
func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

// brokenEnvFlag serves a remote env whose every episode fails at /reset and
// returns the --remote flag that hosts it as gym:broken.
func brokenEnvFlag(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "env crashed", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return "--remote=gym:broken=http-gym," + srv.URL
}

// TestRunExitStatus runs rollout run where every episode succeeds, some
// fail and all fail, and checks the exit status, the failure kinds and
// reasons printed, and the outputs.
func TestRunExitStatus(t *testing.T) {
	remote := brokenEnvFlag(t)
	for _, tc := range []struct {
		name, env        string
		status           int
		trajs, failures  int
		stderr, notInErr []string
	}{
		{"all succeed", "game:GuessTheNumber-v0-easy", fleet.ExitOK, 8, 0,
			[]string{"failures=0", "wrote 8 trajectories to out.jsonl"}, []string{"error"}},
		{"some fail", "game:GuessTheNumber-v0-easy,gym:broken", fleet.ExitSomeFailed, 4, 4,
			[]string{"failure kinds: episode=4", "failure x4: ", "/reset: HTTP 500: env crashed", "some episodes failed: 4 of 8", "wrote 4 trajectories"}, nil},
		{"all fail", "gym:broken", fleet.ExitAllFailed, 0, 8,
			[]string{"failure kinds: episode=8", "every episode failed: 8 of 8"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			status, stderr := rollout(t, dir, "run", "--env", tc.env, "--episodes", "8", "--seed", "3", remote,
				"--out", "out.jsonl", "--failures-out", "failures.jsonl")
			if status != tc.status {
				t.Fatalf("exit status %d, want %d\n%s", status, tc.status, stderr)
			}
			if n, f := lines(t, filepath.Join(dir, "out.jsonl")), lines(t, filepath.Join(dir, "failures.jsonl")); n != tc.trajs || f != tc.failures {
				t.Errorf("%d trajectories and %d failure records written, want %d and %d", n, f, tc.trajs, tc.failures)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
			for _, not := range tc.notInErr {
				if strings.Contains(stderr, not) {
					t.Errorf("stderr says %q:\n%s", not, stderr)
				}
			}
			checkNoTempFiles(t, dir)
		})
	}
}

// checkNoTempFiles fails if a run's part files, ledger or manifest are
// left in dir.
func checkNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	if left := runFilesIn(t, dir); len(left) > 0 {
		t.Errorf("run files left behind: %v", left)
	}
}

// runFilesIn lists the run files (.part, ledger, manifest) in dir.
func runFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".part") || strings.HasSuffix(n, ".done") || strings.HasSuffix(n, ".run.json")) {
			files = append(files, n)
		}
	}
	return files
}

// TestRunResumeAfterKill: rollout run is killed (SIGKILL) mid-run; --resume
// with its run id finishes it, on the same data dir or on a fresh server,
// and the output holds every episode exactly once, the groups output every
// group at most once, and no run file is left.
func TestRunResumeAfterKill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dataDir bool
	}{{"same data dir", true}, {"fresh server", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const episodes = 600
			args := []string{"run", "--env", "game:GuessTheNumber-v0", "--episodes", strconv.Itoa(episodes), "--n-samples", "2",
				"--concurrency", "32", "--toy-latency", "500us", "--seed", "7",
				"--out", "out.jsonl", "--failures-out", "failures.jsonl", "--groups-out", "groups.jsonl"}
			var dataArgs []string
			if tc.dataDir {
				dataArgs = []string{"--data-dir", filepath.Join(dir, "nats")}
			}
			cmd := exec.Command(rolloutBin(t), append(args, dataArgs...)...)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// Killed once some episodes are written, well before the end.
			var ledger string
			bustest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
				for _, f := range runFilesIn(t, dir) {
					if strings.HasSuffix(f, ".done") {
						ledger = filepath.Join(dir, f)
						if data, _ := os.ReadFile(ledger); bytes.Count(data, []byte("\ne")) >= 100 {
							return nil
						}
					}
				}
				select {
				case err := <-exited:
					t.Fatalf("the run ended before it was killed: %v\n%s", err, stderr.String())
				default:
				}
				return errors.New("fewer than 100 episodes written")
			})
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-exited
			run := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ledger), ".out.jsonl."), ".done")
			if _, err := os.Stat(filepath.Join(dir, "out.jsonl")); err == nil {
				t.Fatal("the killed run's output reached its destination")
			}

			status, msg := rollout(t, dir, append([]string{"run", "--resume", run, "--out", "out.jsonl"}, dataArgs...)...)
			if status != 0 {
				t.Fatalf("resume exited %d\n%s", status, msg)
			}
			data, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for line := range bytes.Lines(data) {
				var tr struct {
					RunID     string `json:"run_id"`
					EpisodeID string `json:"episode_id"`
				}
				if err := json.Unmarshal(line, &tr); err != nil || tr.RunID != run {
					t.Fatalf("line %q: %v (run %q, want %q)", line, err, tr.RunID, run)
				}
				seen[tr.EpisodeID]++
			}
			if got := lines(t, filepath.Join(dir, "failures.jsonl")); len(seen)+got != episodes {
				t.Errorf("%d distinct trajectories and %d failures, want %d episodes", len(seen), got, episodes)
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("episode %s written %d times", id, n)
				}
			}
			groups := map[string]int{}
			gdata, err := os.ReadFile(filepath.Join(dir, "groups.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			for line := range bytes.Lines(gdata) {
				var g struct {
					GroupID string `json:"group_id"`
				}
				if err := json.Unmarshal(line, &g); err != nil {
					t.Fatal(err)
				}
				if groups[g.GroupID]++; groups[g.GroupID] > 1 {
					t.Errorf("group %s written twice", g.GroupID)
				}
			}
			if len(groups) == 0 || len(groups) > episodes/2 {
				t.Errorf("%d groups written, want 1 to %d", len(groups), episodes/2)
			}
			checkNoTempFiles(t, dir)
		})
	}
}

// closedURL is the URL of a TCP port on 127.0.0.1 nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	return url
}

// earlierOutputs writes outputs of an earlier run into dir.
func earlierOutputs(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{"out.jsonl": "{\"earlier\": \"trajectory\"}\n", "failures.jsonl": "{\"earlier\": \"failure\"}\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// checkUntouched fails unless the files hold what they held.
func checkUntouched(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != body {
			t.Errorf("%s: %q (%v), want the earlier %q", name, got, err, body)
		}
	}
	checkNoTempFiles(t, dir)
}

// TestRunUnreachableModelFailsFast: with no --vllm server answering, the
// run fails at once, naming each URL and the error, exits 3 and leaves the
// outputs of an earlier run as they were.
func TestRunUnreachableModelFailsFast(t *testing.T) {
	dir := t.TempDir()
	files := earlierOutputs(t, dir)
	a, b := closedURL(t), closedURL(t)
	start := time.Now()
	status, stderr := rollout(t, dir, "run", "--vllm", a+","+b, "--episodes", "4",
		"--out", "out.jsonl", "--failures-out", "failures.jsonl")
	if status != fleet.ExitStartup {
		t.Fatalf("exit status %d, want %d\n%s", status, fleet.ExitStartup, stderr)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v to fail", took)
	}
	for _, want := range []string{"no model server answers", a + "/v1/models", b + "/v1/models", "connection refused", "--vllm"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "episodes=") {
		t.Errorf("a run that did not start printed a summary:\n%s", stderr)
	}
	checkUntouched(t, dir, files)
}

// TestRunBadFlags: a bad flag prints a one-line error and where the help
// is, not the help page, and exits 3 with the outputs untouched.
func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--episodes", "many"},
		{"--no-such-flag"},
		{"--obs-style", "prose"},
		{"--prompt-overflow", "truncate-right"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := t.TempDir()
			files := earlierOutputs(t, dir)
			status, stderr := rollout(t, dir, append([]string{"run", "--out", "out.jsonl"}, args...)...)
			if status != fleet.ExitStartup {
				t.Fatalf("exit status %d, want %d\n%s", status, fleet.ExitStartup, stderr)
			}
			got := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(got) != 2 || !strings.HasPrefix(got[0], "rollout: error: ") || got[1] != "see 'rollout run --help'" {
				t.Errorf("want the error and the hint in two lines, got:\n%s", stderr)
			}
			checkUntouched(t, dir, files)
		})
	}
}

// TestRunPromptOverflow: --prompt-overflow reaches the episodes. The
// instructions do not fit --max-length 300: by default each episode fails
// as prompt_too_long; truncate-left cuts them, and the summary says so.
func TestRunPromptOverflow(t *testing.T) {
	for _, tc := range []struct {
		overflow string
		status   int
		stderr   string
	}{
		{"fail", fleet.ExitAllFailed, "failure kinds: prompt_too_long=2"},
		{"truncate-left", fleet.ExitOK, "prompt_truncated=2"},
	} {
		t.Run(tc.overflow, func(t *testing.T) {
			status, stderr := rollout(t, t.TempDir(), "run", "--episodes", "2", "--seed", "3", "--max-length", "300",
				"--max-tokens", "64", "--prompt-overflow", tc.overflow, "--out", "out.jsonl")
			if status != tc.status || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit status %d, want %d with %q:\n%s", status, tc.status, tc.stderr, stderr)
			}
		})
	}
}

// TestRunUnknownEnvInDataset: a dataset row naming an unknown env stops the
// run before it starts, naming the row's line.
func TestRunUnknownEnvInDataset(t *testing.T) {
	dir := t.TempDir()
	files := earlierOutputs(t, dir)
	rows := "{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\", \"env\": \"game:GuesTheNumber-v0\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "rows.jsonl"), []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	status, stderr := rollout(t, dir, "run", "--dataset", "rows.jsonl", "--out", "out.jsonl", "--failures-out", "failures.jsonl")
	if status != fleet.ExitStartup {
		t.Fatalf("exit status %d, want %d\n%s", status, fleet.ExitStartup, stderr)
	}
	if want := `rows.jsonl line 3: unknown env "game:GuesTheNumber-v0"`; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	checkUntouched(t, dir, files)
}

// process is a rollout process the test started and stops.
type process struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

// startRollout starts the rollout binary and waits (bounded) for it to
// print a line starting with ready on stdout.
func startRollout(t *testing.T, ready string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(rolloutBin(t), args...), done: make(chan error, 1)}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), ready) {
				close(seen)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case <-seen:
	case err := <-p.done:
		p.done <- err
		t.Fatalf("rollout %v ended before it was ready: %v\n%s", args, err, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("rollout %v not ready\n%s", args, p.stderr.String())
	}
	return p
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("exited with %v\n%s", err, p.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("did not stop on SIGTERM")
	}
}

// TestDataDirHeldByAnotherProcess: while rollout server uses a data dir,
// rollout run and a second rollout server on it fail at once, naming the
// holder; once the server has stopped, the run proceeds.
func TestDataDirHeldByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "nats")
	server := startRollout(t, "nats server listening on ", "server", "--listen", "127.0.0.1:0", "--data-dir", data)
	holder := "pid " + strconv.Itoa(server.cmd.Process.Pid) + " (rollout server"

	files := earlierOutputs(t, dir)
	status, stderr := rollout(t, dir, "run", "--data-dir", data, "--episodes", "2", "--out", "out.jsonl", "--failures-out", "failures.jsonl")
	if status != fleet.ExitStartup {
		t.Fatalf("rollout run: exit status %d, want %d\n%s", status, fleet.ExitStartup, stderr)
	}
	for _, want := range []string{"data dir in use", data, holder, "since "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rollout run: stderr does not say %q:\n%s", want, stderr)
		}
	}
	checkUntouched(t, dir, files)

	status, stderr = rollout(t, dir, "server", "--listen", "127.0.0.1:0", "--data-dir", data)
	if status == 0 || !strings.Contains(stderr, holder) {
		t.Errorf("second rollout server: exit status %d\n%s", status, stderr)
	}

	server.stop(t)
	status, stderr = rollout(t, dir, "run", "--data-dir", data, "--episodes", "2", "--out", "out.jsonl")
	if status != fleet.ExitOK || lines(t, filepath.Join(dir, "out.jsonl")) != 2 {
		t.Fatalf("after the server stopped: exit status %d\n%s", status, stderr)
	}
}
