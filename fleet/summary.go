package fleet

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// Summary describes a finished run.
type Summary struct {
	Episodes     int // submitted
	Trajectories int
	Failures     int
	Successes    int
	Truncated    int
	Turns        int
	// PromptTruncated counts trajectories with a prompt cut to fit the
	// budget (messages.PromptOverflowTruncateLeft), as Truncated counts those
	// cut short.
	PromptTruncated int
	// Tokens counts observation tokens of all trajectories; ActionTokens the
	// generated ones among them.
	Tokens, ActionTokens int
	RewardSum            float64
	Wall                 time.Duration
	// Malformed counts undecodable messages seen on the output streams.
	Malformed int
	// Duplicates counts second outcomes for an episode of this run (never
	// expected: every episode ends as exactly one trajectory or failure).
	Duplicates int
	// PerEnv breaks the outcomes down by env id.
	PerEnv map[string]*EnvSummary
	// FailureReasons counts failures by reason.
	FailureReasons map[string]int
	// FailureKinds counts failures by kind (messages.FailureEpisode …).
	FailureKinds map[string]int
	// Started reports that the episodes were submitted: a run that returns
	// an error before has written nothing.
	Started bool
	// StaleDropped counts episodes dropped for going past their
	// max_staleness (failures of kind messages.FailureStale),
	// StaleRestarted trajectories played again from the start for it,
	// StaleKept those that went past it and were kept.
	StaleDropped, StaleRestarted, StaleKept int
	// Staleness counts trajectories by staleness (how far the policy moved
	// on during the episode).
	Staleness map[int64]int
	// ResumedTrajectories and ResumedFailures count what the interrupted
	// run wrote to its outputs before this one resumed it: the run's totals
	// (AllTrajectories, AllFailures) are these plus this run's. The rates,
	// means and token counts are of this run's trajectories.
	ResumedTrajectories, ResumedFailures int
	// Groups after dynamic filtering (only when the collector ran here).
	FilterOn                                     bool
	GroupsKept, GroupsFiltered, GroupsIncomplete int
}

// EnvSummary is one env's share of a run.
type EnvSummary struct {
	Trajectories, Failures, Successes, Turns int
	RewardSum                                float64
}

// SuccessRate is the share of the env's trajectories that solved the game.
func (e *EnvSummary) SuccessRate() float64 { return ratio(float64(e.Successes), e.Trajectories) }

// MeanReward is the env's mean trajectory reward.
func (e *EnvSummary) MeanReward() float64 { return ratio(e.RewardSum, e.Trajectories) }

// MeanTurns is the env's mean number of model turns per trajectory.
func (e *EnvSummary) MeanTurns() float64 { return ratio(float64(e.Turns), e.Trajectories) }

func (s *Summary) env(id string) *EnvSummary {
	if s.PerEnv == nil {
		s.PerEnv = map[string]*EnvSummary{}
	}
	e := s.PerEnv[id]
	if e == nil {
		e = &EnvSummary{}
		s.PerEnv[id] = e
	}
	return e
}

// Table renders the per-env breakdown, one env per line.
func (s Summary) Table() string {
	ids := slices.Sorted(maps.Keys(s.PerEnv))
	var b strings.Builder
	w := 3
	for _, id := range ids {
		w = max(w, len(id))
	}
	fmt.Fprintf(&b, "%-*s %8s %8s %8s %11s %10s\n", w, "env", "episodes", "failures", "success", "mean_reward", "mean_turns")
	for _, id := range ids {
		e := s.PerEnv[id]
		fmt.Fprintf(&b, "%-*s %8d %8d %8.3f %11.4f %10.2f\n", w, id, e.Trajectories+e.Failures, e.Failures,
			e.SuccessRate(), e.MeanReward(), e.MeanTurns())
	}
	return b.String()
}

// AllTrajectories counts the run's trajectories, with those written before
// a resume.
func (s Summary) AllTrajectories() int { return s.Trajectories + s.ResumedTrajectories }

// AllFailures counts the run's failures, with those written before a
// resume.
func (s Summary) AllFailures() int { return s.Failures + s.ResumedFailures }

// resumedNote says what of a count was written before a resume, if any.
func resumedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (resumed %d)", n)
}

// SuccessRate is the share of trajectories that solved their game.
func (s Summary) SuccessRate() float64 { return ratio(float64(s.Successes), s.Trajectories) }

// MeanReward is the mean trajectory reward.
func (s Summary) MeanReward() float64 { return ratio(s.RewardSum, s.Trajectories) }

// MeanTurns is the mean number of model turns per trajectory.
func (s Summary) MeanTurns() float64 { return ratio(float64(s.Turns), s.Trajectories) }

// TurnsPerSecond is model turns per second of wall time.
func (s Summary) TurnsPerSecond() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(s.Turns) / s.Wall.Seconds()
}

// PassRate is the share of complete groups kept by dynamic filtering.
func (s Summary) PassRate() float64 {
	return ratio(float64(s.GroupsKept), s.GroupsKept+s.GroupsFiltered)
}

func ratio(a float64, b int) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}

