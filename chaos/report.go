package chaos

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/chaos/lazyfs"
)

// Fault is one fault the harness injected and what became of it.
type Fault struct {
	At   time.Duration // since the run started
	Kind Kind
	// Name is the process (a kill, a pause, a disk fill: the NATS server)
	// or the episode (a forgery, a resubmission).
	Name string
	PID  int
	// Down is the pause before a restart, a pause's length, or how long a
	// disk was full.
	Down time.Duration
	// Ready is the time from a restart until the process was ready.
	Ready time.Duration
	// Disabled reports that a NATS server disabled JetStream when its disk
	// filled; Recovered is how long after the disk was freed it stored
	// messages again by itself, without logging failed stores, and
	// Unrecovered that it did not within Config.RecoverWait, so the harness
	// restarted it.
	Disabled    bool
	Recovered   time.Duration
	Unrecovered bool
	// Dropped is how many bytes a power loss dropped: the data its NATS
	// servers had written but not fsynced.
	Dropped int64
	Detail  string
	Err     string // the fault could not be carried out as planned
}

// describe names a fault in a few words.
func (f *Fault) describe() string {
	switch f.Kind {
	case KindPause:
		return fmt.Sprintf("%s paused for %s", f.Name, f.Down.Round(time.Second))
	case KindDisk:
		return f.Name + " disk filled"
	case KindPowerLoss:
		return f.Name + " lost power"
	case KindForge:
		return "forged steps of " + f.Name
	case KindResubmit:
		return f.Name + " re-submitted"
	}
	return f.Name + " killed"
}

// Exit is a fleet process that stopped without being killed; the harness
// restarted it.
type Exit struct {
	At         time.Duration
	Kind       Kind
	Name       string
	Err        string // the exit status
	LogTail    string
	RestartErr string
}

// Report is what a chaos run found.
type Report struct {
	// The run's settings.
	Seed       uint64
	Envs       []string
	Kinds      []Kind
	Duration   time.Duration
	Collectors int
	// Shards is the number of collector shards.
	Shards   int
	Cluster  bool
	AckWait  time.Duration
	DiskSize int64
	// Sync is the NATS servers' --sync policy ("" for their default).
	Sync string
	// Store counts what the lazyfs mounts under the NATS servers did when
	// power losses ran: fsyncs, bytes synced and dropped.
	Store lazyfs.Stats
	// Workdir holds the logs and the NATS data; Kept reports whether it is
	// left in place.
	Workdir string
	Kept    bool
	// Wall is the whole run; ChaosSpan the time until the last fault was
	// over.
	Wall, ChaosSpan time.Duration
	// TimedOut reports that the fleet had not settled by the timeout.
	TimedOut bool

	Faults []Fault
	Exits  []Exit

	// Submitted is the number of episodes submitted; SubmitRetries the
	// publishes the harness repeated (a NATS restart in between).
	Submitted     int
	SubmitRetries int64
	// Trajectories and Failures count the episodes decided by each kind of
	// first record; FailureReasons counts failures by kind and reason.
	Trajectories, Failures int
	FailureReasons         map[string]int
	// Resumed counts trajectories with Resumed > 0, ResumedTotal sums their
	// Resumed, and ResumedChecked counts those that passed the replay.
	Resumed, ResumedTotal, ResumedChecked int
	// Redelivered counts episodes whose step events come from more than one
	// run (attempt); ExtraRuns sums the runs beyond the first.
	Redelivered, ExtraRuns int
	// ConcurrentRuns counts episodes two of whose runs stored steps at the
	// same time (two workers ran the episode at once).
	ConcurrentRuns int
	// RerunAfterDone counts episodes with a run that started after another
	// run had stored its final step.
	RerunAfterDone int
	// RunDetails shows the runs of the first few episodes counted in
	// ConcurrentRuns or RerunAfterDone.
	RunDetails []string
	// MaxDelivered counts episodes for which JetStream announced it had
	// delivered them as often as the env workers' consumer allows;
	// LeftInQueue those whose request was still in the episodes queue at
	// the end (never acknowledged).
	MaxDelivered, LeftInQueue int
	// Retries counts retries visible in the processes' logs, by what retried.
	Retries map[string]int
	// LogProblems counts warning and error log lines by process kind, level
	// and message (digits folded to N).
	LogProblems map[string]int

	// Forged maps each episode that got forged step events to the
	// forgery's variant; ForgedMessages counts the forged messages
	// published, ForgedStored those found in the steps stream. ForgedHonest
	// counts forged episodes whose trajectory is their honest run's,
	// ForgedFailures lists the failure records of forged episodes.
	Forged         map[string]string
	ForgedMessages int
	ForgedStored   int
	ForgedHonest   int
	ForgedFailures []string
	// Resubmitted maps each episode submitted a second time to when
	// ("in flight" or "finished").
	Resubmitted map[string]string

	// Lost lists episodes without any outcome record; Duplicated those with
	// more than one (DuplicateRecords counts the extra records). The details
	// give the evidence for the first few.
	Lost, LostDetails            []string
	Duplicated, DuplicateDetails []string
	DuplicateRecords             int
	// Invalid lists trajectories that fail the harness's invariant checks;
	// Unproven those not assembled from one run's honest steps
	// (ForgedContent the episodes among them holding forged content);
	// ReplayErrors those that disagree with a replay of their game.
	Invalid, Unproven, ReplayErrors []string
	ForgedContent                   []string
	// Unverified lists trajectories whose provenance the harness could not
	// establish because steps of their time were deleted before it read
	// them (StepsMissed counts those steps); they do not fail the run.
	Unverified  []string
	StepsMissed int
	// Malformed counts outcome and group records that do not decode,
	// MalformedSteps step events that do not; Foreign counts records (and
	// group members) of no submitted episode.
	Malformed, MalformedSteps, Foreign int
	// Groups counts the group records read (and acknowledged, as a trainer
	// does: the groups stream is a work queue).
	Groups int
	// WrongRun lists the outcome and group records of our episodes that do
	// not carry the run's id or are not on its subjects; StepsOffRun counts
	// such honest step events (the details show the first few).
	WrongRun           []string
	StepsOffRun        int
	StepsOffRunDetails []string
	// Notes are other observations worth a look.
	Notes []string
}

