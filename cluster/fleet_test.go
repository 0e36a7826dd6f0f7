package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/cluster"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// The fleet test's scenario.
const (
	fleetEpisodes = 200
	// submitWindow spreads the submissions, so that every node restart
	// finds episodes in flight.
	submitWindow = 25 * time.Second
	// tokenLatency makes an episode last about a second.
	tokenLatency = 3 * time.Millisecond
	// reformTimeout bounds the wait for the cluster to re-form after a
	// restart: a stream leader election takes 4 to 9 s, longer under -race.
	reformTimeout = 60 * time.Second
	// outcomeTimeout bounds the wait for every episode's outcome after the
	// last restart; a step or an acknowledgement lost with a node comes back
	// after its consumer's AckWait (1m).
	outcomeTimeout = 3 * time.Minute
)

// kill is one node restart of the schedule: whom to stop and for how long.
type kill struct {
	victim string // "leader RF_EPISODES", "leader RF_STEPS" or "random"
	node   string
	down   time.Duration
	// reformed is how long the cluster took after the restart to have a
	// meta leader and every stream a leader and current replicas.
	reformed time.Duration
	at       time.Duration // since the test's start
}

// nodes are the cluster's nodes as the fleet test stops and restarts them.
type nodes interface {
	Size() int
	Name(i int) string
	URLs() string
	// Stop stops node i; Restart starts it again (same name, store, ports).
	Stop(t *testing.T, i int)
	Restart(t *testing.T, i int)
	// Ready reports nil once the cluster has re-formed: every node back
	// and the JetStream meta leader elected.
	Ready(ctx context.Context, js jetstream.JetStream) error
	// StreamReady reports nil once stream has a leader and current
	// replicas, and the index of its leader's node.
	StreamReady(ctx context.Context, js jetstream.JetStream, stream string) (int, error)
}

// inProcess are the nodes of a cluster in the test's process, shut down
// cleanly.
type inProcess struct{ *cluster.Cluster }

func (c inProcess) Stop(_ *testing.T, i int) { c.Cluster.Stop(i) }

func (c inProcess) Restart(t *testing.T, i int) {
	t.Helper()
	if err := c.Cluster.Restart(i); err != nil {
		t.Fatal(err)
	}
}

func (c inProcess) Ready(context.Context, jetstream.JetStream) error { return c.JetStreamReady() }

// TestFleetSurvivesNodeRestarts runs the env worker, LLM worker and
// collector on a 3-node JetStream cluster in the test's process with every
// stream at three replicas, and shuts down and restarts nodes (the leaders
// of the episodes and steps streams and random ones, one at a time) while
// episodes run: every submitted episode must still end as exactly one
// trajectory or failure record, with no failures and every trajectory
// valid. RF_CLUSTER_SEED picks the seed of the schedule.
func TestFleetSurvivesNodeRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of node restarts; skipped with -short")
	}
	serverLog := &bustest.LogRecorder{Min: slog.LevelWarn}
	c := bustest.RunCluster(t, cluster.Options{Logger: slog.New(keepAttrs{rec: serverLog})})
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, "server log", serverLog.Lines(), 200)
		}
	})
	runFleet(t, inProcess{c}, []string{victimEpisodes, victimSteps, victimRandom, victimRandom, victimSteps})
}

// The victims of a schedule.
const (
	victimEpisodes = "leader RF_EPISODES"
	victimSteps    = "leader RF_STEPS"
	victimRandom   = "random"
)

