package chaos

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/toyllm"
)

// maxDetails bounds the per-episode evidence a report lists.
const maxDetails = 20

// evidence is what the harness gathered besides the outcome records.
type evidence struct {
	t0     time.Time
	logDir string
	// steps holds the honest steps' runs by episode and run; index the
	// fingerprints of every step, forged ones marked; gaps the stretches of
	// the steps stream deleted before the harness read them; decisions the
	// collector's decisions by episode (the run and kind it named).
	steps       map[string]map[runKey]*stepRun
	index       stepIndex
	gaps        []gap
	decisions   map[string]string
	badSteps    int
	badStepErrs []string
	forgedSteps int
	// offRun lists honest steps of our episodes not of the run, or not on
	// its subject (offRunCount counts them all).
	offRun      []string
	offRunCount int
	// submitted holds the time each episode was stored in the episodes
	// stream.
	submitted map[string]time.Time
	// leftover holds the requests still in the episodes queue, by episode
	// id, with the time they were stored.
	leftover map[string]time.Time
	// maxDeliveries holds JetStream's max-deliveries advisories by episode.
	maxDeliveries map[string]maxDeliveries
	faults        []Fault
}

// check fills the report from the outcomes and the evidence. It judges
// with the harness's own means only: the records as its decoder reads them,
// its invariant checks, the provenance of each turn in the steps stream and
// a replay against the game.
func (r *Report) check(out *outcomes, ev *evidence) {
	ev.faults = r.Faults
	r.MalformedSteps = ev.badSteps
	r.ForgedStored = ev.forgedSteps
	for _, g := range ev.gaps {
		r.StepsMissed += int(g.to - g.from + 1)
	}
	for _, e := range ev.badStepErrs {
		r.Notes = append(r.Notes, "undecodable step: "+e)
	}
	r.StepsOffRun, r.StepsOffRunDetails = ev.offRunCount, ev.offRun
	for _, rec := range out.records {
		switch {
		case rec.bad != nil:
			r.Malformed++
			r.Notes = append(r.Notes, fmt.Sprintf("%s seq %d does not decode: %v", rec.stream, rec.seq, rec.bad))
		case !out.ours[rec.episodeID()]:
			r.Foreign++
			if r.Foreign <= 5 {
				r.Notes = append(r.Notes, fmt.Sprintf("%s seq %d belongs to no submitted episode: %s", rec.stream, rec.seq, rec.describe()))
			}
		default:
			if why := out.offRun(rec); why != "" {
				r.WrongRun = append(r.WrongRun, fmt.Sprintf("%s seq %d (%s): %s", rec.stream, rec.seq, rec.describe(), why))
			}
		}
	}
	r.checkGroups(out)
	for _, id := range out.order {
		recs := out.byID[id]
		switch len(recs) {
		case 0:
			r.Lost = append(r.Lost, id)
			if len(r.LostDetails) < maxDetails {
				r.LostDetails = append(r.LostDetails, ev.lostDetail(id, r.targetedNote(id)))
			}
			continue
		case 1:
		default:
			r.Duplicated = append(r.Duplicated, id)
			r.DuplicateRecords += len(recs) - 1
			if len(r.DuplicateDetails) < maxDetails {
				r.DuplicateDetails = append(r.DuplicateDetails, duplicateDetail(id, recs)+r.targetedNote(id)+ev.runs(id))
			}
		}
		// The first record decides the episode; every trajectory record
		// is checked, duplicates included.
		if f := recs[0].fail; f != nil {
			r.Failures++
			r.FailureReasons[normalizeReason(f.Kind+": "+f.Reason)]++
		} else {
			r.Trajectories++
		}
		_, forgedEp := r.Forged[id]
		for _, rec := range recs {
			if f := rec.fail; f != nil && forgedEp {
				r.ForgedFailures = append(r.ForgedFailures, fmt.Sprintf("%s (%s): %s: %s", id, r.Forged[id], f.Kind, f.Reason))
			}
			t := rec.traj
			if t == nil {
				continue
			}
			if t.Resumed > 0 {
				r.Resumed++
				r.ResumedTotal += int(t.Resumed)
			}
			if err := checkInvariants(t); err != nil {
				r.Invalid = append(r.Invalid, fmt.Sprintf("%s%s: %v", id, r.targetedNote(id), err))
				continue
			}
			forged, err := ev.index.provenance(t)
			if forged {
				r.ForgedContent = append(r.ForgedContent, id)
			}
			switch {
			case err != nil && !forged && ev.missed(id, recs):
				// Steps of its time were deleted before the harness read
				// them: what it did not see it cannot hold against it.
				r.Unverified = append(r.Unverified, fmt.Sprintf("%s: %v", id, err))
			case err != nil:
				r.Unproven = append(r.Unproven, fmt.Sprintf("%s (resumed %d)%s: %v%s", id, t.Resumed, r.targetedNote(id), err, ev.runs(id)))
			case forgedEp:
				r.ForgedHonest++
			}
			if err := Replay(t); err != nil {
				r.ReplayErrors = append(r.ReplayErrors, fmt.Sprintf("%s (resumed %d)%s: %v", id, t.Resumed, r.targetedNote(id), err))
			} else if t.Resumed > 0 {
				r.ResumedChecked++
			}
		}
	}
	for id, runs := range ev.steps {
		if !out.ours[id] {
			continue
		}
		if n := len(runs); n > 1 {
			r.Redelivered++
			r.ExtraRuns += n - 1
		}
		if _, again := r.Resubmitted[id]; again {
			continue // two runs under one attempt number: the timings mix
		}
		if overlapping(runs) {
			r.ConcurrentRuns++
			if len(r.RunDetails) < maxDetails {
				r.RunDetails = append(r.RunDetails, id+" ran twice at once:"+ev.runs(id))
			}
		}
		if rerunAfterDone(runs) {
			r.RerunAfterDone++
			if len(r.RunDetails) < maxDetails {
				r.RunDetails = append(r.RunDetails, id+" ran again after a finished run:"+ev.runs(id))
			}
		}
	}
	for id := range ev.maxDeliveries {
		if out.ours[id] {
			r.MaxDelivered++
		}
	}
	for id := range ev.leftover {
		if out.ours[id] {
			r.LeftInQueue++
		}
	}
	r.scanLogs(ev.logDir)
}