// String renders the one-line summary the CLI prints.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "episodes=%d trajectories=%d%s success_rate=%.3f mean_reward=%.4f mean_turns=%.2f truncated=%d failures=%d%s tokens=%d action_tokens=%d turns=%d turns/s=%.0f wall=%s",
		s.Episodes, s.AllTrajectories(), resumedNote(s.ResumedTrajectories), s.SuccessRate(), s.MeanReward(), s.MeanTurns(), s.Truncated,
		s.AllFailures(), resumedNote(s.ResumedFailures), s.Tokens, s.ActionTokens, s.Turns, s.TurnsPerSecond(), s.Wall.Round(time.Millisecond))
	if s.FilterOn {
		fmt.Fprintf(&b, " groups_kept=%d groups_filtered=%d pass_rate=%.3f", s.GroupsKept, s.GroupsFiltered, s.PassRate())
	}
	if s.PromptTruncated > 0 {
		fmt.Fprintf(&b, " prompt_truncated=%d", s.PromptTruncated)
	}
	if s.StaleDropped+s.StaleRestarted+s.StaleKept > 0 {
		fmt.Fprintf(&b, " stale_dropped=%d stale_restarted=%d stale_kept=%d", s.StaleDropped, s.StaleRestarted, s.StaleKept)
	}
	if s.Duplicates > 0 {
		fmt.Fprintf(&b, " duplicate_outcomes=%d", s.Duplicates)
	}
	if s.Malformed > 0 {
		fmt.Fprintf(&b, " malformed_outputs=%d", s.Malformed)
	}
	if s.GroupsIncomplete > 0 {
		fmt.Fprintf(&b, " groups_incomplete=%d", s.GroupsIncomplete)
	}
	if len(s.FailureKinds) > 0 {
		fmt.Fprintf(&b, "\n  failure kinds: %s", s.kinds())
	}
	if len(s.FailureReasons) > 0 {
		reasons := slices.SortedFunc(maps.Keys(s.FailureReasons), func(a, b string) int {
			if c := cmp.Compare(s.FailureReasons[b], s.FailureReasons[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, r := range reasons[:min(topReasons, len(reasons))] {
			fmt.Fprintf(&b, "\n  failure x%d: %s", s.FailureReasons[r], r)
		}
		if more := len(reasons) - topReasons; more > 0 {
			fmt.Fprintf(&b, "\n  … and %d more reasons (see --failures-out)", more)
		}
	}
	return b.String()
}

// topReasons is how many failure reasons the summary names.
const topReasons = 3

// kinds renders the failure counts by kind, most frequent first:
// "episode=3 invariant=1".
func (s Summary) kinds() string {
	kinds := slices.SortedFunc(maps.Keys(s.FailureKinds), func(a, b string) int {
		if c := cmp.Compare(s.FailureKinds[b], s.FailureKinds[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s=%d", k, s.FailureKinds[k])
	}
	return strings.Join(parts, " ")
}

// countTrajectory adds a trajectory to the summary.
func (s *Summary) countTrajectory(t *messages.Trajectory) {
	s.Trajectories++
	s.Turns += int(t.Turns)
	s.RewardSum += t.Reward
	e := s.env(t.Env)
	e.Trajectories++
	e.Turns += int(t.Turns)
	e.RewardSum += t.Reward
	s.countTokens(t.ObservationTokens, t.ActionRanges)
	for _, smp := range t.Samples {
		s.countTokens(smp.ObservationTokens, smp.ActionRanges)
	}
	if t.Truncated {
		s.Truncated++
	}
	if t.PromptTruncated > 0 {
		s.PromptTruncated++
	}
	if t.Success {
		s.Successes++
		e.Successes++
	}
	if t.Restarts > 0 {
		s.StaleRestarted++
	}
	if t.Stale {
		s.StaleKept++
	}
	if len(t.PolicyVersions) > 0 {
		if s.Staleness == nil {
			s.Staleness = map[int64]int{}
		}
		s.Staleness[t.Staleness]++
	}
}

func (s *Summary) countTokens(toks messages.Tokens, actions messages.Ranges) {
	s.Tokens += len(toks)
	for _, r := range actions {
		s.ActionTokens += int(r.End - r.Start)
	}
}

// countFailure adds a failure record to the summary.
func (s *Summary) countFailure(f *messages.Failure) {
	s.Failures++
	s.FailureReasons[f.Reason]++
	s.FailureKinds[f.Kind]++
	if f.Kind == messages.FailureStale {
		s.StaleDropped++
	}
	if f.Env != "" {
		s.env(f.Env).Failures++
	}
}

// WriteRecord writes an output record (a trajectory, group or failure) as
// one JSON line, as rollout run writes them: <, > and & unescaped so chat
// markup such as <|im_end|> stays readable, and a trajectory through its
// own writer (through an Encoder the large line would be validated and
// copied once more).
func WriteRecord(w io.Writer, v any) error {
	if t, ok := v.(*messages.Trajectory); ok {
		line, err := t.MarshalJSON()
		if err == nil {
			_, err = w.Write(append(line, '\n'))
		}
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
