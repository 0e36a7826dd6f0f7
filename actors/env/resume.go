package env

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
)

// priorRun is what an earlier delivery of an episode left in the steps
// stream: its latest attempt's steps from turn 0, without gaps.
type priorRun struct {
	steps []*messages.StepEvent
	// decided is set when any earlier run published its terminal step: the
	// collector takes the first run to finish, so the outcome is its.
	decided bool
}

// loadPriorRun is Worker.loadPriorRun for this episode's request, waiting
// for the store while it cannot answer.
func (e *episode) loadPriorRun(ctx context.Context) (*priorRun, error) {
	var prior *priorRun
	err := e.store(ctx, "read the episode's stored steps", func(ctx context.Context) error {
		var err error
		prior, err = e.w.loadPriorRun(ctx, e.req.RunID, e.req.EpisodeID, e.steps, e.request)
		return err
	})
	return prior, err
}

// loadPriorRun reads the episode's steps stored on subject. Of the runs of the given
// request (the episodes-stream sequence of this submission; another
// submission of the same episode id is another request, which this one
// must not continue) it keeps the one with the longest contiguous turns
// from turn 0, the latest stored on a tie. The episode is decided when the
// collector stored its decision, or a run of this request stored its
// terminal step or an error (the collector then decides from it). Steps of
// other requests, and attempts above messages.MaxAttempts, decide nothing
// here: a forged step can waste a run, never lose an episode.
func (w *Worker) loadPriorRun(ctx context.Context, runID, id, subject string, request uint64) (*priorRun, error) {
	decisions, err := w.js.Stream(ctx, w.opts.Subjects.StreamDecided())
	if err != nil {
		return nil, fmt.Errorf("decisions stream: %w", err)
	}
	switch _, err := decisions.GetLastMsgForSubject(ctx, w.opts.Subjects.Decided(runID, id)); {
	case err == nil:
		return &priorRun{decided: true}, nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, fmt.Errorf("read decision of %s: %w", id, err)
	}
	st, err := w.js.Stream(ctx, w.opts.Subjects.StreamSteps())
	if err != nil {
		return nil, fmt.Errorf("steps stream: %w", err)
	}
	type key struct {
		attempt int32
		run     string
	}
	type storedRun struct {
		turns map[int32]*messages.StepEvent
		last  uint64 // stream sequence of its latest step
	}
	runs := map[key]*storedRun{}
	decided := false
	for seq := uint64(1); ; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read steps of %s: %w", id, err)
		}
		seq = raw.Sequence + 1
		ev, err := messages.Decode[messages.StepEvent](raw.Data)
		if err != nil || ev.Request != request || ev.Attempt > messages.MaxAttempts {
			continue
		}
		if ev.Error != "" {
			decided = true // the collector decides on an error step at once
		}
		k := key{ev.Attempt, ev.Run}
		r := runs[k]
		if r == nil {
			r = &storedRun{turns: map[int32]*messages.StepEvent{}}
			runs[k] = r
		}
		if r.turns[ev.Turn] == nil {
			r.turns[ev.Turn] = ev
		}
		r.last = raw.Sequence
	}
	var best *priorRun
	var bestLast uint64
	for _, r := range runs {
		if r.turns[0] == nil || r.turns[0].Episode == nil {
			continue
		}
		run := &priorRun{}
		for t := int32(0); r.turns[t] != nil; t++ {
			run.steps = append(run.steps, r.turns[t])
			if r.turns[t].Done {
				decided = true
				break
			}
		}
		if best == nil || laterPlay(run, best) || samePlay(run, best) &&
			(len(run.steps) > len(best.steps) || len(run.steps) == len(best.steps) && r.last > bestLast) {
			best, bestLast = run, r.last
		}
	}
	switch {
	case best != nil:
		best.decided = decided
	case decided:
		best = &priorRun{decided: true}
	}
	return best, nil
}

// laterPlay reports whether a started the episode over (for staleness)
// more often than b: the play b abandoned is never resumed, however long.
func laterPlay(a, b *priorRun) bool { return a.restarts() > b.restarts() }

func samePlay(a, b *priorRun) bool { return a.restarts() == b.restarts() }

// restarts is how often the episode had started over when the run played.
func (r *priorRun) restarts() int32 { return r.steps[len(r.steps)-1].Restarts }

// resume continues the episode from an earlier run's last completed turn:
// the game is restored from that step's snapshot, the token history rebuilt
// from the stored steps, and those steps republished under this attempt so
// that the collector assembles this attempt alone. It reports false when
// the earlier run cannot be continued (the game has no snapshot, or it does
// not restore); the episode then starts over.
func (e *episode) resume(ctx context.Context, prior *priorRun, obs0 string) (bool, error) {
	last := prior.steps[len(prior.steps)-1]
	if len(last.EnvState) == 0 || last.Error != "" || last.IsEndMarker() {
		return false, nil
	}
	lg, ok := e.game.(*localGame)
	if !ok {
		return false, nil
	}
	if err := restore(lg.env, last.EnvState); err != nil {
		e.log.Warn("cannot resume; starting over", "err", err)
		return false, nil
	}
	e.resumed = last.Resumed + 1
	single := messages.SingleTurnStyle(e.req.ObsStyle)
	e.tokens = nil // never reused: it may share a cached tokenization
	if single {
		e.history = []string{obs0}
	}
	for _, ev := range prior.steps {
		if single {
			e.history = append(e.history, ev.FeedbackText)
		} else {
			if ev.Turn == 0 {
				e.tokens = append(e.tokens, ev.PromptTokens...)
			}
			e.tokens = append(e.tokens, ev.ActionTokens...)
			e.tokens = append(e.tokens, ev.FeedbackTokens...)
		}
	}
	if single {
		e.suffix = lg.env.Info()["suffix"]
	}
	for _, ev := range prior.steps {
		cp := *ev
		cp.Attempt, cp.Resumed = e.attempt, e.resumed
		if err := e.publishStep(ctx, &cp); err != nil {
			return false, err
		}
	}
	e.turn = last.Turn + 1
	e.noteVersion(prior.steps[0].PolicyVersion)
	e.restarts, e.stale = last.Restarts, last.Stale
	e.w.resumes.Add(1)
	e.metrics.Resumed()
	e.log.Info("episode resumed", "attempt", e.attempt, "turn", e.turn)
	return true, nil
}

// restore restores a snapshot, turning a panic of the game's Restore into
// an error: a snapshot the game cannot take means starting over, not
// failing the episode.
func restore(env envs.Env, state []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("restore panicked: %v", r)
		}
	}()
	return env.Restore(state)
}
