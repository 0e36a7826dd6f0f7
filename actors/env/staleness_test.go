package env

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// gatedModel is the stand-in model whose completions wait until the gate
// opens, each announcing itself on entered first.
type gatedModel struct {
	url     string
	gate    chan struct{}
	entered chan struct{}
}

func newGatedModel(t *testing.T) *gatedModel {
	t.Helper()
	m := &gatedModel{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	toy := toyllm.New(toyllm.Options{}).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			m.entered <- struct{}{}
			select {
			case <-m.gate:
			case <-r.Context().Done():
				return
			}
		}
		toy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.url = srv.URL
	return m
}

// waitEntered waits until n completions reached the model.
func (m *gatedModel) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-m.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("completion did not reach the model")
		}
	}
}

// steered is a fleet (LLM worker, collector, env worker) on a gated model,
// with a trainer's control client to steer it.
type steered struct {
	t     *testing.T
	model *gatedModel
	ctl   *control.Client
	js    jetstream.JetStream
	coll  *collector.Collector
}

func newSteered(t *testing.T) *steered {
	t.Helper()
	s := bustest.RunServer(t)
	m := newGatedModel(t)
	js, coll, _, start := resumeHarness(t, s, m.url)
	startWorker(t, s, "env", Options{Concurrency: 8}, start)
	c, err := control.NewClient(bustest.Connect(t, s, "trainer"), messages.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	return &steered{t: t, model: m, ctl: c, js: js, coll: coll}
}

func (f *steered) submit(reqs ...*messages.EpisodeRequest) {
	f.t.Helper()
	subj := messages.NewSubjects("")
	for _, req := range reqs {
		data, err := messages.Marshal(req)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := bus.Publish(f.t.Context(), f.js, subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
			f.t.Fatal(err)
		}
	}
}

// pauseDuringFirstTurns pauses the fleet (with onPause) while the first
// turns of n episodes are at the model, lets them go on (finish) or sees
// them cancelled (abort), and returns once the pause took hold; every
// later completion then passes the gate.
func (f *steered) pauseDuringFirstTurns(n int, onPause string) {
	f.t.Helper()
	f.model.waitEntered(f.t, n)
	paused := make(chan error, 1)
	go func() {
		_, err := f.ctl.Pause(f.t.Context(), onPause)
		paused <- err
	}()
	if onPause == messages.OnPauseFinish {
		// The pause waits for the running generations: let them end.
		bustest.CheckFor(f.t, 30*time.Second, 5*time.Millisecond, func() error {
			ws, err := f.ctl.Workers(f.t.Context())
			if err != nil {
				return err
			}
			for _, w := range ws {
				if !w.Paused {
					return fmt.Errorf("worker %s not paused yet", w.ID)
				}
			}
			return nil
		})
		close(f.model.gate)
	}
	select {
	case err := <-paused:
		if err != nil {
			f.t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		f.t.Fatal("pause did not take hold")
	}
	if onPause == messages.OnPauseAbort {
		close(f.model.gate)
	}
}

func (f *steered) resume(version int64) {
	f.t.Helper()
	if _, err := f.ctl.Resume(f.t.Context(), version); err != nil {
		f.t.Fatal(err)
	}
}

// Each staleness policy, for an episode whose policy moves on by two
// versions after its first turn while its bound is one.
func TestStalenessPolicies(t *testing.T) {
	f := newSteered(t)
	bound := int32(1)
	reqs := map[string]*messages.EpisodeRequest{}
	var order []*messages.EpisodeRequest
	for _, policy := range append(slices.Clone(messages.StalePolicies), "unbounded") {
		req := episodeRequest("stale-"+policy, func(r *messages.EpisodeRequest) {
			r.MaxStaleness, r.StalePolicy = &bound, policy
			if policy == "unbounded" {
				r.MaxStaleness, r.StalePolicy = nil, ""
			}
		})
		reqs[policy] = req
		order = append(order, req)
	}
	f.submit(order...)
	f.pauseDuringFirstTurns(len(order), messages.OnPauseFinish)
	f.resume(2)
	got := gatherOutcomes(t, f.js, f.coll, len(order))

	if o := got["stale-drop"]; o.failure == nil || o.failure.Kind != messages.FailureStale ||
		!strings.Contains(o.failure.Reason, "past max_staleness 1") {
		t.Errorf("drop: %+v, want a failure of kind stale naming the bound", o.failure)
	}
	restarted := trajectoryOf(t, got["stale-restart"].traj, got["stale-restart"].failure)
	if restarted.Restarts != 1 || restarted.Staleness != 0 || restarted.Stale || restarted.PolicyVersions[0] != 2 {
		t.Errorf("restart: restarts %d, staleness %d, stale %v, versions %v; want one restart, all under version 2",
			restarted.Restarts, restarted.Staleness, restarted.Stale, restarted.PolicyVersions)
	}
	replay(t, restarted)
	for _, name := range []string{"stale-keep", "stale-unbounded"} {
		kept := trajectoryOf(t, got[name].traj, got[name].failure)
		wantStale := name == "stale-keep"
		if kept.Restarts != 0 || kept.Staleness != 2 || kept.Stale != wantStale || kept.PolicyVersions[0] != 0 || kept.Turns < 2 {
			t.Errorf("%s: restarts %d, staleness %d, stale %v, versions %v; want staleness 2, stale %v, first turn under version 0",
				name, kept.Restarts, kept.Staleness, kept.Stale, kept.PolicyVersions, wantStale)
		}
		for i, v := range kept.PolicyVersions[1:] {
			if v != 2 {
				t.Errorf("%s: turn %d under version %d, want 2", name, i+1, v)
			}
		}
		replay(t, kept)
	}
}

// Episodes in flight across a pause: with finish their first turns keep
// the old version; with abort they are generated again under the new one.
// Either way each episode has one trajectory, which replays exactly.
func TestPauseWithEpisodesInFlight(t *testing.T) {
	for _, onPause := range messages.OnPauses {
		t.Run(onPause, func(t *testing.T) {
			f := newSteered(t)
			const n = 3
			var reqs []*messages.EpisodeRequest
			for i := range n {
				reqs = append(reqs, episodeRequest(fmt.Sprintf("%s-%d", onPause, i), nil))
			}
			f.submit(reqs...)
			f.pauseDuringFirstTurns(n, onPause)
			f.resume(1)
			wantFirst := int64(0)
			if onPause == messages.OnPauseAbort {
				wantFirst = 1
			}
			for id, o := range gatherOutcomes(t, f.js, f.coll, n) {
				tr := trajectoryOf(t, o.traj, o.failure)
				if tr.PolicyVersions[0] != wantFirst || tr.PolicyVersions[len(tr.PolicyVersions)-1] != 1 {
					t.Errorf("%s: versions %v, want the first turn under %d and the last under 1", id, tr.PolicyVersions, wantFirst)
				}
				replay(t, tr)
			}
		})
	}
}