// runFleet is the fleet test's scenario on nodes: streams at three
// replicas, the actors, 200 episodes submitted over submitWindow while the
// victims are stopped and restarted one at a time, then the check that each
// episode ended exactly once.
func runFleet(t *testing.T, cl nodes, victims []string) {
	seed := uint64(1)
	if s := os.Getenv("RF_CLUSTER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RF_CLUSTER_SEED: %v", err)
		}
		seed = v
	}
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0x636c7573746572))
	// The actors log into a recorder, shown when the test fails.
	actorLog := &bustest.LogRecorder{Min: slog.LevelInfo}
	log := slog.New(keepAttrs{rec: actorLog})
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, "actor log", actorLog.Lines(), 400)
		}
	})
	urls := cl.URLs()
	subj := messages.NewSubjects("")
	streams := []string{subj.StreamEpisodes(), subj.StreamSteps(), subj.StreamTrajectories(), subj.StreamGroups(), subj.StreamFailures()}

	nc, err := bus.Connect(urls, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bustest.CheckFor(t, reformTimeout, 50*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return bus.EnsureStreams(cctx, js, subj, bus.StreamOptions{Replicas: 3})
	})
	streamsReady(t, cl, js, streams)

	model := toyllm.New(toyllm.Options{TokenLatency: tokenLatency, Logger: slog.New(slog.DiscardHandler)})
	modelURL, stopModel, err := model.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopModel)
	conns := startActors(t, urls, modelURL, log)

	reqs := requests(seed)
	submitted := make(chan error, 1)
	var submitRetries atomic.Int64
	go func() { submitted <- submit(js, subj, reqs, &submitRetries) }()

	// The schedule: each victim down for a while, one at a time; the
	// cluster re-forms before the next.
	var kills []kill
	for _, v := range victims {
		// Let the fleet work between two restarts.
		pause(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		i := rng.IntN(cl.Size())
		if stream, ok := strings.CutPrefix(v, "leader "); ok {
			bustest.CheckFor(t, reformTimeout, 50*time.Millisecond, func() error {
				var err error
				i, err = cl.StreamReady(ctx, js, stream)
				return err
			})
		}
		k := kill{victim: v, node: cl.Name(i), down: time.Duration(500+rng.IntN(2500)) * time.Millisecond, at: time.Since(t0)}
		where := placement(ctx, js, subj, conns)
		cl.Stop(t, i)
		pause(k.down)
		cl.Restart(t, i)
		up := time.Now()
		bustest.CheckFor(t, reformTimeout, 50*time.Millisecond, func() error {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return cl.Ready(cctx, js)
		})
		streamsReady(t, cl, js, streams)
		k.reformed = time.Since(up)
		kills = append(kills, k)
		t.Logf("killed %s (%s) at %s, down %s, cluster re-formed %s after the restart; before: %s",
			k.node, k.victim, k.at.Round(time.Millisecond), k.down, k.reformed.Round(time.Millisecond), where)
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	killsDone := time.Since(t0)

	// Every episode decided, then nothing left in flight on either
	// consumer: only then can no second outcome come.
	var out *outcomes
	bustest.CheckFor(t, outcomeTimeout, 250*time.Millisecond, func() error {
		o, err := readOutcomes(ctx, js, subj)
		if err != nil {
			return err
		}
		out = o
		if n := o.decided(reqs); n < len(reqs) {
			return fmt.Errorf("%d of %d episodes decided", n, len(reqs))
		}
		return nil
	})
	decided := time.Since(t0)
	bustest.CheckFor(t, outcomeTimeout, 250*time.Millisecond, func() error {
		return idle(ctx, js, subj)
	})
	out, err = readOutcomes(ctx, js, subj)
	if err != nil {
		t.Fatal(err)
	}

	var lost, duplicated []string
	for _, r := range reqs {
		switch n := len(out.trajs[r.EpisodeID]) + len(out.failures[r.EpisodeID]); {
		case n == 0:
			lost = append(lost, r.EpisodeID)
		case n > 1:
			duplicated = append(duplicated, r.EpisodeID)
		}
	}
	resumed, invalid := 0, 0
	for id, trs := range out.trajs {
		for _, tr := range trs {
			if tr.Resumed > 0 {
				resumed++
			}
			if want := reqs[0].RunID; tr.RunID != want {
				t.Errorf("%s: trajectory of run %q, want %q", id, tr.RunID, want)
			}
			if err := tr.Validate(); err != nil {
				invalid++
				t.Errorf("%s: invalid trajectory: %v", id, err)
			}
		}
	}
	nFailures := 0
	for id, fs := range out.failures {
		for _, f := range fs {
			nFailures++
			t.Errorf("%s: failure record %s: %s", id, f.Kind, f.Reason)
		}
	}
	if len(lost) > 0 || len(duplicated) > 0 {
		evidence(t, ctx, js, subj, lost, duplicated, actorLog)
	}
	t.Logf("seed %d: episodes %d, trajectories %d (resumed %d), failures %d, lost %d, duplicated %d, invalid %d, kills %d, submit retries %d; kills done %s, all decided %s, idle %s",
		seed, len(reqs), len(out.trajs), resumed, nFailures, len(lost), len(duplicated), invalid, len(kills), submitRetries.Load(),
		killsDone.Round(time.Millisecond), decided.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	logSummary(t, actorLog.Lines())
	if len(lost) > 0 || len(duplicated) > 0 {
		t.Fatalf("lost %d %v, duplicated %d %v", len(lost), lost, len(duplicated), duplicated)
	}
}

// pause waits d: a node's down time and the work between two restarts are
// part of the scenario, not a wait for a condition.
func pause(d time.Duration) { <-time.After(d) }

// streamsReady waits until every stream has a leader and current replicas.
func streamsReady(t *testing.T, c nodes, js jetstream.JetStream, streams []string) {
	t.Helper()
	bustest.CheckFor(t, reformTimeout, 50*time.Millisecond, func() error {
		for _, s := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.StreamReady(ctx, js, s)
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// startActors runs one LLM worker, one env worker and one collector, each
// on its own connection to every node, until the test ends.
// It returns their connections by actor name.
func startActors(t *testing.T, urls, modelURL string, log *slog.Logger) map[string]*nats.Conn {
	t.Helper()
	conns := map[string]*nats.Conn{}
	connect := func(name string) *nats.Conn {
		nc, err := bus.Connect(urls, name, log.With("process", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[name] = nc
		return nc
	}
	newJS := func(nc *nats.Conn) jetstream.JetStream {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	lnc := connect("llmworker")
	lw, err := llm.New(lnc, llm.Options{Endpoints: []string{modelURL}, Logger: log.With("process", "llmworker")})
	if err != nil {
		t.Fatal(err)
	}
	enc := connect("envworker")
	ew, err := envactor.New(enc, newJS(enc), envactor.Options{
		Concurrency: 64,
		// A request cut off with a node would otherwise wait out the
		// default 180 s.
		RequestTimeout: 10 * time.Second,
		// An episode whose delivery was lost with a node comes back after
		// AckWait: 15 s rather than the default minute keeps the test short.
		AckWait: 15 * time.Second,
		Logger:  log.With("process", "envworker"),
	})
	if err != nil {
		t.Fatal(err)
	}
	cnc := connect("collector")
	coll := collector.New(newJS(cnc), collector.Options{Logger: log.With("process", "collector")})
	// Stopped in reverse: the env worker first.
	for _, a := range []struct {
		name string
		run  func(context.Context) error
	}{{"collector", coll.Run}, {"llmworker", lw.Run}, {"envworker", ew.Run}} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", a.name, err)
				}
			case <-time.After(time.Minute):
				t.Errorf("%s did not stop", a.name)
			}
		})
	}
	return conns
}

// placement says which node each actor is connected to and which nodes
// lead the actors' consumers, for the log of a restart.
func placement(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, conns map[string]*nats.Conn) string {
	var parts []string
	for _, name := range []string{"envworker", "llmworker", "collector"} {
		parts = append(parts, name+"@"+conns[name].ConnectedServerName())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, sc := range [][2]string{{subj.StreamEpisodes(), "envworker"}, {subj.StreamSteps(), "collector"}} {
		leader := "?"
		if cons, err := js.Consumer(ctx, sc[0], sc[1]); err == nil && cons.CachedInfo().Cluster != nil {
			leader = cons.CachedInfo().Cluster.Leader
		}
		parts = append(parts, "consumer "+sc[1]+" led by "+leader)
	}
	return strings.Join(parts, ", ")
}

// requests builds the episode requests, reproducible from the seed.
func requests(seed uint64) []*messages.EpisodeRequest {
	now := time.Now().UnixNano()
	reqs := make([]*messages.EpisodeRequest, fleetEpisodes)
	for i := range reqs {
		envSeed := seed<<20 + uint64(2*i)
		sampleSeed := int64(seed<<20 + uint64(2*i+1))
		reqs[i] = &messages.EpisodeRequest{
			V: messages.Version, RunID: fmt.Sprintf("cluster-%d", seed), EpisodeID: fmt.Sprintf("cluster-%d-%04d", seed, i),
			GroupID: fmt.Sprintf("cluster-%d-g%04d", seed, i), GroupSize: 1,
			Env: "game:GuessTheNumber-v0", EnvSeed: &envSeed,
			Sampling:  messages.SamplingParams{Temperature: 1, TopP: 1, MaxTokens: 256, Seed: &sampleSeed},
			MaxLength: 4096, SubmitTime: now,
		}
	}
	return reqs
}

// submit publishes the requests at a steady pace over submitWindow, each
// retried until the store acknowledges it (its id makes a repeat a no-op).
func submit(js jetstream.JetStream, subj messages.Subjects, reqs []*messages.EpisodeRequest, retries *atomic.Int64) error {
	start := time.Now()
	for i, r := range reqs {
		if d := time.Until(start.Add(submitWindow * time.Duration(i) / time.Duration(len(reqs)))); d > 0 {
			pause(d)
		}
		data, err := messages.Marshal(r)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(reformTimeout)
		for {
			err = bus.Publish(context.Background(), js, subj.Episodes(r.RunID, r.Env), data, r.EpisodeID)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("submit %s: %w", r.EpisodeID, err)
			}
			retries.Add(1)
		}
	}
	return nil
}

// outcomes are the records of the trajectories and failures streams, by
// episode id.
type outcomes struct {
	trajs    map[string][]*messages.Trajectory
	failures map[string][]*messages.Failure
}

func (o *outcomes) decided(reqs []*messages.EpisodeRequest) int {
	n := 0
	for _, r := range reqs {
		if len(o.trajs[r.EpisodeID])+len(o.failures[r.EpisodeID]) > 0 {
			n++
		}
	}
	return n
}

// readOutcomes reads every record the trajectories and failures streams
// hold, without a consumer: they are work queues, and nothing reads them
// here, so they keep every record for the checks.
func readOutcomes(ctx context.Context, js jetstream.JetStream, subj messages.Subjects) (*outcomes, error) {
	o := &outcomes{trajs: map[string][]*messages.Trajectory{}, failures: map[string][]*messages.Failure{}}
	trajs, err := bustest.ReadStored(ctx, js, subj.StreamTrajectories(), "")
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", subj.StreamTrajectories(), err)
	}
	for _, m := range trajs {
		tr, err := messages.Decode[messages.Trajectory](m.Data)
		if err != nil {
			return nil, fmt.Errorf("%s seq %d: %w", subj.StreamTrajectories(), m.Sequence, err)
		}
		if m.Subject != subj.Trajectories(tr.RunID, tr.Env) {
			return nil, fmt.Errorf("%s seq %d: trajectory of run %q on %s", subj.StreamTrajectories(), m.Sequence, tr.RunID, m.Subject)
		}
		o.trajs[tr.EpisodeID] = append(o.trajs[tr.EpisodeID], tr)
	}
	fails, err := bustest.ReadStored(ctx, js, subj.StreamFailures(), "")
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", subj.StreamFailures(), err)
	}
	for _, m := range fails {
		f, err := messages.Decode[messages.Failure](m.Data)
		if err != nil {
			return nil, fmt.Errorf("%s seq %d: %w", subj.StreamFailures(), m.Sequence, err)
		}
		o.failures[f.EpisodeID] = append(o.failures[f.EpisodeID], f)
	}
	return o, nil
}

// readStream hands fn the data of every message of a stream, up to its last
// sequence when called.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, fn func([]byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	for seen := uint64(0); seen < state.LastSeq; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seen = meta.Sequence.Stream
			if err := fn(m.Data()); err != nil {
				return fmt.Errorf("stream %s seq %d: %w", stream, seen, err)
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		if n == 0 {
			return fmt.Errorf("stream %s: stopped at %d of %d", stream, seen, state.LastSeq)
		}
	}
	return nil
}