func newReport(cfg Config) *Report {
	return &Report{
		Seed: cfg.Seed, Envs: cfg.Envs, Kinds: cfg.Kinds, Duration: cfg.Duration, Collectors: cfg.Collectors, Shards: cfg.CollectorShards,
		Cluster: cfg.Cluster, AckWait: cfg.AckWait, DiskSize: cfg.DiskSize, Sync: cfg.Sync,
		FailureReasons: map[string]int{}, Retries: map[string]int{}, LogProblems: map[string]int{},
		Forged: map[string]string{}, Resubmitted: map[string]string{},
	}
}

// Unrecovered counts the disk faults the fleet did not recover from by
// itself.
func (r *Report) Unrecovered() int {
	n := 0
	for _, f := range r.Faults {
		if f.Unrecovered {
			n++
		}
	}
	return n
}

// Problems lists what breaks the promise, empty when the run kept it:
// every submitted episode has exactly one outcome; every trajectory decodes,
// keeps the invariants, comes from one run's honest steps and replays; and
// the fleet recovered from every fault by itself.
func (r *Report) Problems() []string {
	var p []string
	add := func(n int, what string) {
		if n > 0 {
			p = append(p, fmt.Sprintf("%d %s", n, what))
		}
	}
	if r.Submitted == 0 {
		p = append(p, "nothing submitted")
	}
	add(len(r.Lost), "lost")
	add(len(r.Duplicated), "duplicated")
	add(len(r.Invalid), "invalid")
	add(len(r.Unproven), "not from one honest run")
	add(len(r.ReplayErrors), "replay mismatches")
	add(r.Malformed, "undecodable outcomes")
	add(len(r.WrongRun), "records off their run")
	add(r.StepsOffRun, "step events off their run")
	add(r.Unrecovered(), "faults not recovered without a restart")
	if len(r.Lost) == 0 && len(r.Duplicated) == 0 && r.Trajectories+r.Failures != r.Submitted {
		p = append(p, fmt.Sprintf("%d decided of %d", r.Trajectories+r.Failures, r.Submitted))
	}
	return p
}

// OK reports whether the run kept the promise (see Problems).
func (r *Report) OK() bool { return len(r.Problems()) == 0 }

// FaultsByKind counts the faults of each kind that were carried out.
func (r *Report) FaultsByKind() map[Kind]int {
	n := map[Kind]int{}
	for _, f := range r.Faults {
		if f.Err == "" || f.Kind != KindForge && f.Kind != KindResubmit && f.Kind != KindPause {
			n[f.Kind]++
		}
	}
	return n
}

