package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/dashboard"
	"github.com/rollfleet/rollfleet/fleet"
)

// TestDashboardCommand: rollout dashboard on a running fleet counts the
// episodes a run submits to it and sees its workers, and stops cleanly on
// SIGTERM.
func TestDashboardCommand(t *testing.T) {
	url, _ := standingFleet(t)
	cmd := exec.Command(rolloutBin(t), "dashboard", "--nats", url, "--listen", "127.0.0.1:0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	page := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "rollout dashboard on "); ok {
				page <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var base string
	select {
	case base = <-page:
	case err := <-done:
		t.Fatalf("rollout dashboard ended: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("rollout dashboard did not print its URL\n%s", stderr.String())
	}

	dir := t.TempDir()
	status, _, runErr := rolloutOut(t, "run", "--nats", url, "--submit-only", "--episodes", "6", "--seed", "1",
		"--out", filepath.Join(dir, "out.jsonl"))
	if status != fleet.ExitOK {
		t.Fatalf("rollout run: exit status %d\n%s", status, runErr)
	}
	bustest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		resp, err := http.Get(base + "api/snapshot")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var s dashboard.Snapshot
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			return err
		}
		ok := 0
		for _, w := range s.Fleet.Workers {
			if w.Health == "ok" {
				ok++
			}
		}
		if s.Totals.Trajectories != 6 || ok != 2 {
			return fmt.Errorf("totals %+v, workers %+v", s.Totals, s.Fleet.Workers)
		}
		return nil
	})

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rollout dashboard exited with %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rollout dashboard did not stop on SIGTERM")
	}
}

// TestRunDashboardFlag: rollout run --dashboard says where the page is; an
// address it cannot listen on fails the run before it starts, writing
// nothing.
func TestRunDashboardFlag(t *testing.T) {
	dir := t.TempDir()
	status, stderr := rollout(t, dir, "run", "--episodes", "4", "--seed", "1", "--out", "out.jsonl", "--dashboard", "127.0.0.1:0")
	if status != fleet.ExitOK || !strings.Contains(stderr, "rollout run: dashboard on http://127.0.0.1:") || lines(t, filepath.Join(dir, "out.jsonl")) != 4 {
		t.Fatalf("exit status %d\n%s", status, stderr)
	}

	dir = t.TempDir()
	status, stderr = rollout(t, dir, "run", "--episodes", "4", "--out", "out.jsonl", "--dashboard", "no-such-host.invalid:http")
	if status != fleet.ExitStartup || !strings.Contains(stderr, "--dashboard") {
		t.Fatalf("a bad --dashboard address: exit status %d\n%s", status, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a run that did not start left %v", entries)
	}
}