// idle reports nil when neither the env workers' consumer of the episodes
// stream nor the collector's consumer of the steps stream has anything
// pending or unacknowledged.
func idle(ctx context.Context, js jetstream.JetStream, subj messages.Subjects) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, sc := range [][2]string{{subj.StreamEpisodes(), "envworker"}, {subj.StreamSteps(), "collector"}} {
		cons, err := js.Consumer(ctx, sc[0], sc[1])
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 || ci.NumRedelivered != 0 {
			return fmt.Errorf("%s: %d pending, %d unacknowledged, %d redelivered", sc[1], ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
		}
	}
	return nil
}

// evidence logs, for each lost or duplicated episode, its runs in the
// steps stream and the log lines that name it.
func evidence(t *testing.T, ctx context.Context, js jetstream.JetStream, subj messages.Subjects, lost, duplicated []string, logs *bustest.LogRecorder) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range slices.Concat(lost, duplicated) {
		want[id] = true
	}
	steps := map[string][]string{}
	err := readStream(ctx, js, subj.StreamSteps(), func(data []byte) error {
		ev, err := messages.Decode[messages.StepEvent](data)
		if err != nil {
			return nil
		}
		if want[ev.EpisodeID] {
			steps[ev.EpisodeID] = append(steps[ev.EpisodeID], fmt.Sprintf("attempt %d turn %d done %v resumed %d err %q", ev.Attempt, ev.Turn, ev.Done, ev.Resumed, ev.Error))
		}
		return nil
	})
	if err != nil {
		t.Logf("read steps: %v", err)
	}
	lines := logs.Lines()
	for id := range want {
		t.Logf("episode %s: steps stored:\n  %s", id, strings.Join(steps[id], "\n  "))
		for _, l := range lines {
			if strings.Contains(l, id) {
				t.Logf("  log: %s", l)
			}
		}
	}
}

