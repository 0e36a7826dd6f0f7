package llm

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
)

// generations tracks the generations running on model servers, so that a
// pause can wait for them (finish) or cancel them (abort), and a trainer's
// status request can see that none is left.
type generations struct {
	ctl *control.Watcher

	mu    sync.Mutex
	calls map[*generation]struct{}
	// held counts the requests waiting for a resume.
	held atomic.Int64
}

// generation is one request's call to a model server.
type generation struct {
	cancel  context.CancelFunc
	aborted atomic.Bool
}

func newGenerations(ctl *control.Watcher) *generations {
	return &generations{ctl: ctl, calls: make(map[*generation]struct{})}
}

// begin waits until the fleet runs and registers a generation under the
// version it then has. The generation is counted before the state is read
// again: a pause either sees it in flight or is seen by it, so a trainer
// whose pause returned never has a generation start under the old weights.
// The returned context ends when an aborting pause cancels the generation.
func (g *generations) begin(ctx context.Context) (*generation, context.Context, int64, error) {
	for {
		if _, err := g.wait(ctx); err != nil {
			return nil, nil, 0, err
		}
		cctx, cancel := context.WithCancel(ctx)
		c := &generation{cancel: cancel}
		g.mu.Lock()
		g.calls[c] = struct{}{}
		g.mu.Unlock()
		st := g.ctl.State()
		if !st.Paused {
			return c, cctx, st.Version, nil
		}
		g.end(c)
	}
}

// wait holds a request while the fleet is paused, counted as held.
func (g *generations) wait(ctx context.Context) (messages.PolicyState, error) {
	if st := g.ctl.State(); !st.Paused {
		return st, nil
	}
	g.held.Add(1)
	defer g.held.Add(-1)
	return g.ctl.WaitRunning(ctx)
}

// end unregisters a generation and releases its context.
func (g *generations) end(c *generation) {
	g.mu.Lock()
	delete(g.calls, c)
	g.mu.Unlock()
	c.cancel()
}

// inFlight counts the generations running.
func (g *generations) inFlight() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(len(g.calls))
}

// abortLoop cancels the running generations whenever the fleet pauses with
// OnPauseAbort, until ctx ends.
func (g *generations) abortLoop(ctx context.Context) {
	for {
		// The channel is taken before the state is read: no change falls
		// between the two.
		changed := g.ctl.Changed()
		if st := g.ctl.State(); st.Paused && st.OnPause == messages.OnPauseAbort {
			g.mu.Lock()
			for c := range g.calls {
				c.aborted.Store(true)
				c.cancel()
			}
			g.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
