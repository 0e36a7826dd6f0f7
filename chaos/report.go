package chaos

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Kill is one SIGKILL the harness sent and the restart that followed.
type Kill struct {
	At    time.Duration // since the run started
	Kind  Kind
	Name  string
	PID   int
	Down  time.Duration // pause before the restart
	Ready time.Duration // from the restart until the process was ready
	Err   string        // the restart did not reach readiness
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
	Seed         uint64
	Env          string
	KillsPerKind int
	Kinds        []Kind
	Duration     time.Duration
	// Workdir holds the logs and the NATS data; Kept reports whether it is
	// left in place.
	Workdir string
	Kept    bool
	// Wall is the whole run; ChaosSpan the time until the last kill's
	// restart.
	Wall, ChaosSpan time.Duration
	// TimedOut reports that the fleet had not settled by the timeout.
	TimedOut bool

	Kills []Kill
	Exits []Exit

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
	// ConcurrentRuns counts episodes redelivered while an earlier run was
	// still storing steps (two workers ran the episode at once).
	ConcurrentRuns int
	// RerunAfterDone counts episodes that ran again after a run had stored
	// its final step.
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

	// Lost lists episodes without any outcome record; Duplicated those with
	// more than one (DuplicateRecords counts the extra records). The details
	// give the evidence for the first few.
	Lost, LostDetails            []string
	Duplicated, DuplicateDetails []string
	DuplicateRecords             int
	// Invalid lists trajectories that fail Trajectory.Validate;
	// ReplayErrors those that disagree with a replay of their game.
	Invalid, ReplayErrors []string
	// Malformed counts outcome records that do not decode, MalformedSteps
	// step events that do not; Foreign counts records of no submitted episode.
	Malformed, MalformedSteps, Foreign int
	// Notes are other observations worth a look.
	Notes []string
}

func newReport(cfg Config) *Report {
	return &Report{
		Seed: cfg.Seed, Env: cfg.Env, KillsPerKind: cfg.KillsPerKind, Kinds: cfg.Kinds, Duration: cfg.Duration,
		FailureReasons: map[string]int{}, Retries: map[string]int{}, LogProblems: map[string]int{},
	}
}

// OK reports whether the run kept the promise: every submitted episode has
// exactly one outcome, and every trajectory is valid and replays.
func (r *Report) OK() bool {
	return r.Submitted > 0 && len(r.Lost) == 0 && len(r.Duplicated) == 0 && len(r.Invalid) == 0 &&
		len(r.ReplayErrors) == 0 && r.Malformed == 0 && r.Trajectories+r.Failures == r.Submitted
}

// KillsByKind counts the kills of each kind.
func (r *Report) KillsByKind() map[Kind]int {
	n := map[Kind]int{}
	for _, k := range r.Kills {
		n[k.Kind]++
	}
	return n
}

// Table renders the run's figures: kills by kind, episodes resumed,
// retries, failures by reason, lost, duplicated and the verdict.
func (r *Report) Table() string {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-22s %s\n", name, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "chaos run: env=%s seed=%d episodes=%d kills/kind=%d window=%s chaos=%s wall=%s\n",
		r.Env, r.Seed, r.Submitted, r.KillsPerKind, r.Duration, r.ChaosSpan.Round(time.Second), r.Wall.Round(time.Second))
	byKind := r.KillsByKind()
	var kills []string
	for _, k := range Kinds {
		kills = append(kills, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	row("kills", "%s (total %d)", strings.Join(kills, ", "), len(r.Kills))
	var ready []string
	for _, k := range Kinds {
		var sum time.Duration
		var n, failed int
		for _, x := range r.Kills {
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
	row("", "%d of them while an earlier run was still alive, %d after a run had already finished", r.ConcurrentRuns, r.RerunAfterDone)
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
	row("invalid trajectories", "%d (Trajectory.Validate)", len(r.Invalid))
	row("replay mismatches", "%d", len(r.ReplayErrors))
	if r.Malformed+r.MalformedSteps+r.Foreign > 0 {
		row("other records", "%d undecodable outcomes, %d undecodable steps, %d of no submitted episode", r.Malformed, r.MalformedSteps, r.Foreign)
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	row("verdict", "%s", verdict)
	return b.String()
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
	list("replay mismatches", r.ReplayErrors, len(r.ReplayErrors))
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

// KillLog renders one line per kill.
func (r *Report) KillLog() string {
	var b strings.Builder
	for _, k := range r.Kills {
		fmt.Fprintf(&b, "%9.3fs  %-12s pid %-7d down %-8s ready %s", k.At.Seconds(), k.Name, k.PID,
			k.Down.Round(time.Millisecond), k.Ready.Round(time.Millisecond))
		if k.Err != "" {
			b.WriteString("  " + k.Err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (r *Report) write(path string) error {
	return os.WriteFile(path, []byte(r.Table()+r.Details()+"\nkills:\n"+r.KillLog()), 0o644)
}

func kindCounts(n map[Kind]int) string {
	var parts []string
	for _, k := range Kinds {
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
