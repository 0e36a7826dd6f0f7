package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
)

// TestOutputReplacesOnlyWhenKept: a discarded output leaves the file at
// its path as it was; a finished one replaces it, with its mode. No part
// file is left either way.
func TestOutputReplacesOnlyWhenKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(path, []byte("earlier\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("%s holds %q (%v), want %q", path, got, err, want)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("directory holds %v (%v), want only the output", entries, err)
		}
	}

	o, err := CreateOutput(path, "r1", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("discarded\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Discard(); err != nil {
		t.Fatal(err)
	}
	check("earlier\n")

	o, err = CreateOutput(path, "r2", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	check("new\n")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v (%v), want the replaced file's 0640", st.Mode(), err)
	}

	// A symlink is followed: the file it points to is replaced.
	link := filepath.Join(t.TempDir(), "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	o, err = CreateOutput(link, "r3", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("via link\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	check("via link\n")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
}

// TestOutputInMissingDirFailsEarly: a path that cannot be written fails
// when the output is created, before any run.
func TestOutputInMissingDirFailsEarly(t *testing.T) {
	if _, err := CreateOutput(filepath.Join(t.TempDir(), "no", "such", "out.jsonl"), "r", false); err == nil {
		t.Fatal("created an output in a missing directory")
	}
}

// TestOutputResume: a suspended output is reopened by its run, without
// the line an interruption cut short, and appended to; another run's id
// finds nothing to resume.
func TestOutputResume(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	o, err := CreateOutput(path, "run1", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("{\"a\":1}\n{\"a\":2}\n{\"a\":")); err != nil {
		t.Fatal(err)
	}
	if err := o.Suspend(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a suspended output reached its destination: %v", err)
	}
	if _, err := CreateOutput(path, "run2", true); !errors.Is(err, ErrNoPartialOutput) {
		t.Fatalf("resuming an unknown run: %v, want ErrNoPartialOutput", err)
	}
	o, err = CreateOutput(path, "run1", true)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	if err := o.Lines(func(l []byte) { lines = append(lines, string(l)) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{`{"a":1}`, `{"a":2}`}; !slices.Equal(lines, want) {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	if _, err := o.Write([]byte("{\"a\":3}\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n" {
		t.Fatalf("%s holds %q (%v)", path, got, err)
	}
}

// TestLedgerResume: a resumed ledger knows the episodes and groups it
// entered, and those the part files hold beyond it (a line written just
// before the interruption), and counts what the outputs held. An open
// ledger holds the run: a second process's open fails while it is open.
func TestLedgerResume(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	l, err := OpenLedger(out, "r", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLedger(out, "r", true); !errors.Is(err, ErrRunInUse) {
		t.Fatalf("a second open of a run's ledger: %v, want ErrRunInUse", err)
	}
	trajs, err := CreateOutput(out, "r", false)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := CreateOutput(filepath.Join(dir, "groups.jsonl"), "r", false)
	if err != nil {
		t.Fatal(err)
	}
	l.addEpisode(0)
	l.addEpisode(1) // a failure: not in --out
	l.addGroup(0)
	// Written, but interrupted before the ledger heard of it.
	fmt.Fprintf(trajs, "{\"run_id\":\"r\",\"episode_id\":%q}\n", jobs.EpisodeID("r", 0))
	fmt.Fprintf(trajs, "{\"run_id\":\"r\",\"episode_id\":%q}\n", jobs.EpisodeID("r", 3))
	fmt.Fprintf(groups, "{\"run_id\":\"r\",\"group_id\":%q,\"trajectories\":[{\"episode_id\":%q}]}\n", jobs.GroupID("r", 2), jobs.EpisodeID("r", 9))
	for _, err := range []error{trajs.Suspend(), groups.Suspend(), l.Close(false)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err = OpenLedger(out, "r", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(true)
	trajs, err = CreateOutput(out, "r", true)
	if err != nil {
		t.Fatal(err)
	}
	groups, err = CreateOutput(filepath.Join(dir, "groups.jsonl"), "r", true)
	if err != nil {
		t.Fatal(err)
	}
	defer trajs.Discard()
	defer groups.Discard()
	if err := l.Scan(LedgerFiles{Trajectories: trajs, Groups: groups, GroupSize: 2}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if want := i <= 1 || i == 3; l.Episode(i) != want {
			t.Errorf("episode %d written: %v, want %v", i, l.Episode(i), want)
		}
	}
	for g := range 5 {
		if want := g == 0 || g == 2; l.Group(g) != want {
			t.Errorf("group %d written: %v, want %v", g, l.Group(g), want)
		}
	}
	if l.Episodes() != 3 {
		t.Errorf("%d episodes written, want 3", l.Episodes())
	}
	if trajectories, failures := l.Before(); trajectories != 2 || failures != 1 {
		t.Errorf("written before: %d trajectories and %d failures, want 2 and 1", trajectories, failures)
	}
}

// TestTrajectoryFieldsDocumented: every field rollout run writes for a
// trajectory is named in the README's Output section, and the counts it
// documents are written even at 0.
func TestTrajectoryFieldsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Output\n")
	section, _, _ = strings.Cut(section, "\n## ")
	seed := uint64(3)
	tr := &messages.Trajectory{
		RunID: "r", EpisodeID: "r-000000", GroupID: "r-g000000", GroupSize: 1, Env: "game:GuessTheNumber-v0", EnvSeed: &seed,
		PolicyVersions: []int64{0}, TraceID: "t", Timings: []messages.TurnTimings{{Wall: 1}}, ObsStyle: messages.ObsChat,
		Info: map[string]string{"k": "v"}, PromptTruncated: 1, Samples: []messages.Sample{{}},
	}
	var b bytes.Buffer
	if err := WriteRecord(&b, tr); err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &fields); err != nil {
		t.Fatal(err)
	}
	for k := range fields {
		if !strings.Contains(section, "`"+k+"`") {
			t.Errorf("field %s is written but not in the README's Output section", k)
		}
	}
	for _, k := range []string{"restarts", "resumed", "staleness", "stale"} {
		if string(fields[k]) != "0" && string(fields[k]) != "false" {
			t.Errorf("%s at its zero value: %s, want it written", k, fields[k])
		}
	}
}
