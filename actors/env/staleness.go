package env

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nuid"

	"github.com/rollfleet/rollfleet/messages"
)

// errStale marks an episode dropped because its policy moved on too far
// (messages.StaleDrop); its failure record has kind messages.FailureStale.
var errStale = errors.New("stale")

// errRestart asks for the episode to be played again from its start under
// the current policy (messages.StaleRestart).
var errRestart = errors.New("restart under the current policy")

// beforeTurn holds a turn while the fleet is paused and applies the
// episode's staleness bound: a turn after the first starts only while the
// fleet's policy version minus the first turn's is at most max_staleness.
func (e *episode) beforeTurn(ctx context.Context) error {
	st, err := e.waitRunning(ctx)
	if err != nil {
		return err
	}
	return e.checkStale(st.Version)
}

// checkStale applies the staleness bound to a turn under policy version v:
// before the turn with the fleet's version, and again with the version its
// action was generated under, which a pause while the request waited may
// have moved on.
func (e *episode) checkStale(v int64) error {
	if !e.versioned || e.stale {
		return nil
	}
	bound, policy := e.w.staleness(e.req)
	if bound < 0 || v-e.firstVersion <= int64(bound) {
		return nil
	}
	why := fmt.Sprintf("policy moved from version %d (first turn) to %d, past max_staleness %d", e.firstVersion, v, bound)
	switch {
	case policy == messages.StaleKeep:
		e.stale = true
		return nil
	case policy == messages.StaleRestart && e.restarts < int32(max(e.w.opts.MaxRestarts, 0)):
		e.log.Debug("episode restarted", "turn", e.turn, "reason", why)
		return errRestart
	case policy == messages.StaleRestart:
		why += fmt.Sprintf(", after %d restarts", e.restarts)
	}
	e.w.staleDrops.Add(1)
	return fmt.Errorf("%w: %w: %s", errEpisode, errStale, why)
}

// restart forgets the play so far: the next one starts from the reset game
// as a run of its own (a new nonce), whose steps the collector assembles
// alone.
func (e *episode) restart() {
	e.restarts++
	e.w.restarts.Add(1)
	e.nonce = nuid.Next()
	e.fresh = true
	e.turn, e.tokens, e.promptCut = 0, nil, 0
	e.history, e.suffix = nil, ""
	e.versioned, e.firstVersion, e.stale = false, 0, false
}

// noteVersion records the policy version of a turn's action: the first
// turn's is what staleness is measured from.
func (e *episode) noteVersion(v int64) {
	if !e.versioned {
		e.firstVersion, e.versioned = v, true
	}
}

// staleness is the bound and policy that apply to req: its own, or the
// worker's defaults.
func (w *Worker) staleness(req *messages.EpisodeRequest) (int32, string) {
	bound := *w.opts.MaxStaleness
	if req.MaxStaleness != nil {
		bound = *req.MaxStaleness
	}
	policy := req.StalePolicy
	if policy == "" {
		policy = w.opts.StalePolicy
	}
	return bound, policy
}

// waitRunning holds the episode's turn while the fleet is paused. A worker
// shutting down meanwhile hands the episode back (errStopped) rather than
// wait for a resume.
func (e *episode) waitRunning(ctx context.Context) (messages.PolicyState, error) {
	if st := e.w.watcher.Load().State(); !st.Paused {
		return st, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.halt:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := e.w.waitRunning(ctx)
	select {
	case <-e.halt:
		return st, fmt.Errorf("%w while the fleet was paused", errStopped)
	default:
	}
	return st, err
}

// waitRunning returns the policy state once the fleet is not paused,
// counting the wait as a held turn.
func (w *Worker) waitRunning(ctx context.Context) (messages.PolicyState, error) {
	if st := w.watcher.Load().State(); !st.Paused {
		return st, nil
	}
	w.held.Add(1)
	defer w.held.Add(-1)
	return w.watcher.Load().WaitRunning(ctx)
}

// heldByPause reports whether a request that timed out, or came back
// unavailable, was held by a pause: the fleet is paused, or paused after
// the policy state of the given epoch. It then waits for the resume; such
// an attempt was not lost and does not count. (A tokenization can wait
// behind held generations too.)
func (w *Worker) heldByPause(ctx context.Context, epoch uint64) (bool, error) {
	if !w.watcher.Load().State().Paused && w.watcher.Load().LastPause() <= epoch {
		return false, nil
	}
	_, err := w.waitRunning(ctx)
	return err == nil, err
}

// status is the worker's answer to a trainer's status request.
func (w *Worker) status() messages.WorkerStatus {
	st := w.watcher.Load().State()
	return messages.WorkerStatus{
		Kind: messages.WorkerEnv, ID: w.opts.ID, Epoch: st.Epoch, Version: st.Version, Paused: st.Paused,
		InFlight: w.inFlight.Load(), Held: w.held.Load(),
	}
}