// Table renders the run's figures: faults by kind, episodes resumed,
// retries, failures by reason, what became of forged and re-submitted
// episodes, lost, duplicated, invalid and the verdict.
func (r *Report) Table() string {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-22s %s\n", name, fmt.Sprintf(format, args...))
	}
	nats := "1 NATS server"
	if r.Cluster {
		nats = "3-node NATS cluster"
	}
	fmt.Fprintf(&b, "chaos run: seed=%d episodes=%d collectors=%d shards=%d %s window=%s chaos=%s wall=%s\n",
		r.Seed, r.Submitted, r.Collectors, max(r.Shards, 1), nats, r.Duration, r.ChaosSpan.Round(time.Second), r.Wall.Round(time.Second))
	row("envs", "%s", strings.Join(r.Envs, ", "))
	byKind := r.FaultsByKind()
	var kills []string
	total := 0
	for _, k := range ProcessKinds {
		kills = append(kills, fmt.Sprintf("%s %d", k, byKind[k]))
		total += byKind[k]
	}
	row("kills (SIGKILL)", "%s (total %d)", strings.Join(kills, ", "), total)
	var ready []string
	for _, k := range ProcessKinds {
		var sum time.Duration
		var n, failed int
		for _, x := range r.Faults {
			if x.Kind == k {
				sum += x.Ready
				n++
				if x.Err != "" {
					failed++
				}
			}
		}
		if n > 0 {
			s := fmt.Sprintf("%s %s", k, (sum / time.Duration(n)).Round(time.Millisecond))
			if failed > 0 {
				s += fmt.Sprintf(" (%d not ready)", failed)
			}
			ready = append(ready, s)
		}
	}
	if len(ready) > 0 {
		row("mean restart to ready", "%s", strings.Join(ready, ", "))
	}
	r.pauseRow(row)
	r.diskRow(row)
	r.powerLossRow(row)
	r.messageRows(row)
	exits := map[Kind]int{}
	for _, x := range r.Exits {
		exits[x.Kind]++
	}
	row("unexpected exits", "%d%s", len(r.Exits), kindCounts(exits))
	row("episodes", "submitted %d, trajectories %d, failures %d (submit retries %d)",
		r.Submitted, r.Trajectories, r.Failures, r.SubmitRetries)
	row("resumed", "%d episodes (resumed %d times in all), %d of them replayed consistently",
		r.Resumed, r.ResumedTotal, r.ResumedChecked)
	row("redelivered", "%d episodes ran more than once (%d extra runs, from the steps stream)", r.Redelivered, r.ExtraRuns)
	row("", "%d with two runs storing steps at the same time, %d played again after a run had finished", r.ConcurrentRuns, r.RerunAfterDone)
	row("max deliveries", "%d episodes reached the env workers' MaxDeliver; %d requests left unacknowledged in the queue",
		r.MaxDelivered, r.LeftInQueue)
	if len(r.Retries) == 0 {
		row("retries (logs)", "none")
	}
	for i, name := range slices.Sorted(maps.Keys(r.Retries)) {
		label := ""
		if i == 0 {
			label = "retries (logs)"
		}
		row(label, "%6d  %s", r.Retries[name], name)
	}
	if len(r.FailureReasons) == 0 {
		row("failures by reason", "none")
	}
	for i, reason := range sortedByCount(r.FailureReasons) {
		label := ""
		if i == 0 {
			label = "failures by reason"
		}
		row(label, "%6d  %s", r.FailureReasons[reason], reason)
	}
	row("lost", "%d", len(r.Lost))
	row("duplicated", "%d episodes (%d extra records)", len(r.Duplicated), r.DuplicateRecords)
	row("invalid trajectories", "%d (the harness's own invariant checks)", len(r.Invalid))
	row("not from honest steps", "%d (trajectories not assembled from one run's stored steps; %d hold forged content)",
		len(r.Unproven), len(r.ForgedContent))
	if r.StepsMissed > 0 || len(r.Unverified) > 0 {
		row("", "%d unverifiable: %d step messages were purged before the harness read them", len(r.Unverified), r.StepsMissed)
	}
	row("replay mismatches", "%d", len(r.ReplayErrors))
	row("groups", "%d read and acknowledged", r.Groups)
	if len(r.WrongRun)+r.StepsOffRun > 0 {
		row("off their run", "%d outcome or group records, %d step events: without the run's id or off its subjects", len(r.WrongRun), r.StepsOffRun)
	}
	if r.Malformed+r.MalformedSteps+r.Foreign > 0 {
		row("other records", "%d undecodable outcomes, %d undecodable steps, %d of no submitted episode", r.Malformed, r.MalformedSteps, r.Foreign)
	}
	verdict := "PASS"
	if p := r.Problems(); len(p) > 0 {
		verdict = "FAIL: " + strings.Join(p, ", ")
	}
	row("verdict", "%s", verdict)
	return b.String()
}