// offRun says why a record of one of our episodes is not where the run's
// outcomes go: another run id, or another subject than its run's; "" if
// it is.
func (o *outcomes) offRun(rec *record) string {
	var run, want string
	switch {
	case rec.traj != nil:
		run, want = rec.traj.RunID, o.subj.Trajectories(o.run, rec.traj.Env)
	case rec.fail != nil:
		run, want = rec.fail.RunID, o.subj.Failures(o.run, rec.fail.Kind)
	default:
		return ""
	}
	switch {
	case run != o.run:
		return fmt.Sprintf("run id %q, want %q", run, o.run)
	case rec.subject != want:
		return fmt.Sprintf("on %s, want %s", rec.subject, want)
	}
	return ""
}

// checkGroups judges the group records: each decodes, is of the run and on
// its subject, and holds trajectories of our episodes that have a
// trajectory record. (A group is assembled in the active collector's
// memory, so one a collector kill cut short may be missing: that is no
// loss of an episode.)
func (r *Report) checkGroups(out *outcomes) {
	seen := map[string]int{}
	for _, g := range out.groups {
		if g.bad != nil {
			r.Malformed++
			r.Notes = append(r.Notes, fmt.Sprintf("%s seq %d does not decode: %v", out.subj.StreamGroups(), g.seq, g.bad))
			continue
		}
		r.Groups++
		grp := g.group
		seen[grp.GroupID]++
		if grp.RunID != out.run || g.subject != out.subj.Groups(out.run, grp.Env) {
			r.WrongRun = append(r.WrongRun, fmt.Sprintf("%s seq %d (group %q of run %q) on %s, want run %q on %s",
				out.subj.StreamGroups(), g.seq, grp.GroupID, grp.RunID, g.subject, out.run, out.subj.Groups(out.run, grp.Env)))
		}
		for _, id := range grp.Episodes {
			switch {
			case !out.ours[id]:
				r.Foreign++
				if r.Foreign <= 5 {
					r.Notes = append(r.Notes, fmt.Sprintf("group %q holds a trajectory of %q, no submitted episode", grp.GroupID, id))
				}
			case !slices.ContainsFunc(out.byID[id], func(rec *record) bool { return rec.traj != nil }):
				r.Notes = append(r.Notes, fmt.Sprintf("group %q holds a trajectory of %s, which has no trajectory record", grp.GroupID, id))
			}
		}
	}
	for id, n := range seen {
		if n > 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("group %q was published %d times", id, n))
		}
	}
}

