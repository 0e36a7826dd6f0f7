package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chaos/lazyfs"
	"github.com/rollfleet/rollfleet/fleet"
)

// TestRunPowerLoss: rollout run writes its outputs, ledger and manifest on
// a disk that loses every write no fsync reached (lazyfs). The run is
// killed (SIGKILL) and the power cut (DropUnsynced) at several points, as
// soon as its part file holds a given number of trajectories more than it
// started with — often in the middle of a commit; each --resume goes on
// from what survived, and the last one finishes the run with every episode
// in the outputs exactly once. The streams' store is on a disk that keeps
// its writes, as a NATS cluster does: what the run acknowledged there is
// gone, so the outputs must hold it.
func TestRunPowerLoss(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err)
	}
	rolloutBin(t) // built before the mount; skips with -short
	dir := t.TempDir()
	disk, err := lazyfs.Mount(t.TempDir(), dir, lazyfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := disk.Unmount(); err != nil {
			t.Error(err)
		}
	})
	// The runs work in another directory: a child whose working directory
	// is on the mount needs the mount's server, this process, before its
	// vfork returns, and a garbage collection then waits for both forever.
	work := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	const episodes = 600
	args := []string{"run", "--env", "game:GuessTheNumber-v0", "--episodes", strconv.Itoa(episodes), "--n-samples", "2",
		"--concurrency", "32", "--toy-latency", "500us", "--seed", "7",
		"--out", out, "--failures-out", filepath.Join(dir, "failures.jsonl"), "--data-dir", filepath.Join(work, "nats")}
	var run string
	// Trajectories each process writes before it is killed: one (its first
	// commit), then more.
	for _, more := range []int{1, 120, 120, 1, 200} {
		before := 0
		if run != "" {
			args = []string{"run", "--resume", run, "--out", out}
			before = lines(t, fleet.PartPath(out, run))
		}
		p := startRun(t, work, args...)
		part := p.waitPartLines(t, dir, before+more)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-p.exited
		dropped := disk.DropUnsynced()
		run = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(part), ".out.jsonl."), ".part")
		t.Logf("killed once %d trajectories were written; the power loss dropped %d bytes; %d trajectories kept",
			before+more, dropped, lines(t, part))
	}
	status, stderr := rollout(t, work, "run", "--resume", run, "--out", out, "--timeout", "90s")
	if status != fleet.ExitOK && status != fleet.ExitSomeFailed {
		written, repeated := countEpisodes(t, dir, run)
		t.Fatalf("the last resume exited %d, with %d of %d episodes written, %d more than once:\n%s",
			status, written, episodes, repeated, stderr)
	}
	checkEachEpisodeOnce(t, dir, run, episodes)
	checkNoTempFiles(t, dir)
	st := disk.Stats()
	t.Logf("%d fsyncs; %d bytes synced, %d dropped", st.Fsyncs, st.BytesSynced, st.BytesDropped)
}

// waitPartLines waits (bounded) until the run's part file of out.jsonl in
// dir holds n lines, reading only what was added since the last look, and
// returns its path. The run must not end first.
func (b *background) waitPartLines(t *testing.T, dir string, n int) string {
	t.Helper()
	var part string
	var off int64
	got := 0
	buf := make([]byte, 1<<20)
	bustest.CheckFor(t, 2*time.Minute, 5*time.Millisecond, func() error {
		select {
		case err := <-b.exited:
			t.Fatalf("the run ended before it was killed: %v\n%s", err, b.stderr.String())
		default:
		}
		if part == "" {
			parts, _ := filepath.Glob(filepath.Join(dir, ".out.jsonl.*.part"))
			if len(parts) != 1 {
				return fmt.Errorf("%d part files of out.jsonl", len(parts))
			}
			part = parts[0]
		}
		f, err := os.Open(part)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			k, err := f.ReadAt(buf, off)
			got += bytes.Count(buf[:k], []byte("\n"))
			off += int64(k)
			if err != nil || k == 0 {
				break
			}
		}
		if got < n {
			return fmt.Errorf("%d lines of %d written", got, n)
		}
		return nil
	})
	return part
}

// countEpisodes counts run's episodes in dir's outputs or, unfinished,
// their part files: how many are written, and how many more than once.
func countEpisodes(t *testing.T, dir, run string) (written, repeated int) {
	t.Helper()
	seen := map[string]int{}
	for _, name := range []string{"out.jsonl", "failures.jsonl"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			path = fleet.PartPath(path, run)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			var rec struct {
				EpisodeID string `json:"episode_id"`
			}
			if json.Unmarshal(line, &rec) == nil {
				seen[rec.EpisodeID]++
			}
		}
	}
	for _, n := range seen {
		if n > 1 {
			repeated++
		}
	}
	return len(seen), repeated
}