// pauseRow renders the pauses: how many of which kind, how long.
func (r *Report) pauseRow(row func(name, format string, args ...any)) {
	if !slices.Contains(r.Kinds, KindPause) {
		return
	}
	byKind := map[Kind]int{}
	var n int
	var lo, hi time.Duration
	for _, f := range r.Faults {
		if f.Kind != KindPause || f.Err != "" {
			continue
		}
		k := f.Name
		if i := strings.LastIndexByte(k, '-'); i > 0 {
			k = k[:i]
		}
		byKind[Kind(k)]++
		if n == 0 || f.Down < lo {
			lo = f.Down
		}
		hi = max(hi, f.Down)
		n++
	}
	row("pauses (STOP/CONT)", "%d%s, %s to %s each (env workers' ack wait %s)", n, kindCounts(byKind),
		lo.Round(100*time.Millisecond), hi.Round(100*time.Millisecond), r.AckWait)
}

// diskRow renders the disk faults and how the NATS servers took them.
func (r *Report) diskRow(row func(name, format string, args ...any)) {
	if !slices.Contains(r.Kinds, KindDisk) {
		return
	}
	var n, disabled, recovered, restarted, early int
	for _, f := range r.Faults {
		if f.Kind != KindDisk {
			continue
		}
		n++
		switch {
		case f.Unrecovered:
			restarted++
		case f.Recovered > 0:
			recovered++
		default:
			early++
		}
		if f.Disabled {
			disabled++
		}
	}
	row("disk fills", "%d (data dirs on %s tmpfs): storing again by itself %d, restarted by the harness %d, "+
		"freed early for a restart %d; JetStream disabled itself %d times", n, byteSize(r.DiskSize), recovered, restarted, early, disabled)
}

// powerLossRow renders the power losses and what they dropped.
func (r *Report) powerLossRow(row func(name, format string, args ...any)) {
	if !slices.Contains(r.Kinds, KindPowerLoss) {
		return
	}
	var n, all int
	var dropped int64
	for _, f := range r.Faults {
		if f.Kind != KindPowerLoss {
			continue
		}
		n++
		if strings.Contains(f.Name, "+") {
			all++
		}
		dropped += f.Dropped
	}
	sync := r.Sync
	if sync == "" {
		sync = "server default (always)"
	}
	row("power losses", "%d (%d of one node, %d of all nodes): %d unsynced bytes dropped; NATS --sync %s, %d fsyncs, %d bytes synced",
		n, n-all, all, dropped, sync, r.Store.Fsyncs, r.Store.BytesSynced)
}

// messageRows renders the forged and re-submitted messages and what became
// of their episodes.
func (r *Report) messageRows(row func(name, format string, args ...any)) {
	skipped := map[Kind]int{}
	for _, f := range r.Faults {
		if (f.Kind == KindForge || f.Kind == KindResubmit) && f.Err != "" {
			skipped[f.Kind]++
		}
	}
	if slices.Contains(r.Kinds, KindForge) {
		variants := forgedVariants(r.Forged)
		var parts []string
		for _, v := range forgeries {
			parts = append(parts, fmt.Sprintf("%s %d", v, variants[v]))
		}
		row("forged steps", "%d messages (%d found in the steps stream) on %d live episodes: %s; %d skipped",
			r.ForgedMessages, r.ForgedStored, len(r.Forged), strings.Join(parts, ", "), skipped[KindForge])
		row("", "outcomes: %d the honest run's trajectory, %d failure records, %d trajectories with forged content",
			r.ForgedHonest, len(r.ForgedFailures), len(r.ForgedContent))
	}
	if slices.Contains(r.Kinds, KindResubmit) {
		when := map[string]int{}
		for _, w := range r.Resubmitted {
			when[w]++
		}
		var bad int
		for id := range r.Resubmitted {
			if slices.Contains(r.Duplicated, id) || slices.Contains(r.Lost, id) {
				bad++
			}
		}
		row("re-submitted", "%d episodes (%d in flight, %d finished; %d skipped): %d without exactly one outcome",
			len(r.Resubmitted), when["in flight"], when["finished"], skipped[KindResubmit], bad)
	}
}