// missed reports whether the harness may have missed steps of an episode:
// a stretch of the steps stream it never saw was stored while the episode
// was undecided.
func (ev *evidence) missed(id string, recs []*record) bool {
	start, ok := ev.submitted[id]
	if !ok {
		return true
	}
	end := time.Now()
	if len(recs) > 0 {
		end = recs[len(recs)-1].stored
	}
	for _, g := range ev.gaps {
		if !g.before.Before(start) && !g.after.After(end) {
			return true
		}
	}
	return false
}

// describe renders a record in a line.
func (rec *record) describe() string {
	switch {
	case rec.traj != nil:
		return fmt.Sprintf("trajectory of %q (%s, %d turns)", rec.traj.EpisodeID, rec.traj.Env, rec.traj.Turns)
	case rec.fail != nil:
		return fmt.Sprintf("failure of %q: %s: %s (subject %s)", rec.fail.EpisodeID, rec.fail.Kind, rec.fail.Reason, rec.fail.Subject)
	}
	return "undecodable"
}

// targetedNote names the message fault an episode was the target of.
func (r *Report) targetedNote(id string) string {
	if v, ok := r.Forged[id]; ok {
		return " [forged: " + v + "]"
	}
	if v, ok := r.Resubmitted[id]; ok {
		return " [re-submitted while " + v + "]"
	}
	return ""
}

// overlapping reports whether two runs of an episode stored steps at the
// same time: the episode was delivered again while a worker was still
// running it (a pause or a lost connection outlasting the ack wait, say).
func overlapping(runs map[runKey]*stepRun) bool {
	sorted := sortedRuns(runs)
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if a.start.Before(b.finish) && b.start.Before(a.finish) {
				return true
			}
		}
	}
	return false
}

// rerunAfterDone reports whether a run of an episode started after another
// run had stored its final step: the episode was played again although it
// was complete.
func rerunAfterDone(runs map[runKey]*stepRun) bool {
	for _, a := range runs {
		if !a.done {
			continue
		}
		for _, b := range runs {
			if b != a && b.start.After(a.finish) {
				return true
			}
		}
	}
	return false
}

// diagnose names what the evidence shows about why a lost episode has no
// outcome.
func (ev *evidence) diagnose(id string) string {
	runs := sortedRuns(ev.steps[id])
	var why []string
	finished := false
	for _, r := range runs {
		if r.done {
			finished = true
		}
		if r.done && len(r.errors) == 0 {
			why = append(why, fmt.Sprintf("%s stored its last step (done) at %s, yet no outcome was recorded", r.key, ev.since(r.finish)))
		}
	}
	if d, ok := ev.decisions[id]; ok {
		why = append(why, fmt.Sprintf("the collector decided it (%s), yet no outcome record is stored", d))
	}
	_, leftover := ev.leftover[id]
	if adv, ok := ev.maxDeliveries[id]; ok && (len(runs) == 0 || !runs[len(runs)-1].done) {
		why = append(why, fmt.Sprintf("JetStream delivered the request %d times, the env workers' MaxDeliver, and no run recorded an outcome", adv.Deliveries))
	} else if leftover {
		why = append(why, "the request is still in the episodes queue, never acknowledged, and is not being delivered")
	} else if !finished {
		why = append(why, "the request is no longer in the episodes queue (acknowledged or removed), yet no run finished and no outcome was recorded")
	}
	if len(runs) == 0 {
		why = append(why, "the harness saw no step of it")
	}
	if len(why) == 0 {
		return ""
	}
	return "\n      => " + strings.Join(why, "; ")
}

// since renders a time as seconds into the run.
func (ev *evidence) since(t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(ev.t0).Seconds())
}

