package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
)

// TestChaos runs the chaos suite against freshly built binaries: by default
// a short version (200 episodes, 2 kills per kind over 30s); with RF_CHAOS=1
// the full one (2000 episodes, 20 kills per kind over 5 minutes; give go test
// -timeout 60m). RF_CHAOS_SEED sets the seed. The short version takes a few
// minutes, most of it the env workers' request timeout after a kill, so it
// is skipped with -short.
func TestChaos(t *testing.T) {
	full := os.Getenv("RF_CHAOS") == "1"
	if testing.Short() && !full {
		t.Skip("starts and kills a fleet of processes for a few minutes")
	}
	seed := uint64(1)
	if s := os.Getenv("RF_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("RF_CHAOS_SEED: %v", err)
		}
	}
	bin := t.TempDir()
	if err := Build(t.Context(), "..", bin); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Bin: bin, Seed: seed, Progress: testWriter{t},
		Episodes: 200, KillsPerKind: 2, Duration: 30 * time.Second, Timeout: 8 * time.Minute,
		// Shorter than the defaults, for env workers that take the flags.
		RequestTimeout: 15 * time.Second, AckWait: 15 * time.Second,
	}
	if full {
		cfg.Episodes, cfg.KillsPerKind, cfg.Duration, cfg.Timeout = 2000, 20, 5*time.Minute, 30*time.Minute
	}
	// End with a report rather than the test binary's panic when go test's
	// deadline comes first.
	if d, ok := t.Deadline(); ok {
		if left := time.Until(d) - cfg.Duration - time.Minute; left < cfg.Timeout {
			cfg.Timeout = max(left, time.Minute)
		}
	}
	rep, err := Run(t.Context(), cfg)
	if rep != nil {
		t.Logf("\n%s", rep.Table())
	}
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("the fleet broke the promise:\n%s", rep.Details())
	}
	if got := len(rep.Kills); got != len(Kinds)*cfg.KillsPerKind {
		t.Errorf("%d kills, want %d per kind", got, cfg.KillsPerKind)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestPlan checks that the kill schedule is reproducible from the seed,
// covers every kind the asked number of times, stays inside the window and
// only ever picks the first model server.
func TestPlan(t *testing.T) {
	newHarness := func(seed uint64) *harness {
		cfg := Config{Seed: seed, KillsPerKind: 7, Duration: time.Minute}
		cfg.setDefaults()
		h := &harness{cfg: cfg, rng: newRNG(seed)}
		for range 3 {
			h.envws = append(h.envws, &proc{})
		}
		h.llms = []*proc{{}, {}}
		h.models = []*proc{{}, {}}
		h.coll, h.nats = &proc{}, &proc{}
		return h
	}
	a, b := newHarness(5).plan(), newHarness(5).plan()
	if len(a) != 7*len(Kinds) {
		t.Fatalf("%d events, want %d", len(a), 7*len(Kinds))
	}
	count := map[Kind]int{}
	for i, ev := range a {
		if ev != b[i] {
			t.Fatalf("event %d differs between two plans of one seed: %+v vs %+v", i, ev, b[i])
		}
		if i > 0 && ev.at < a[i-1].at {
			t.Fatalf("events out of order at %d", i)
		}
		if ev.at <= 0 || ev.at > time.Minute || ev.down < 0 || ev.down > 2*time.Second {
			t.Fatalf("event %+v outside the window or the down-time bound", ev)
		}
		if ev.kind == KindModel && ev.victim != 0 {
			t.Fatalf("model server %d chosen: only the first may be killed", ev.victim)
		}
		count[ev.kind]++
	}
	for _, k := range Kinds {
		if count[k] != 7 {
			t.Errorf("%s: %d kills, want 7", k, count[k])
		}
	}
	if c := newHarness(6).plan(); c[0] == a[0] && c[1] == a[1] {
		t.Error("two seeds gave the same schedule")
	}
}

// TestCheck runs a few episodes in one process, then checks that the
// report accepts their outcomes as they are and catches a lost episode, a
// duplicate, a broken invariant and a trajectory that does not replay.
func TestCheck(t *testing.T) {
	var out bytes.Buffer
	seed := uint64(3)
	sum, err := fleet.Run(t.Context(), fleet.Options{Env: "game:GuessTheNumber-v0", Episodes: 12, Seed: &seed, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Trajectories != 12 {
		t.Fatalf("want 12 trajectories, got %s", sum)
	}
	var trajs []*messages.Trajectory
	for line := range bytes.Lines(out.Bytes()) {
		var tr messages.Trajectory
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatal(err)
		}
		tr.V = messages.Version
		trajs = append(trajs, &tr)
	}
	for _, tr := range trajs {
		if err := Replay(tr); err != nil {
			t.Fatalf("%s: %v", tr.EpisodeID, err)
		}
	}

	build := func(mutate func(o *outcomes)) *Report {
		o := &outcomes{ours: map[string]bool{}, byID: map[string][]*record{}}
		for i, tr := range trajs {
			o.ours[tr.EpisodeID] = true
			o.order = append(o.order, tr.EpisodeID)
			r := &record{stream: "RF_TRAJECTORIES", seq: uint64(i + 1), traj: tr}
			o.records = append(o.records, r)
			o.byID[tr.EpisodeID] = append(o.byID[tr.EpisodeID], r)
		}
		mutate(o)
		rep := newReport(Config{})
		rep.Submitted = len(o.order)
		rep.check(o, &evidence{logDir: t.TempDir()})
		return rep
	}
	if rep := build(func(*outcomes) {}); !rep.OK() || rep.Trajectories != 12 {
		t.Fatalf("a clean run fails the check:\n%s%s", rep.Table(), rep.Details())
	}
	lost := build(func(o *outcomes) { delete(o.byID, trajs[0].EpisodeID) })
	if lost.OK() || len(lost.Lost) != 1 || lost.Lost[0] != trajs[0].EpisodeID {
		t.Errorf("lost episode not reported: %v", lost.Lost)
	}
	dup := build(func(o *outcomes) {
		id := trajs[1].EpisodeID
		o.byID[id] = append(o.byID[id], &record{stream: "RF_FAILURES", seq: 1,
			fail: &messages.Failure{V: messages.Version, EpisodeID: id, Kind: messages.FailureEpisode, Reason: "late"}})
	})
	if dup.OK() || len(dup.Duplicated) != 1 || dup.DuplicateRecords != 1 {
		t.Errorf("duplicate not reported: %v", dup.Duplicated)
	}
	invalid := build(func(o *outcomes) {
		tr := *trajs[2]
		tr.Reward += 1 // no longer the sum of the step rewards
		o.byID[tr.EpisodeID][0] = &record{traj: &tr}
	})
	if invalid.OK() || len(invalid.Invalid) != 1 {
		t.Errorf("broken invariant not reported: %v", invalid.Invalid)
	}
	replay := build(func(o *outcomes) {
		tr := *trajs[3]
		tr.StepRewards = append([]float64(nil), tr.StepRewards...)
		seed := *tr.EnvSeed + 1 // another game: the actions replay differently
		tr.EnvSeed = &seed
		o.byID[tr.EpisodeID][0] = &record{traj: &tr}
	})
	if replay.OK() || len(replay.ReplayErrors) != 1 {
		t.Errorf("replay mismatch not reported: %v", replay.ReplayErrors)
	}
	if !strings.Contains(replay.Table(), "verdict                FAIL") {
		t.Errorf("table does not show the verdict:\n%s", replay.Table())
	}
}

// TestProcKill checks the process plumbing: a started process runs, is
// killed with SIGKILL, and the log holds each incarnation's header.
func TestProcKill(t *testing.T) {
	if _, err := os.Stat("/bin/sleep"); err != nil {
		t.Skip("no /bin/sleep")
	}
	p := &proc{name: "sleep", bin: "/bin/sleep", args: []string{"60"}, logPath: filepath.Join(t.TempDir(), "sleep.log")}
	t.Cleanup(func() {
		p.kill()
		if p.log != nil {
			p.log.Close()
		}
	})
	for i := range 2 {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		if p.exited() {
			t.Fatal("exited at once")
		}
		p.kill()
		if !p.exited() || !p.killed {
			t.Fatalf("incarnation %d still running after kill", i+1)
		}
	}
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "=== chaos: start #"); n != 2 {
		t.Errorf("%d start headers in the log, want 2:\n%s", n, data)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	p.ready = logLine("never printed")
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := p.waitReady(ctx, 200*time.Millisecond); err == nil {
		t.Error("waitReady succeeded without the marker")
	}
}

// TestRunEvidence checks how runs of an episode in the steps stream are
// read: overlapping runs, a rerun after a finished run, and the diagnosis
// of an episode whose finished run the collector dropped for a later one.
func TestRunEvidence(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	runs := map[int32]*stepRun{
		1: {attempt: 1, start: at(1), finish: at(5)},
		2: {attempt: 2, start: at(10), finish: at(40), done: true},
		3: {attempt: 3, start: at(12), finish: at(14)},
	}
	if !overlapping(runs) {
		t.Error("attempt 3 started while attempt 2 ran: not seen as overlapping")
	}
	if rerunAfterDone(runs) {
		t.Error("no run started after a finished one")
	}
	runs[4] = &stepRun{attempt: 4, start: at(50), finish: at(51)}
	if !rerunAfterDone(runs) {
		t.Error("attempt 4 started after attempt 2 had finished: not seen")
	}
	delete(runs, 4)
	if overlapping(map[int32]*stepRun{1: runs[1], 2: runs[2]}) {
		t.Error("sequential runs seen as overlapping")
	}
	ev := &evidence{t0: t0, steps: map[string]map[int32]*stepRun{"e": runs},
		maxDeliveries: map[string]maxDeliveries{"e": {Deliveries: 5}}, leftover: map[string]time.Time{}}
	got := ev.diagnose("e")
	if !strings.Contains(got, "attempt 2 ran to its end, but attempt 3 had started") || !strings.Contains(got, "delivered the request 5 times") {
		t.Errorf("diagnosis: %s", got)
	}
}