// Details renders the evidence behind the table: lost and duplicated
// episodes, invalid trajectories, unexpected exits, log warnings and notes.
func (r *Report) Details() string {
	var b strings.Builder
	list := func(title string, items []string, total int) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s (%d):\n", title, total)
		for _, s := range items[:min(len(items), maxDetails)] {
			fmt.Fprintf(&b, "  %s\n", s)
		}
		if total > maxDetails {
			fmt.Fprintf(&b, "  … %d more\n", total-maxDetails)
		}
	}
	list("lost episodes", r.LostDetails, len(r.Lost))
	if len(r.Lost) > len(r.LostDetails) {
		fmt.Fprintf(&b, "  all lost ids: %s\n", strings.Join(r.Lost, " "))
	}
	list("duplicated episodes", r.DuplicateDetails, len(r.Duplicated))
	list("episodes run twice at once or again after finishing", r.RunDetails, r.ConcurrentRuns+r.RerunAfterDone)
	list("invalid trajectories", r.Invalid, len(r.Invalid))
	list("trajectories not from one run's honest steps", r.Unproven, len(r.Unproven))
	list("trajectories whose steps the harness partly missed", r.Unverified, len(r.Unverified))
	list("replay mismatches", r.ReplayErrors, len(r.ReplayErrors))
	list("failure records of forged episodes", r.ForgedFailures, len(r.ForgedFailures))
	list("records off their run", r.WrongRun, len(r.WrongRun))
	list("step events off their run", r.StepsOffRunDetails, r.StepsOffRun)
	var exits []string
	for _, x := range r.Exits {
		s := fmt.Sprintf("%s at %s: %s", x.Name, x.At.Round(time.Millisecond), x.Err)
		if x.RestartErr != "" {
			s += "; restart: " + x.RestartErr
		}
		s += "\n    " + strings.ReplaceAll(strings.TrimSpace(x.LogTail), "\n", "\n    ")
		exits = append(exits, s)
	}
	list("unexpected exits", exits, len(exits))
	var problems []string
	for _, k := range sortedByCount(r.LogProblems) {
		problems = append(problems, fmt.Sprintf("%6d  %s", r.LogProblems[k], k))
	}
	list("log warnings and errors (by kind, level, message)", problems, len(problems))
	list("notes", r.Notes, len(r.Notes))
	if r.Workdir != "" {
		state := "removed"
		if r.Kept {
			state = "kept"
		}
		fmt.Fprintf(&b, "\nworkdir (%s): %s\n", state, r.Workdir)
	}
	return b.String()
}

// FaultLog renders one line per fault.
func (r *Report) FaultLog() string {
	var b strings.Builder
	faults := slices.Clone(r.Faults)
	slices.SortStableFunc(faults, func(a, b Fault) int { return int(a.At - b.At) })
	for _, f := range faults {
		fmt.Fprintf(&b, "%9.3fs  %-9s %-20s", f.At.Seconds(), f.Kind, f.Name)
		if f.PID != 0 {
			fmt.Fprintf(&b, " pid %-7d", f.PID)
		}
		if f.Down > 0 {
			fmt.Fprintf(&b, " for %-8s", f.Down.Round(time.Millisecond))
		}
		if f.Ready > 0 {
			fmt.Fprintf(&b, " ready %s", f.Ready.Round(time.Millisecond))
		}
		if f.Kind == KindDisk {
			switch {
			case f.Unrecovered:
				b.WriteString(" JetStream still failing to store after the disk was freed: restarted")
			case f.Recovered > 0:
				fmt.Fprintf(&b, " JetStream storing again %s after the disk was freed", f.Recovered.Round(time.Millisecond))
			}
			if f.Disabled {
				b.WriteString(" (it had disabled itself)")
			}
		}
		if f.Detail != "" {
			b.WriteString("  " + f.Detail)
		}
		if f.Err != "" {
			b.WriteString("  error: " + f.Err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (r *Report) write(path string) error {
	return os.WriteFile(path, []byte(r.Table()+r.Details()+"\nfaults:\n"+r.FaultLog()), 0o644)
}

func kindCounts(n map[Kind]int) string {
	var parts []string
	for _, k := range ProcessKinds {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func sortedByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	return keys
}