// runs describes an episode's runs in the steps stream, each with the
// faults that followed its last step within a minute.
func (ev *evidence) runs(id string) string {
	runs := sortedRuns(ev.steps[id])
	if len(runs) == 0 {
		return " the harness saw no step event of it"
	}
	var b strings.Builder
	for _, run := range runs {
		fmt.Fprintf(&b, "\n      %s: %d step events, turns %d..%d at %s..%s, done=%v", run.key, run.messages,
			run.first, run.turns-1, ev.since(run.start), ev.since(run.finish), run.done)
		if len(run.errors) > 0 {
			fmt.Fprintf(&b, ", error %q", run.errors[len(run.errors)-1])
		}
		var after []string
		end := run.finish.Sub(ev.t0)
		for _, f := range ev.faults {
			if f.At >= end-time.Second && f.At <= end+time.Minute && len(after) < 4 && f.Err == "" {
				after = append(after, fmt.Sprintf("%s at +%.1fs", f.describe(), f.At.Seconds()))
			}
		}
		if len(after) > 0 {
			fmt.Fprintf(&b, "; then %s", strings.Join(after, ", "))
		}
	}
	return b.String()
}

// lostDetail gives the evidence for a lost episode: its runs, whether its
// request is still in the episodes queue, JetStream's max-deliveries
// advisory, and the log lines that name it.
func (ev *evidence) lostDetail(id, note string) string {
	var b strings.Builder
	b.WriteString(id + note + ":")
	if t, ok := ev.leftover[id]; ok {
		fmt.Fprintf(&b, " request (stored %s) still in the episodes queue, never acknowledged;", ev.since(t))
	}
	if a, ok := ev.maxDeliveries[id]; ok {
		fmt.Fprintf(&b, " JetStream gave up after %d deliveries (advisory at %s);", a.Deliveries, ev.since(a.Time))
	}
	b.WriteString(ev.runs(id))
	b.WriteString(ev.diagnose(id))
	for _, l := range grepLogs(ev.logDir, id, 8) {
		b.WriteString("\n      " + l)
	}
	return b.String()
}

// duplicateDetail lists an episode's outcome records.
func duplicateDetail(id string, recs []*record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", id)
	for _, rec := range recs {
		switch {
		case rec.traj != nil:
			fmt.Fprintf(&b, " [%s seq %d: trajectory, %d turns, reward %v, resumed %d, env seed %s]", rec.stream, rec.seq,
				rec.traj.Turns, rec.traj.Reward, rec.traj.Resumed, seedString(rec.traj.EnvSeed))
		case rec.fail != nil:
			fmt.Fprintf(&b, " [%s seq %d: failure %s: %s]", rec.stream, rec.seq, rec.fail.Kind, rec.fail.Reason)
		}
	}
	return b.String()
}

// grepLogs returns up to n log lines (file: line) that contain s.
func grepLogs(logDir, s string, n int) []string {
	files, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() && len(out) < n {
			if strings.Contains(sc.Text(), s) {
				line := sc.Text()
				if len(line) > 400 {
					line = line[:400] + "…"
				}
				out = append(out, filepath.Base(f)+": "+line)
			}
		}
		fh.Close()
	}
	return out
}

var (
	episodeIDPattern = regexp.MustCompile(`chaos-[0-9a-f]+-g?\d{6}`)
	logLevelPattern  = regexp.MustCompile(`level=(WARN|ERROR)`)
	logMsgPattern    = regexp.MustCompile(`msg="((?:[^"\\]|\\.)*)"|msg=(\S+)`)
	digitsPattern    = regexp.MustCompile(`\d+`)
)

// normalizeReason keeps failure reasons of different episodes comparable.
func normalizeReason(s string) string {
	s = episodeIDPattern.ReplaceAllString(s, "<episode>")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// Log lines that show a retry.
var retryMarkers = map[string]string{
	"episode interrupted; returning it to the queue":     "env worker handed an episode back",
	"model endpoint failed; trying another":              "LLM request retried on another model server",
	"recording outcome failed; will retry on redelivery": "collector outcome publish retried",
	"nats reconnected": "NATS reconnects",
	"episode resumed":  "env worker resumed an episode from its stored steps",
}

// scanLogs counts retry markers and the warnings and errors of every
// process kind by message.
func (r *Report) scanLogs(logDir string) {
	files, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, f := range files {
		kind := strings.TrimSuffix(filepath.Base(f), ".log")
		if i := strings.LastIndexByte(kind, '-'); i > 0 {
			kind = kind[:i]
		}
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := sc.Text()
			for marker, name := range retryMarkers {
				if strings.Contains(line, marker) {
					r.Retries[name]++
				}
			}
			lvl := logLevelPattern.FindStringSubmatch(line)
			if lvl == nil {
				continue
			}
			msg := "?"
			if m := logMsgPattern.FindStringSubmatch(line); m != nil {
				msg = m[1] + m[2]
			}
			msg = digitsPattern.ReplaceAllString(msg, "N")
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			r.LogProblems[fmt.Sprintf("%-9s %-5s %s", kind, lvl[1], msg)]++
		}
		fh.Close()
	}
}

