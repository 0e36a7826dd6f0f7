package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/fleet"
)

// TestResumeCompletesCutShortFinish: a run that finished marks its ledger
// so before its outputs replace their destinations, and removes its
// manifest and then its ledger. A power loss at any point of that end
// leaves what --resume completes, saying where the output is, with every
// episode exactly once; a ledger not marked finished is no finished run.
func TestResumeCompletesCutShortFinish(t *testing.T) {
	const episodes = 8
	done := t.TempDir()
	status, stderr := rollout(t, done, "run", "--env", "game:GuessTheNumber-v0-easy,gym:broken", brokenEnvFlag(t),
		"--episodes", "8", "--seed", "3", "--out", "out.jsonl", "--failures-out", "failures.jsonl")
	if status != fleet.ExitSomeFailed {
		t.Fatalf("exit status %d, want %d\n%s", status, fleet.ExitSomeFailed, stderr)
	}
	outputs := map[string][]byte{}
	for _, name := range []string{"out.jsonl", "failures.jsonl"} {
		data, err := os.ReadFile(filepath.Join(done, name))
		if err != nil {
			t.Fatal(err)
		}
		outputs[name] = data
	}
	var first struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(outputs["out.jsonl"][:strings.IndexByte(string(outputs["out.jsonl"]), '\n')], &first); err != nil {
		t.Fatal(err)
	}
	run := first.RunID

	for _, tc := range []struct {
		name string
		// unmoved outputs are still part files.
		unmoved          []string
		marked, manifest bool
		status           int
		stderr           string
	}{
		{"before any move", []string{"out.jsonl", "failures.jsonl"}, true, true, fleet.ExitOK, "run " + run + " had finished: its trajectories are in out.jsonl"},
		{"between the moves", []string{"failures.jsonl"}, true, true, fleet.ExitOK, "run " + run + " had finished"},
		{"manifest removed", nil, true, false, fleet.ExitOK, "run " + run + " had finished"},
		{"not marked", []string{"failures.jsonl"}, false, true, fleet.ExitStartup, "no partial output of this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			for name, data := range outputs {
				path := filepath.Join(dir, name)
				for _, u := range tc.unmoved {
					if u == name {
						path = fleet.PartPath(path, run)
					}
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, err := fleet.OpenLedger(out, run, false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.marked {
				if err := l.MarkFinished(); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(false); err != nil {
				t.Fatal(err)
			}
			if tc.manifest {
				m := fleet.Manifest{RunID: run, Env: "game:GuessTheNumber-v0-easy", Episodes: episodes, NSamples: 1, FailuresOut: "failures.jsonl"}
				if err := fleet.SaveManifest(out, m); err != nil {
					t.Fatal(err)
				}
			}
			before := runFilesIn(t, dir)

			status, stderr := rollout(t, dir, "run", "--resume", run, "--out", "out.jsonl")
			if status != tc.status || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("resume: exit status %d, want %d saying %q:\n%s", status, tc.status, tc.stderr, stderr)
			}
			if tc.status != fleet.ExitOK {
				if after := runFilesIn(t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
					t.Errorf("run files %v, were %v", after, before)
				}
				return
			}
			for name, want := range outputs {
				if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != string(want) {
					t.Errorf("%s: %d bytes (%v), want the run's %d", name, len(got), err, len(want))
				}
			}
			checkEachEpisodeOnce(t, dir, run, episodes)
			checkNoTempFiles(t, dir)
		})
	}
}