// logSummary logs how often each warning or error message was logged.
func logSummary(t *testing.T, lines []string) {
	t.Helper()
	counts := map[string]int{}
	for _, l := range lines {
		if !strings.HasPrefix(l, "WARN ") && !strings.HasPrefix(l, "ERROR ") {
			continue
		}
		msg := l
		if i := strings.Index(l, " process="); i > 0 {
			msg = l[:i]
		}
		if j := strings.Index(l, " process="); j > 0 {
			rest := l[j+len(" process="):]
			if k := strings.IndexByte(rest, ' '); k > 0 {
				rest = rest[:k]
			}
			msg = rest + ": " + msg
		}
		counts[msg]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%5d  %s", counts[k], k)
	}
}

// dump logs the last n lines.
func dump(t *testing.T, what string, lines []string, n int) {
	t.Helper()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("%s (last %d lines):\n%s", what, len(lines), strings.Join(lines, "\n"))
}

// keepAttrs hands records to a LogRecorder with the attributes added to the
// logger (the process and actor), which the recorder alone drops.
type keepAttrs struct {
	rec   *bustest.LogRecorder
	attrs []slog.Attr
}

func (h keepAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.rec.Enabled(ctx, l) }

func (h keepAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.rec.Handle(ctx, r)
}

func (h keepAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return keepAttrs{rec: h.rec, attrs: slices.Concat(h.attrs, attrs)}
}

func (h keepAttrs) WithGroup(string) slog.Handler { return h }
