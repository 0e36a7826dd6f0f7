package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
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
			killed := startRun(t, dir, append(args, dataArgs...)...)
			// Killed once some episodes are written, well before the end.
			ledger := killed.waitWritten(t, dir, 100)
			if err := killed.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-killed.exited
			run := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ledger), ".out.jsonl."), ".done")
			if _, err := os.Stat(filepath.Join(dir, "out.jsonl")); err == nil {
				t.Fatal("the killed run's output reached its destination")
			}

			status, msg := rollout(t, dir, append([]string{"run", "--resume", run, "--out", "out.jsonl"}, dataArgs...)...)
			if status != 0 {
				t.Fatalf("resume exited %d\n%s", status, msg)
			}
			checkEachEpisodeOnce(t, dir, run, episodes)
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

// background is a rollout run the test started and interrupts.
type background struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // read only once exited has been received from
	exited chan error
}

// startRun starts the rollout binary in dir.
func startRun(t *testing.T, dir string, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command(rolloutBin(t), args...), exited: make(chan error, 1)}
	b.cmd.Dir, b.cmd.Stderr = dir, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	})
	return b
}

// waitWritten waits (bounded) until the run's ledger in dir holds n
// episodes, and returns its path.
func (b *background) waitWritten(t *testing.T, dir string, n int) string {
	t.Helper()
	var ledger string
	bustest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, f := range runFilesIn(t, dir) {
			if strings.HasSuffix(f, ".done") {
				ledger = filepath.Join(dir, f)
				if data, _ := os.ReadFile(ledger); bytes.Count(data, []byte("\ne")) >= n {
					return nil
				}
			}
		}
		select {
		case err := <-b.exited:
			t.Fatalf("the run ended before it was stopped: %v\n%s", err, b.stderr.String())
		default:
		}
		return fmt.Errorf("fewer than %d episodes written", n)
	})
	return ledger
}

// interrupt sends SIGINT and returns the exit status and standard error.
func (b *background) interrupt(t *testing.T) (int, string) {
	t.Helper()
	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("did not stop on SIGINT")
	}
	return b.cmd.ProcessState.ExitCode(), b.stderr.String()
}

// runFileContents maps each run file in dir to its contents.
func runFileContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, name := range runFilesIn(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(data)
	}
	return files
}

// maxStopLines bounds what an interrupted run prints: the summary, the
// command that continues it and the error.
const maxStopLines = 5