// seedString renders an optional seed.
func seedString(seed *uint64) string {
	if seed == nil {
		return "none"
	}
	return fmt.Sprint(*seed)
}

// Replay checks a chat-style game trajectory against a fresh play of its
// game: the prompt span is the game's first prompt from the trajectory's
// env_seed; each action, decoded with the stand-in model's tokenizer and
// played, yields the recorded step reward and exactly the feedback span that
// follows it; the episode ends where the game does (unless truncated); the
// action log-probabilities are non-positive; reward, success and turn count
// agree with the replay. It assumes the stand-in model's tokenizer and an
// episode played from the env's own instructions (no prompt of its own), and
// a trajectory that passed the invariant checks.
func Replay(tr *Trajectory) error {
	if singleTurnStyle(tr.ObsStyle) {
		return fmt.Errorf("style %q: only chat trajectories are replayed", tr.ObsStyle)
	}
	if tr.Prompt != "" {
		return fmt.Errorf("the episode had a prompt of its own: only env instructions are replayed")
	}
	spec, err := envs.Lookup(tr.Env)
	if err != nil {
		return err
	}
	env, err := envs.New(tr.Env, nil)
	if err != nil {
		return err
	}
	if tr.EnvSeed == nil {
		return fmt.Errorf("no env_seed recorded")
	}
	if len(tr.ActionRanges) == 0 {
		return fmt.Errorf("no action")
	}
	var tok toyllm.Tokenizer
	obs := tr.ObservationTokens
	system, first := spec.FirstChat(env.Reset(envs.NewRNG(*tr.EnvSeed)))
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: first})
	if want, got := chat.Render(msgs, true), tok.Decode(obs[:tr.ActionRanges[0].Start]); got != want {
		return fmt.Errorf("prompt span is not the game's first prompt:\n got %q\nwant %q", got, want)
	}
	var sum float64
	var won bool
	for i, rg := range tr.ActionRanges {
		for j := rg.Start; j < rg.End; j++ {
			if lp := float64(tr.RolloutLogProbs[j]); lp > 0 || math.IsNaN(lp) {
				return fmt.Errorf("turn %d: logprob %v at %d", i, lp, j)
			}
		}
		action := tok.Decode(obs[rg.Start:rg.End])
		res := env.Step(action)
		if res.Reward != tr.StepRewards[i] {
			return fmt.Errorf("turn %d: step reward %v, replay gives %v", i, tr.StepRewards[i], res.Reward)
		}
		sum += res.Reward
		won = res.Won
		end := int32(len(obs))
		if i+1 < len(tr.ActionRanges) {
			end = tr.ActionRanges[i+1].Start
		}
		suffix := spec.ChatSuffix
		if suffix == "" {
			suffix = res.Info["suffix"]
		}
		last := i == len(tr.ActionRanges)-1
		if !(last && end == rg.End && tr.Truncated) {
			want := chat.Feedback(action, res.Observation, suffix, res.Done())
			if got := tok.Decode(obs[rg.End:end]); got != want {
				return fmt.Errorf("turn %d: feedback span\n got %q\nwant %q", i, got, want)
			}
		}
		if res.Done() != last && !tr.Truncated {
			return fmt.Errorf("turn %d: replay done=%v disagrees with the trajectory", i, res.Done())
		}
		if res.Done() && !last {
			return fmt.Errorf("turn %d: the game ended, but the trajectory goes on for %d more turns", i, len(tr.ActionRanges)-1-i)
		}
	}
	switch {
	case sum != tr.Reward:
		return fmt.Errorf("reward %v, replay sums to %v", tr.Reward, sum)
	case tr.Success != won:
		return fmt.Errorf("success %v, replay won %v", tr.Success, won)
	case tr.ExtraLogs["turn_count"] != float64(tr.Turns):
		return fmt.Errorf("extra_logs.turn_count %v, turns %d", tr.ExtraLogs["turn_count"], tr.Turns)
	}
	return nil
}
