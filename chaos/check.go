package chaos

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// maxDetails bounds the per-episode evidence a report lists.
const maxDetails = 20

// evidence is what the harness gathered besides the outcome records.
type evidence struct {
	t0       time.Time
	logDir   string
	steps    map[string]map[int32]*stepRun // by episode and attempt
	badSteps int
	// leftover holds the requests still in the episodes queue, by episode
	// id, with the time they were stored.
	leftover map[string]time.Time
	// maxDeliveries holds JetStream's max-deliveries advisories by episode.
	maxDeliveries map[string]maxDeliveries
	kills         []Kill
}

// check fills the report from the outcomes and the evidence.
func (r *Report) check(out *outcomes, ev *evidence) {
	ev.kills = r.Kills
	r.MalformedSteps = ev.badSteps
	for _, rec := range out.records {
		switch {
		case rec.bad != nil:
			r.Malformed++
			r.Notes = append(r.Notes, fmt.Sprintf("%s seq %d does not decode: %v", rec.stream, rec.seq, rec.bad))
		case !out.ours[rec.episodeID()]:
			r.Foreign++
		}
	}
	for _, id := range out.order {
		recs := out.byID[id]
		switch len(recs) {
		case 0:
			r.Lost = append(r.Lost, id)
			if len(r.LostDetails) < maxDetails {
				r.LostDetails = append(r.LostDetails, ev.lostDetail(id))
			}
			continue
		case 1:
		default:
			r.Duplicated = append(r.Duplicated, id)
			r.DuplicateRecords += len(recs) - 1
			if len(r.DuplicateDetails) < maxDetails {
				r.DuplicateDetails = append(r.DuplicateDetails, duplicateDetail(id, recs)+ev.runs(id))
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
		for _, rec := range recs {
			t := rec.traj
			if t == nil {
				continue
			}
			if t.Resumed > 0 {
				r.Resumed++
				r.ResumedTotal += int(t.Resumed)
			}
			if err := t.Validate(); err != nil {
				r.Invalid = append(r.Invalid, fmt.Sprintf("%s: %v", id, err))
				continue
			}
			if err := Replay(t); err != nil {
				r.ReplayErrors = append(r.ReplayErrors, fmt.Sprintf("%s (resumed %d): %v", id, t.Resumed, err))
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

// overlapping reports whether a later run of an episode started before an
// earlier one stored its last step: the episode was redelivered while a
// worker was still running it.
func overlapping(runs map[int32]*stepRun) bool {
	attempts := slices.Sorted(maps.Keys(runs))
	for i, a := range attempts {
		for _, b := range attempts[i+1:] {
			if runs[b].start.Before(runs[a].finish) {
				return true
			}
		}
	}
	return false
}

// rerunAfterDone reports whether a run of an episode started after an
// earlier run had stored its final step: the episode was delivered again
// although it was complete (its acknowledgement was lost).
func rerunAfterDone(runs map[int32]*stepRun) bool {
	for _, a := range runs {
		if !a.done {
			continue
		}
		for _, b := range runs {
			if b.attempt > a.attempt && b.start.After(a.finish) {
				return true
			}
		}
	}
	return false
}

// diagnose names what the evidence shows about why a lost episode has no
// outcome.
func (ev *evidence) diagnose(id string) string {
	runs := ev.steps[id]
	attempts := slices.Sorted(maps.Keys(runs))
	var why []string
	for i, a := range attempts {
		if !runs[a].done || i == len(attempts)-1 {
			continue
		}
		last := runs[attempts[len(attempts)-1]]
		why = append(why, fmt.Sprintf("attempt %d ran to its end, but attempt %d had started meanwhile and the collector keeps only the latest attempt's steps; attempt %d never finished",
			a, last.attempt, last.attempt))
	}
	_, leftover := ev.leftover[id]
	if adv, ok := ev.maxDeliveries[id]; ok && (len(attempts) == 0 || !runs[attempts[len(attempts)-1]].done) {
		why = append(why, fmt.Sprintf("JetStream delivered the request %d times, the env workers' MaxDeliver, and no run recorded an outcome", adv.Deliveries))
	} else if leftover {
		why = append(why, "the request is still in the episodes queue, never acknowledged, and is not being delivered")
	}
	if len(attempts) == 0 {
		why = append(why, "no run stored a single step")
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
// kills that followed its last step within a minute.
func (ev *evidence) runs(id string) string {
	runs := ev.steps[id]
	if len(runs) == 0 {
		return " no step event in the steps stream"
	}
	var b strings.Builder
	for _, a := range slices.Sorted(maps.Keys(runs)) {
		run := runs[a]
		fmt.Fprintf(&b, "\n      attempt %d: %d step events, turns %d..%d at %s..%s, done=%v", a, run.messages,
			run.first, run.turns-1, ev.since(run.start), ev.since(run.finish), run.done)
		if len(run.errors) > 0 {
			fmt.Fprintf(&b, ", error %q", run.errors[len(run.errors)-1])
		}
		var after []string
		end := run.finish.Sub(ev.t0)
		for _, k := range ev.kills {
			if k.At >= end-time.Second && k.At <= end+time.Minute && len(after) < 4 {
				after = append(after, fmt.Sprintf("%s killed at +%.1fs", k.Name, k.At.Seconds()))
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
func (ev *evidence) lostDetail(id string) string {
	var b strings.Builder
	b.WriteString(id + ":")
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
			fmt.Fprintf(&b, " [%s seq %d: trajectory, %d turns, reward %v, resumed %d]", rec.stream, rec.seq, rec.traj.Turns, rec.traj.Reward, rec.traj.Resumed)
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

// Replay checks a chat-style game trajectory against a fresh play of its
// game: the prompt span is the game's first prompt from the trajectory's
// env_seed; each action, decoded with the stand-in model's tokenizer and
// played, yields the recorded step reward and exactly the feedback span that
// follows it; the episode ends where the game does (unless truncated); the
// action log-probabilities are non-positive; reward, success and turn count
// agree with the replay. It assumes the stand-in model's tokenizer and an
// episode played from the env's own instructions (no prompt of its own).
func Replay(tr *messages.Trajectory) error {
	if messages.SingleTurnStyle(tr.ObsStyle) {
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
	obs := []int32(tr.ObservationTokens)
	first, info := env.Reset(envs.NewRNG(*tr.EnvSeed))
	if spec.ChatSuffix == "" && info["suffix"] != "" {
		if !strings.HasSuffix(first, "\n") {
			first += "\n"
		}
		first += info["suffix"]
	}
	var msgs []chat.Message
	if sys := info["system"]; sys != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: sys})
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
