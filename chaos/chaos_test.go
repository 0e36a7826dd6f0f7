package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/chaos/lazyfs"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
)

// TestChaos runs the chaos suite against freshly built binaries: by default
// a short version (200 episodes of the three games, 2 kills per kind of
// process, one pause, one disk fill where mounting is permitted, 5 forged
// and 2 re-submitted episodes over 30s; power losses have their own test,
// TestPowerLoss); with RF_CHAOS=1 the full one (2000
// episodes, 20 kills per kind and the default counts of the other faults
// over 5 minutes; give go test -timeout 60m). RF_CHAOS_SEED sets the seed.
// The short version takes about a minute and a half, most of it the wait for
// the fleet to settle, so it is skipped with -short.
func TestChaos(t *testing.T) {
	full := os.Getenv("RF_CHAOS") == "1"
	if testing.Short() && !full {
		t.Skip("starts and kills a fleet of processes for a minute or two")
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
		// Two shards: the first with an active collector and a standby, the
		// second with one collector, which a kill leaves without any until
		// its restart.
		Collectors: 3, CollectorShards: 2,
		Episodes: 200, KillsPerKind: 2, Duration: 30 * time.Second, Timeout: 8 * time.Minute,
		Pauses: 1, DiskFills: 1, PowerLosses: -1, Forgeries: len(forgeries), Resubmits: 2,
		// Shorter than the defaults: a pause of 12–15s outlasts the ack wait.
		RequestTimeout: 15 * time.Second, AckWait: 8 * time.Second, PauseMin: 12 * time.Second, PauseMax: 15 * time.Second,
		DiskHold: 6 * time.Second, RecoverWait: 10 * time.Second,
	}
	if full {
		cfg = Config{Bin: bin, Seed: seed, Progress: testWriter{t}, Timeout: 30 * time.Minute}
	}
	// End with a report rather than the test binary's panic when go test's
	// deadline comes first.
	if d, ok := t.Deadline(); ok {
		window := cfg.Duration
		if window == 0 {
			window = 5 * time.Minute
		}
		if left := time.Until(d) - window - time.Minute; left < cfg.Timeout {
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
	kills := rep.FaultsByKind()
	for _, k := range ProcessKinds {
		if want := max(cfg.KillsPerKind, 0); !full && kills[k] != want {
			t.Errorf("%d kills of %s, want %d", kills[k], k, want)
		}
	}
}

// powerLossTestEnv turns TestPowerLoss on.
const powerLossTestEnv = "ROLLFLEET_POWERLOSS_TEST"

// TestPowerLoss runs a short chaos run whose only faults are power losses
// of the NATS server, on its default sync policy (every write synced before
// it is acknowledged): nothing may be lost or duplicated. It needs FUSE and
// is skipped with -short, like TestChaos, and runs only when
// powerLossTestEnv is set.
func TestPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet of processes and cuts its NATS server's power for a minute or two")
	}
	if os.Getenv(powerLossTestEnv) == "" {
		// Under the race detector on a loaded machine the harness could not read the
		// streams back after the run (JetStream API calls on the lazyfs store timed
		// out); until that is understood it runs on request only.
		t.Skipf("set %s=1 to run it (scripts/chaos --kinds power-loss runs the same faults)", powerLossTestEnv)
	}
	if err := lazyfs.Available(); err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	if err := Build(t.Context(), "..", bin); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Bin: bin, Seed: 3, Progress: testWriter{t}, Kinds: []Kind{KindPowerLoss},
		Episodes: 60, PowerLosses: 3, Duration: 20 * time.Second, Timeout: 5 * time.Minute,
		RequestTimeout: 10 * time.Second, AckWait: 5 * time.Second,
	}
	rep, err := Run(t.Context(), cfg)
	if rep != nil {
		t.Logf("\n%s", rep.Table())
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Lost) > 0 || len(rep.Duplicated) > 0 || !rep.OK() {
		t.Errorf("%d lost, %d duplicated after power losses:\n%s", len(rep.Lost), len(rep.Duplicated), rep.Details())
	}
	if n := rep.FaultsByKind()[KindPowerLoss]; n != cfg.PowerLosses {
		t.Errorf("%d power losses, want %d", n, cfg.PowerLosses)
	}
	for _, f := range rep.Faults {
		if f.Err != "" {
			t.Errorf("power loss at %s: %s", f.At, f.Err)
		}
	}
	// The store ran on lazyfs, and the server synced what it acknowledged.
	if rep.Store.Fsyncs == 0 || rep.Store.Drops != int64(cfg.PowerLosses) {
		t.Errorf("lazyfs saw %d fsyncs and %d drops, want some fsyncs and %d drops", rep.Store.Fsyncs, rep.Store.Drops, cfg.PowerLosses)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestPlan checks that the fault schedule is reproducible from the seed,
// covers every kind the asked number of times, stays inside the window,
// only ever picks the first model server, gives pauses and disk fills
// their lengths and alternates power losses of one node and of the cluster.
func TestPlan(t *testing.T) {
	newHarness := func(seed uint64) *harness {
		cfg := Config{Seed: seed, KillsPerKind: 7, Pauses: 3, DiskFills: 2, PowerLosses: 4, Forgeries: 6, Resubmits: 4,
			Duration: time.Minute, AckWait: 10 * time.Second, Cluster: true}
		cfg.setDefaults()
		h := &harness{cfg: cfg, rng: newRNG(seed)}
		for range 3 {
			h.envws = append(h.envws, &proc{})
			h.natsNodes = append(h.natsNodes, &proc{})
			h.disks = append(h.disks, &disk{})
		}
		h.llms = []*proc{{}, {}}
		h.models = []*proc{{}, {}}
		h.colls = []*proc{{}, {}}
		return h
	}
	af, am := newHarness(5).plan()
	bf, bm := newHarness(5).plan()
	want := map[Kind]int{KindPause: 3, KindDisk: 2, KindPowerLoss: 4, KindForge: 6, KindResubmit: 4}
	for _, k := range ProcessKinds {
		want[k] = 7
	}
	if !slices.Equal(af, bf) || !slices.Equal(am, bm) {
		t.Fatal("two plans of one seed differ")
	}
	count := map[Kind]int{}
	var wholeCluster int
	for list, evs := range [][]event{af, am} {
		for i, ev := range evs {
			if i > 0 && ev.at < evs[i-1].at {
				t.Fatalf("events out of order at %d", i)
			}
			if ev.at <= 0 || ev.at > time.Minute {
				t.Fatalf("event %+v outside the window", ev)
			}
			switch ev.kind {
			case KindModel:
				if ev.victim != 0 {
					t.Fatalf("model server %d chosen: only the first may be killed", ev.victim)
				}
			case KindPause:
				if ev.down < 15*time.Second || ev.down > 25*time.Second || ev.victim >= 7 {
					t.Fatalf("pause %+v: want 15–25s (1.5–2.5 ack waits) of one of 7 workers and collectors", ev)
				}
			case KindDisk:
				if ev.down < 7500*time.Millisecond || ev.down > 15*time.Second || ev.victim >= 3 {
					t.Fatalf("disk fill %+v: want a hold of 7.5–15s on one of 3 nodes", ev)
				}
			case KindPowerLoss:
				if ev.down < 0 || ev.down > 2*time.Second || ev.victim >= 3 || ev.variant > 1 {
					t.Fatalf("power loss %+v: want a down time of 0–2s on one of 3 nodes or all", ev)
				}
				wholeCluster += ev.variant
			case KindForge:
				if ev.variant >= len(forgeries) {
					t.Fatalf("forgery variant %d", ev.variant)
				}
			case KindResubmit:
				if ev.variant > 1 {
					t.Fatalf("resubmission mode %d", ev.variant)
				}
			default:
				if ev.down < 0 || ev.down > 2*time.Second {
					t.Fatalf("kill %+v outside the down-time bound", ev)
				}
			}
			if (ev.kind == KindForge || ev.kind == KindResubmit) != (list == 1) {
				t.Fatalf("%s event in the wrong list", ev.kind)
			}
			count[ev.kind]++
		}
	}
	if !maps.Equal(count, want) {
		t.Errorf("faults by kind %v, want %v", count, want)
	}
	if wholeCluster != 2 {
		t.Errorf("%d of 4 power losses take the whole cluster, want every second one", wholeCluster)
	}
	if cf, _ := newHarness(6).plan(); cf[0] == af[0] && cf[1] == af[1] {
		t.Error("two seeds gave the same schedule")
	}
	h := newHarness(5)
	h.cfg.Kinds = []Kind{KindForge}
	if f, m := h.plan(); len(f) != 0 || len(m) != 6 {
		t.Errorf("only forgeries asked for: %d fleet and %d message events", len(f), len(m))
	}
}

// checkFixtures runs a few episodes of the default games in one process
// and returns their trajectories as the fleet encodes them on the wire and
// the harness's decoder reads them.
func checkFixtures(t *testing.T) []*Trajectory {
	t.Helper()
	var out bytes.Buffer
	seed := uint64(3)
	sum, err := fleet.Run(t.Context(), fleet.Options{Env: strings.Join(DefaultEnvs, ","), Episodes: 15, Seed: &seed, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Trajectories != 15 {
		t.Fatalf("want 15 trajectories, got %s", sum)
	}
	var trajs []*Trajectory
	for line := range bytes.Lines(out.Bytes()) {
		var tr messages.Trajectory
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatal(err)
		}
		tr.V = messages.Version
		data, err := messages.Marshal(&tr)
		if err != nil {
			t.Fatal(err)
		}
		mine, err := DecodeTrajectory(data)
		if err != nil {
			t.Fatal(err)
		}
		trajs = append(trajs, mine)
	}
	return trajs
}

// stepsOf cuts a chat trajectory into the step events that made it, as
// episode id's given attempt.
func stepsOf(tr *Trajectory, id string, attempt int64) []*Step {
	obs, lp := tr.ObservationTokens, tr.RolloutLogProbs
	var steps []*Step
	for i, r := range tr.ActionRanges {
		end := int32(len(obs))
		if i+1 < len(tr.ActionRanges) {
			end = tr.ActionRanges[i+1].Start
		}
		s := &Step{V: 1, EpisodeID: id, Turn: int64(i), Attempt: attempt, ActionTokens: obs[r.Start:r.End],
			ActionLogprobs: lp[r.Start:r.End], FeedbackTokens: obs[r.End:end], Reward: tr.StepRewards[i]}
		if i == 0 {
			s.PromptTokens = obs[:r.Start]
		}
		steps = append(steps, s)
	}
	return steps
}

// splice joins a's turns before k and b's from k into one trajectory under
// a's id and seed, as a collector that mixed two runs would.
func splice(a, b *Trajectory, k int) *Trajectory {
	z := *a
	cut, from := a.ActionRanges[k].Start, b.ActionRanges[k].Start
	delta := cut - from
	z.ObservationTokens = slices.Concat(a.ObservationTokens[:cut], b.ObservationTokens[from:])
	z.RolloutLogProbs = slices.Concat(a.RolloutLogProbs[:cut], b.RolloutLogProbs[from:])
	z.ActionRanges = slices.Clone(a.ActionRanges[:k])
	for _, r := range b.ActionRanges[k:] {
		z.ActionRanges = append(z.ActionRanges, Span{r.Start + delta, r.End + delta})
	}
	z.StepRewards = slices.Concat(a.StepRewards[:k], b.StepRewards[k:])
	z.Reward = 0
	for _, r := range z.StepRewards {
		z.Reward += r
	}
	z.Turns, z.Truncated, z.Success = b.Turns, b.Truncated, b.Success
	z.ExtraLogs = maps.Clone(b.ExtraLogs)
	return &z
}

// TestCheck takes real trajectories of the three games through the checks:
// as they are they pass; a lost episode, a duplicate, a broken invariant, a
// trajectory that does not replay, one with forged content and spliced ones
// are each caught.
func TestCheck(t *testing.T) {
	trajs := checkFixtures(t)
	for _, tr := range trajs {
		if err := checkInvariants(tr); err != nil {
			t.Fatalf("%s: %v", tr.EpisodeID, err)
		}
		if err := Replay(tr); err != nil {
			t.Fatalf("%s (%s): %v", tr.EpisodeID, tr.Env, err)
		}
	}
	var guess []*Trajectory // GuessTheNumber trajectories of at least 3 turns
	for _, tr := range trajs {
		if strings.Contains(tr.Env, "GuessTheNumber") && tr.Turns >= 3 {
			guess = append(guess, tr)
		}
	}
	if len(guess) < 2 {
		t.Fatalf("only %d GuessTheNumber trajectories of 3 turns or more", len(guess))
	}

	const run = "chaos-1"
	subj := messages.NewSubjects("")
	submitted := map[string]time.Time{}
	for _, tr := range trajs {
		submitted[tr.EpisodeID] = time.Now()
		tr.RunID = run
	}
	// build checks the trajectories, each with its steps as attempt 1,
	// after mutate has had its way with them; with withGap the harness
	// missed two messages of the steps stream meanwhile, and offRunSteps
	// honest steps were seen off the run.
	withGap, offRunSteps := false, 0
	build := func(mutate func(o *outcomes, idx stepIndex, rep *Report)) *Report {
		o := &outcomes{run: run, subj: subj, ours: map[string]bool{}, byID: map[string][]*record{}}
		idx := stepIndex{}
		for i, tr := range trajs {
			o.ours[tr.EpisodeID] = true
			o.order = append(o.order, tr.EpisodeID)
			r := &record{stream: "RF_TRAJECTORIES", seq: uint64(i + 1), subject: subj.Trajectories(run, tr.Env), traj: tr, stored: time.Now()}
			o.records = append(o.records, r)
			o.byID[tr.EpisodeID] = append(o.byID[tr.EpisodeID], r)
			for j, s := range stepsOf(tr, tr.EpisodeID, 1) {
				idx.add(s, uint64(100*i+j), "")
			}
		}
		rep := newReport(Config{})
		ev := &evidence{logDir: t.TempDir(), index: idx, submitted: submitted}
		mutate(o, idx, rep)
		if withGap {
			ev.gaps = []gap{{from: 7, to: 8, after: time.Now().Add(-time.Hour), before: time.Now()}}
		}
		ev.offRunCount = offRunSteps
		rep.Submitted = len(o.order)
		rep.check(o, ev)
		return rep
	}
	replace := func(o *outcomes, tr *Trajectory) { o.byID[tr.EpisodeID][0] = &record{traj: tr} }

	if rep := build(func(*outcomes, stepIndex, *Report) {}); !rep.OK() || rep.Trajectories != len(trajs) {
		t.Fatalf("a clean run fails the check:\n%s%s", rep.Table(), rep.Details())
	}
	// Records and groups on their run's subjects, as the fleet publishes
	// them, and groups read: fine. Off the run, they break the promise.
	group := func(o *outcomes, g *Group, subject string) {
		o.groups = append(o.groups, &groupRecord{seq: uint64(len(o.groups) + 1), subject: subject, group: g})
	}
	ofRun := func(tr *Trajectory) *Group {
		return &Group{V: 1, RunID: run, GroupID: tr.GroupID, Env: tr.Env, Episodes: []string{tr.EpisodeID}}
	}
	grouped := build(func(o *outcomes, _ stepIndex, _ *Report) {
		for _, tr := range trajs[:3] {
			group(o, ofRun(tr), subj.Groups(run, tr.Env))
		}
	})
	if !grouped.OK() || grouped.Groups != 3 || len(grouped.Notes) != 0 {
		t.Errorf("groups of the run fail the check: %v %v", grouped.Problems(), grouped.Notes)
	}
	offRun := build(func(o *outcomes, _ stepIndex, _ *Report) {
		a, b, c := *trajs[0], trajs[1], trajs[2]
		a.RunID = "chaos-2"
		o.records[0].traj = &a
		o.byID[a.EpisodeID][0].traj = &a
		o.records[1].subject = subj.Trajectories("chaos-2", b.Env)
		g := ofRun(c)
		g.RunID = "chaos-2"
		group(o, g, subj.Groups(run, c.Env))
		group(o, ofRun(c), subj.Groups("", c.Env))
		f := &Failure{V: 1, RunID: run, EpisodeID: trajs[3].EpisodeID, Kind: "episode", Reason: "late"}
		o.records = append(o.records, &record{stream: "RF_FAILURES", seq: 1, subject: subj.Failures("", "episode"), fail: f})
	})
	if offRun.OK() || len(offRun.WrongRun) != 5 {
		t.Errorf("records off their run not reported: %q", offRun.WrongRun)
	}
	offRunSteps = 2
	stepsOff := build(func(*outcomes, stepIndex, *Report) {})
	offRunSteps = 0
	if stepsOff.OK() || stepsOff.StepsOffRun != 2 || !strings.Contains(strings.Join(stepsOff.Problems(), ","), "2 step events off their run") {
		t.Errorf("steps off their run not reported: %v", stepsOff.Problems())
	}
	badGroups := build(func(o *outcomes, _ stepIndex, _ *Report) {
		o.groups = append(o.groups, &groupRecord{seq: 9, bad: errWire})
		g := ofRun(trajs[0])
		g.Episodes = append(g.Episodes, "chaos-1-999999")
		group(o, g, subj.Groups(run, g.Env))
	})
	if badGroups.OK() || badGroups.Malformed != 1 || badGroups.Foreign != 1 || badGroups.Groups != 1 {
		t.Errorf("an undecodable group and one of a foreign episode: malformed %d, foreign %d, groups %d", badGroups.Malformed, badGroups.Foreign, badGroups.Groups)
	}

	lost := build(func(o *outcomes, _ stepIndex, _ *Report) { delete(o.byID, trajs[0].EpisodeID) })
	if lost.OK() || len(lost.Lost) != 1 || lost.Lost[0] != trajs[0].EpisodeID {
		t.Errorf("lost episode not reported: %v", lost.Lost)
	}
	dup := build(func(o *outcomes, _ stepIndex, _ *Report) {
		id := trajs[1].EpisodeID
		o.byID[id] = append(o.byID[id], &record{stream: "RF_FAILURES", seq: 1, fail: &Failure{V: 1, EpisodeID: id, Kind: "episode", Reason: "late"}})
	})
	if dup.OK() || len(dup.Duplicated) != 1 || dup.DuplicateRecords != 1 {
		t.Errorf("duplicate not reported: %v", dup.Duplicated)
	}
	invalid := build(func(o *outcomes, _ stepIndex, _ *Report) {
		tr := *trajs[2]
		tr.Reward += 1 // no longer the sum of the step rewards
		replace(o, &tr)
	})
	if invalid.OK() || len(invalid.Invalid) != 1 {
		t.Errorf("broken invariant not reported: %v", invalid.Invalid)
	}
	replay := build(func(o *outcomes, _ stepIndex, _ *Report) {
		tr := *guess[0]
		seed := *tr.EnvSeed + 1 // another game: the actions replay differently
		tr.EnvSeed = &seed
		replace(o, &tr)
	})
	if replay.OK() || len(replay.ReplayErrors) != 1 || len(replay.Unproven) != 0 {
		t.Errorf("replay mismatch not reported: %v %v", replay.ReplayErrors, replay.Unproven)
	}
	if !strings.Contains(replay.Table(), "verdict                FAIL") {
		t.Errorf("table does not show the verdict:\n%s", replay.Table())
	}

	// A forged last step ending the game with a reward of 1e6: the record
	// keeps every invariant; the provenance check finds the forgery.
	forged := build(func(o *outcomes, idx stepIndex, rep *Report) {
		tr := *guess[1]
		last := len(tr.StepRewards) - 1
		tr.StepRewards = slices.Clone(tr.StepRewards)
		tr.Reward += 1e6 - tr.StepRewards[last]
		tr.StepRewards[last] = 1e6
		replace(o, &tr)
		steps := stepsOf(&tr, tr.EpisodeID, 1)
		idx.add(steps[last], 9999, "reward 1e6")
		rep.Forged[tr.EpisodeID] = "reward 1e6"
	})
	if forged.OK() || len(forged.ForgedContent) != 1 || len(forged.Unproven) != 1 || !strings.Contains(forged.Unproven[0], "forged reward 1e6 message") {
		t.Errorf("forged content not reported: %v / %v", forged.ForgedContent, forged.Unproven)
	}

	// The same episode id run twice on two games, its turns stored under
	// one attempt number (as a re-submission's are): a splice of the two
	// has honest steps for every turn, and the replay catches it.
	a, b := guess[0], guess[1]
	k := int(min(a.Turns, b.Turns)) - 1
	spliced := build(func(o *outcomes, idx stepIndex, _ *Report) {
		replace(o, splice(a, b, k))
		for j, s := range stepsOf(b, a.EpisodeID, 1)[k:] {
			idx.add(s, uint64(5000+j), "")
		}
	})
	if spliced.OK() || len(spliced.ReplayErrors) != 1 || len(spliced.Unproven) != 0 {
		t.Errorf("splice of two runs under one attempt not caught by the replay: %v %v", spliced.ReplayErrors, spliced.Unproven)
	}
	// A step the harness never saw, while it missed part of the steps
	// stream: the trajectory cannot be verified, which is no failure.
	withGap = true
	unseen := build(func(_ *outcomes, idx stepIndex, _ *Report) { delete(idx, trajs[5].EpisodeID) })
	withGap = false
	if !unseen.OK() || len(unseen.Unverified) != 1 || unseen.StepsMissed != 2 {
		t.Errorf("unseen steps during a gap: unverified %v, missed %d, problems %v", unseen.Unverified, unseen.StepsMissed, unseen.Problems())
	}
	if rep := build(func(_ *outcomes, idx stepIndex, _ *Report) { delete(idx, trajs[5].EpisodeID) }); rep.OK() || len(rep.Unproven) != 1 {
		t.Errorf("unseen steps without a gap not reported: %v", rep.Unproven)
	}
	// Turns of two attempts of one game: the provenance check catches it.
	across := build(func(o *outcomes, idx stepIndex, _ *Report) {
		z := splice(a, b, k)
		replace(o, z)
		delete(idx, a.EpisodeID)
		steps := stepsOf(z, a.EpisodeID, 1)
		for j, s := range steps {
			if j >= k {
				s.Attempt = 2
			}
			idx.add(s, uint64(6000+j), "")
		}
	})
	if across.OK() || len(across.Unproven) != 1 || !strings.Contains(across.Unproven[0], "spliced") {
		t.Errorf("splice across attempts not reported: %v", across.Unproven)
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

// TestProcPause checks that stop holds a process (state T in /proc) and
// resume lets it go on.
func TestProcPause(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	p := &proc{name: "sleep", bin: "/bin/sleep", args: []string{"60"}, logPath: filepath.Join(t.TempDir(), "sleep.log")}
	t.Cleanup(func() {
		p.kill()
		if p.log != nil {
			p.log.Close()
		}
	})
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	state := func() byte {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid()), "stat"))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state …
		i := bytes.LastIndexByte(data, ')')
		return data[i+2]
	}
	waitState := func(stopped bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); (state() == 'T') != stopped; {
			if time.Now().After(deadline) {
				t.Fatalf("state %c, want stopped=%v", state(), stopped)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	p.stop()
	if !p.paused {
		t.Fatal("not marked paused")
	}
	waitState(true)
	p.resume()
	waitState(false)
	p.stop()
	waitState(true)
	p.kill() // a stopped process dies of SIGKILL too
	if !p.exited() || p.paused {
		t.Fatal("a paused process survived kill")
	}
}

// TestRunEvidence checks how runs of an episode in the steps stream are
// read: overlapping runs, a rerun after a finished run, and the diagnosis
// of a lost episode one of whose runs finished.
func TestRunEvidence(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	k := func(a int64) runKey { return runKey{attempt: a} }
	runs := map[runKey]*stepRun{
		k(1): {key: k(1), start: at(1), finish: at(5)},
		k(2): {key: k(2), start: at(10), finish: at(40), done: true},
		k(3): {key: k(3), start: at(12), finish: at(14)},
	}
	if !overlapping(runs) {
		t.Error("attempt 3 started while attempt 2 ran: not seen as overlapping")
	}
	if rerunAfterDone(runs) {
		t.Error("no run started after a finished one")
	}
	runs[k(4)] = &stepRun{key: k(4), start: at(50), finish: at(51)}
	if !rerunAfterDone(runs) {
		t.Error("attempt 4 started after attempt 2 had finished: not seen")
	}
	delete(runs, k(4))
	if overlapping(map[runKey]*stepRun{k(1): runs[k(1)], k(2): runs[k(2)]}) {
		t.Error("sequential runs seen as overlapping")
	}
	ev := &evidence{t0: t0, steps: map[string]map[runKey]*stepRun{"e": runs},
		maxDeliveries: map[string]maxDeliveries{"e": {Deliveries: 5}}, leftover: map[string]time.Time{}}
	got := ev.diagnose("e")
	if !strings.Contains(got, "attempt 2 stored its last step (done) at +40.0s, yet no outcome was recorded") || !strings.Contains(got, "delivered the request 5 times") {
		t.Errorf("diagnosis: %s", got)
	}
}