// TestRunInterruptedResumesAsPrinted: rollout run interrupted by SIGINT
// mid-run stops in a few lines and prints a command that continues it.
// Every failed start of that resume — a model server that does not answer,
// no NATS, a bad flag combination, an interruption before the start, a
// second resume while one runs — exits without touching the run's files.
// The printed command then finishes the run, on the embedded server and
// on a fleet (--submit-only), with every episode exactly once and a
// summary that counts the whole file.
func TestRunInterruptedResumesAsPrinted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fleet bool
	}{{"embedded", false}, {"fleet", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const episodes = 600
			args := []string{"run", "--env", "game:GuessTheNumber-v0", "--episodes", strconv.Itoa(episodes), "--n-samples", "2",
				"--concurrency", "64", "--toy-latency", "500us", "--seed", "7", "--out", "out.jsonl", "--failures-out", "failures.jsonl"}
			if tc.fleet {
				url, _ := standingFleet(t)
				args = append(args, "--nats", url, "--submit-only")
			}
			run := startRun(t, dir, args...)
			ledger := run.waitWritten(t, dir, 100)
			status, stderr := run.interrupt(t)
			if status != fleet.ExitUnfinished {
				t.Fatalf("interrupted run: exit status %d, want %d\n%s", status, fleet.ExitUnfinished, stderr)
			}
			if n := strings.Count(stderr, "\n"); n > maxStopLines {
				t.Errorf("interrupted run printed %d lines, want at most %d:\n%s", n, maxStopLines, stderr)
			}
			id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ledger), ".out.jsonl."), ".done")
			_, hint, ok := strings.Cut(stderr, "continue it with: ")
			if !ok {
				t.Fatalf("no command to continue the run:\n%s", stderr)
			}
			resume := strings.Fields(strings.SplitN(hint, "\n", 2)[0])
			if len(resume) < 2 || resume[0] != "rollout" {
				t.Fatalf("the command printed is not a rollout command: %q", resume)
			}
			resume = resume[1:]
			kept := runFileContents(t, dir)

			if !tc.fleet {
				for _, failed := range []struct {
					name   string
					args   []string
					stderr string
				}{
					{"no model server", []string{"--vllm", closedURL(t)}, "no model server answers"},
					{"no NATS", []string{"--nats", "nats://" + strings.TrimPrefix(closedURL(t), "http://")}, "run " + id + " not resumed"},
					{"submit-only without NATS", []string{"--submit-only"}, "--submit-only needs --nats"},
					{"interrupted at start", []string{"--timeout", "1ns"}, "run " + id + " not resumed"},
				} {
					status, stderr := rollout(t, dir, append(slices.Clone(resume), failed.args...)...)
					if status != fleet.ExitStartup || !strings.Contains(stderr, failed.stderr) {
						t.Errorf("%s: exit status %d, want %d saying %q:\n%s", failed.name, status, fleet.ExitStartup, failed.stderr, stderr)
					}
					if got := runFileContents(t, dir); !maps.Equal(got, kept) {
						t.Fatalf("%s: the run's files changed: %v, were %v", failed.name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(kept)))
					}
				}
			}

			// A second resume while one runs touches nothing.
			first := startRun(t, dir, resume...)
			bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
				release, err := bus.TryLock(ledger)
				if err == nil {
					release()
					return errors.New("the first resume has not opened the run yet")
				}
				return nil
			})
			before := runFileContents(t, dir)
			status, stderr = rollout(t, dir, resume...)
			if status != fleet.ExitStartup || !strings.Contains(stderr, "in use by another process") {
				t.Errorf("second resume: exit status %d, want %d saying the run is in use:\n%s", status, fleet.ExitStartup, stderr)
			}
			if after := runFileContents(t, dir); len(after) != len(before) {
				t.Errorf("second resume: run files %v, were %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
			}
			status, stderr = first.interrupt(t)
			if status != fleet.ExitUnfinished && status != fleet.ExitStartup {
				t.Fatalf("interrupted resume: exit status %d\n%s", status, stderr)
			}
			if n := strings.Count(stderr, "\n"); n > maxStopLines+1 {
				t.Errorf("interrupted resume printed %d lines:\n%s", n, stderr)
			}

			status, stderr = rollout(t, dir, resume...)
			if status != 0 {
				t.Fatalf("rollout %s: exit status %d\n%s", strings.Join(resume, " "), status, stderr)
			}
			checkEachEpisodeOnce(t, dir, id, episodes)
			n := lines(t, filepath.Join(dir, "out.jsonl"))
			for _, want := range []string{fmt.Sprintf("trajectories=%d (resumed ", n), fmt.Sprintf("wrote %d trajectories", n)} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the resumed run's summary does not say %q:\n%s", want, stderr)
				}
			}
			checkNoTempFiles(t, dir)
		})
	}
}

// checkEachEpisodeOnce fails unless out.jsonl and failures.jsonl in dir
// hold each of run's episodes exactly once.
func checkEachEpisodeOnce(t *testing.T, dir, run string, episodes int) {
	t.Helper()
	seen := map[string]int{}
	for _, name := range []string{"out.jsonl", "failures.jsonl"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			var rec struct {
				RunID     string `json:"run_id"`
				EpisodeID string `json:"episode_id"`
			}
			if err := json.Unmarshal(line, &rec); err != nil || rec.RunID != run {
				t.Fatalf("%s: line %q: %v (run %q, want %q)", name, line, err, rec.RunID, run)
			}
			seen[rec.EpisodeID]++
		}
	}
	if len(seen) != episodes {
		t.Errorf("%d episodes written, want %d", len(seen), episodes)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("episode %s written %d times", id, n)
		}
	}
}
