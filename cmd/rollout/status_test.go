package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet/fleettest"
	"github.com/rollfleet/rollfleet/fleetstatus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// standingFleet starts a listening NATS server with a standing fleet on it
// (LLM worker, env worker, collector, stand-in model) and returns the
// server's URL and a trainer client.
func standingFleet(t *testing.T) (string, *trainer.Client) {
	t.Helper()
	url, f := fleettest.Listening(t)
	nc, err := f.Connect("trainer")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := trainer.New(nc, trainer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return url, tc
}

// rolloutOut runs the rollout binary to its end (bounded) and returns its
// exit status, standard output and standard error.
func rolloutOut(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rolloutBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("rollout %v: %v\n%s", args, err, stderr.String())
	return 0, "", ""
}

// TestStatusCommand: rollout status against a running fleet with a batch
// submitted shows the streams, both kinds of workers, the policy and the
// batch, as tables and as JSON.
func TestStatusCommand(t *testing.T) {
	rolloutBin(t)
	url, tc := standingFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed := uint64(5)
	id, err := tc.Submit(ctx, trainer.Batch{ID: "status-batch", Spec: &trainer.Spec{Env: "game:GuessTheNumber-v0-easy", Episodes: 4, N: 2, Seed: &seed}})
	if err != nil {
		t.Fatal(err)
	}

	code, out, stderr := rolloutOut(t, "status", "--nats", url)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, stderr)
	}
	t.Logf("rollout status:\n%s", out)
	for _, want := range []string{"STREAMS", "RF_EPISODES", "RF_TRAJECTORIES", "RF_CONTROL", "RF_BATCHES", "envworker", "collector",
		"POLICY", "version 0 · running", "WORKERS", "\nllm ", "\nenv ", "BATCHES", id, "RUNS", "batch-trajectory="} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q", want)
		}
	}

	code, out, stderr = rolloutOut(t, "status", "--nats", url, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, stderr)
	}
	var snap fleetstatus.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(snap.Streams) != 8 || len(snap.Workers) != 2 || snap.Workers[0].Kind != messages.WorkerLLM || snap.Workers[1].Kind != messages.WorkerEnv ||
		snap.Policy == nil || len(snap.Batches) != 1 || snap.Batches[0].Manifest.BatchID != id || snap.Batches[0].Episodes != 4 {
		t.Fatalf("status --json: %s", out)
	}
}

// TestStatusWithoutAFleet: a server no fleet has used shows no streams and
// no workers, and status creates nothing; a server that does not answer
// is an error with a non-zero exit.
func TestStatusWithoutAFleet(t *testing.T) {
	rolloutBin(t)
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: filepath.Join(t.TempDir(), "nats")})
	code, out, stderr := rolloutOut(t, "status", "--nats", s.ClientURL())
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"no rollfleet streams", "no workers answered", "no runs"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	js := bustest.JetStream(t, s, "check")
	if names := js.StreamNames(context.Background()); names.Err() == nil {
		for n := range names.Name() {
			t.Errorf("status created stream %s", n)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "nats://" + ln.Addr().String()
	ln.Close()
	for _, cmd := range []string{"status", "tail"} {
		code, _, stderr = rolloutOut(t, cmd, "--nats", dead)
		if code == 0 || !strings.Contains(stderr, "no NATS server reachable") || !strings.Contains(stderr, dead) {
			t.Errorf("%s of a dead server: exit %d\n%s", cmd, code, stderr)
		}
	}
}

// TestTailCommand: rollout tail prints the trajectories (and groups) of the
// run asked for as JSON lines as they are published, while the batch's own
// reader still gets every record.
func TestTailCommand(t *testing.T) {
	rolloutBin(t)
	url, tc := standingFleet(t)
	for _, c := range []struct {
		name, kind, batch string
		lines             int
	}{
		{"trajectories", "", "tail-trajs", 4},
		{"groups", "--groups", "tail-groups", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := []string{"tail", "--nats", url, "--run", c.batch, "--count", strconv.Itoa(c.lines)}
			if c.kind != "" {
				args = append(args, c.kind)
			}
			cmd := exec.CommandContext(ctx, rolloutBin(t), args...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Submit once tail says it follows the subject.
			errLines := bufio.NewScanner(stderr)
			if !errLines.Scan() || !strings.HasPrefix(errLines.Text(), "rollout tail: following ") {
				t.Fatalf("tail's first line: %q", errLines.Text())
			}
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			seed := uint64(9)
			if _, err := tc.Submit(ctx, trainer.Batch{ID: c.batch, Spec: &trainer.Spec{Env: "game:GuessTheNumber-v0-easy", Episodes: 4, N: 2, Seed: &seed}}); err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(stdout)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("tail: %v\n%s", err, out)
			}
			var n int
			for line := range strings.Lines(string(out)) {
				var rec struct {
					RunID        string            `json:"run_id"`
					Env          string            `json:"env"`
					Tokens       []int             `json:"observation_tokens"`
					Trajectories []json.RawMessage `json:"trajectories"`
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				if rec.RunID != c.batch || rec.Env != "game:GuessTheNumber-v0-easy" ||
					(c.kind == "" && len(rec.Tokens) == 0) || (c.kind != "" && len(rec.Trajectories) != 2) {
					t.Fatalf("line %s", line)
				}
				n++
			}
			if n != c.lines {
				t.Fatalf("%d lines, want %d:\n%s", n, c.lines, out)
			}
			// The batch's reader gets every trajectory all the same.
			var got int
			for res, err := range tc.Trajectories(ctx, c.batch) {
				if err != nil {
					t.Fatal(err)
				}
				got++
				if err := res.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got != 4 {
				t.Fatalf("the batch's reader got %d trajectories, want 4", got)
			}
		})
	}
}
