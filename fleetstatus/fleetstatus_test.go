package fleetstatus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/fleet/fleettest"
	"github.com/rollfleet/rollfleet/fleetstatus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

const (
	gtn   = "game:GuessTheNumber-v0-easy"
	other = "game:GuessTheNumber-v0"
)

var subj = messages.NewSubjects("")

// testFleet is a standing fleet (listening NATS server, LLM worker, env
// worker, collector, stand-in model) and a connection to it.
type testFleet struct {
	url string
	nc  *nats.Conn
	tc  *trainer.Client
}

func startFleet(t *testing.T) *testFleet {
	t.Helper()
	url, f := fleettest.Listening(t)
	nc, err := f.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := trainer.New(nc, trainer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &testFleet{url: url, nc: nc, tc: tc}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func seed(s uint64) *uint64 { return &s }

// A server no fleet has used has no streams, no workers and no policy, and
// the text says so.
func TestStatusOfAnEmptyServer(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s, "status")
	snap, err := fleetstatus.Collect(testContext(t), nc, fleetstatus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Streams) != 0 || len(snap.Missing) != 8 || len(snap.Workers) != 0 || snap.Policy != nil || len(snap.Runs) != 0 || len(snap.Errors) != 0 {
		t.Fatalf("snapshot of an empty server: %+v", snap)
	}
	var b bytes.Buffer
	if err := fleetstatus.WriteText(&b, snap); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no rollfleet streams", "not created yet: RF_EPISODES, RF_STEPS", "no policy state", "no workers answered",
		"no trainer batches", "no runs"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text does not say %q:\n%s", want, b.String())
		}
	}
}

// While the fleet is paused, a trainer batch and a rollout run wait in the
// streams: the snapshot shows the streams and their consumers, both kinds
// of workers (paused), the policy state, the batch and the run with their
// episodes. After the resume both finish and the snapshot shows it.
func TestStatusOfARunningFleet(t *testing.T) {
	tf := startFleet(t)
	ctx := testContext(t)
	ctl, err := control.NewClient(tf.nc, subj)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fleetstatus.Collect(ctx, tf.nc, fleetstatus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if kinds := workerKinds(snap); !slices.Equal(kinds, []string{"llm", "env"}) {
		t.Fatalf("worker kinds %v, want llm and env", kinds)
	}
	if snap.Policy == nil || snap.Policy.Version != 0 || snap.Policy.Paused || len(snap.Runs) != 0 {
		t.Fatalf("idle fleet: policy %+v, runs %+v", snap.Policy, snap.Runs)
	}

	if _, err := ctl.Pause(ctx, messages.OnPauseFinish); err != nil {
		t.Fatal(err)
	}
	sub, err := tf.tc.SubmitBatch(ctx, trainer.Batch{ID: "batch-a", Spec: &trainer.Spec{Env: gtn, Episodes: 4, N: 2, Seed: seed(1), MaxTurns: 4}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		sum, err := fleet.Run(ctx, fleet.Options{Env: gtn, Episodes: 3, RunID: "run-b", NATS: tf.url, SubmitOnly: true, Seed: seed(2)})
		if err == nil && sum.Trajectories+sum.Failures != 3 {
			err = fmt.Errorf("run: %s", sum)
		}
		ran <- err
	}()

	// Paused: everything waits.
	// Until the batch and the run are in the snapshot.
	bustest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if snap, err = fleetstatus.Collect(ctx, tf.nc, fleetstatus.Options{}); err != nil {
			return err
		}
		a, b := findRun(snap, "batch-a"), findRun(snap, "run-b")
		switch {
		case snap.Policy == nil || !snap.Policy.Paused:
			return fmt.Errorf("policy %+v", snap.Policy)
		case a == nil || a.Kind != fleetstatus.RunKindBatch || a.Episodes != 4 || a.Queued != 4:
			return fmt.Errorf("batch run %+v", a)
		case b == nil || b.Kind != fleetstatus.RunKindRun || b.Queued != 3 || !hasReader(b, "run-"+messages.NameToken("run-b")+"-trajectory"):
			return fmt.Errorf("run %+v", b)
		case len(snap.Batches) != 1 || snap.Batches[0].Manifest.BatchID != sub.Manifest.BatchID:
			return fmt.Errorf("batches %+v", snap.Batches)
		}
		for _, w := range snap.Workers {
			if w.Health != fleetstatus.HealthPaused {
				return fmt.Errorf("worker %+v", w)
			}
		}
		// The stream is read before the runs: a snapshot taken while the
		// run still submitted can count fewer.
		episodes := findStream(snap, subj.StreamEpisodes())
		if episodes == nil || episodes.Messages != 7 || !slices.ContainsFunc(episodes.Consumers, func(c fleetstatus.Consumer) bool { return c.Name == "envworker" && c.Run == "" }) {
			return fmt.Errorf("episodes stream %+v", episodes)
		}
		return nil
	})
	var text bytes.Buffer
	if err := fleetstatus.WriteText(&text, snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused fleet:\n%s", text.String())
	for _, want := range []string{"RF_EPISODES", "RF_CONTROL", "RF_BATCHES", "envworker", "paused (on_pause finish)", "batch-a", "run-b", "active"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text does not say %q", want)
		}
	}

	if _, err := ctl.Resume(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	// Until the batch is decided.
	bustest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if snap, err = fleetstatus.Collect(ctx, tf.nc, fleetstatus.Options{}); err != nil {
			return err
		}
		if len(snap.Batches) != 1 || snap.Batches[0].Decided != 4 {
			return fmt.Errorf("batches %+v", snap.Batches)
		}
		if findRun(snap, "run-b") != nil {
			return fmt.Errorf("the finished run is still there: %+v", findRun(snap, "run-b"))
		}
		return nil
	})
	if snap.Policy.Version != 1 || snap.Policy.Paused {
		t.Fatalf("policy after the resume: %+v", snap.Policy)
	}
	for _, w := range snap.Workers {
		if w.Health != fleetstatus.HealthOK || w.Version != 1 {
			t.Fatalf("worker after the resume: %+v", w)
		}
	}

	// The JSON form carries the same.
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Streams []struct {
			Name      string `json:"name"`
			Consumers []struct {
				Name string `json:"name"`
			} `json:"consumers"`
		} `json:"streams"`
		Policy struct {
			Version int64 `json:"version"`
		} `json:"policy"`
		Workers []struct {
			Kind   string `json:"kind"`
			Health string `json:"health"`
		} `json:"workers"`
		Batches []struct {
			Manifest struct {
				BatchID string `json:"batch_id"`
			} `json:"manifest"`
			Decided int `json:"decided"`
		} `json:"batches"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Streams) != 8 || back.Policy.Version != 1 || len(back.Workers) != 2 || back.Workers[0].Kind != "llm" || back.Workers[0].Health != "ok" ||
		len(back.Batches) != 1 || back.Batches[0].Manifest.BatchID != "batch-a" || back.Batches[0].Decided != 4 {
		t.Fatalf("JSON: %s", data)
	}
}

func workerKinds(s *fleetstatus.Snapshot) []string {
	var out []string
	for _, k := range s.Kinds {
		out = append(out, k.Kind)
	}
	return out
}

func findRun(s *fleetstatus.Snapshot, id string) *fleetstatus.Run {
	for i := range s.Runs {
		if s.Runs[i].ID == id {
			return &s.Runs[i]
		}
	}
	return nil
}

func findStream(s *fleetstatus.Snapshot, name string) *fleetstatus.Stream {
	for i := range s.Streams {
		if s.Streams[i].Name == name {
			return &s.Streams[i]
		}
	}
	return nil
}

func hasReader(r *fleetstatus.Run, consumer string) bool {
	return slices.ContainsFunc(r.Readers, func(rd fleetstatus.Reader) bool { return rd.Consumer == consumer })
}

// tail runs Tail in the background and returns once its subscription is in
// place; the returned function waits for it and returns its lines.
func tail(t *testing.T, nc *nats.Conn, opts fleetstatus.TailOptions) func() []map[string]any {
	t.Helper()
	ctx := testContext(t)
	ready := make(chan struct{})
	opts.Ready = func(string) { close(ready) }
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := fleetstatus.Tail(ctx, nc, &out, opts)
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("tail ended before it was ready: %v", err)
	}
	return func() []map[string]any {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		var lines []map[string]any
		for line := range strings.Lines(out.String()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			lines = append(lines, m)
		}
		if len(lines) != opts.Count {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), opts.Count, out.String())
		}
		return lines
	}
}

// submit submits a batch and waits until every episode of it is decided,
// so that every record of it has been published.
func (tf *testFleet) submit(t *testing.T, b trainer.Batch) {
	t.Helper()
	ctx := testContext(t)
	id, err := tf.tc.Submit(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	// Until the batch is decided.
	bustest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		st, err := tf.tc.Status(ctx)
		if err != nil {
			return err
		}
		for _, bs := range st.Batches {
			if bs.Manifest.BatchID == id && bs.Decided == bs.Episodes {
				return nil
			}
		}
		return fmt.Errorf("status %+v", st.Batches)
	})
}

// Tail prints each record as the run's output would, as it is published,
// of the env, run and kind asked for only; records published before a
// matching one, of another env or run, are not printed. The work-queue
// streams' readers still get every record.
func TestTail(t *testing.T) {
	tf := startFleet(t)
	spec := func(env string, episodes, n int) *trainer.Spec {
		return &trainer.Spec{Env: env, Episodes: episodes, N: n, Seed: seed(3), MaxTurns: 4}
	}

	t.Run("trajectories of one env", func(t *testing.T) {
		lines := tail(t, tf.nc, fleetstatus.TailOptions{Env: gtn, Count: 4})
		tf.submit(t, trainer.Batch{ID: "other-env", Spec: spec(other, 4, 1)})
		tf.submit(t, trainer.Batch{ID: "this-env", Spec: spec(gtn, 4, 1)})
		for _, l := range lines() {
			if l["env"] != gtn || l["run_id"] != "this-env" || l["observation_tokens"] == nil || l["action_ranges"] == nil || l["reward"] == nil {
				t.Fatalf("line %v", l)
			}
		}
	})
	t.Run("trajectories of one run", func(t *testing.T) {
		lines := tail(t, tf.nc, fleetstatus.TailOptions{Run: "run-two", Count: 3})
		tf.submit(t, trainer.Batch{ID: "run-one", Spec: spec(gtn, 3, 1)})
		tf.submit(t, trainer.Batch{ID: "run-two", Spec: spec(gtn, 3, 1)})
		for _, l := range lines() {
			if l["run_id"] != "run-two" {
				t.Fatalf("line %v", l)
			}
		}
	})
	t.Run("groups", func(t *testing.T) {
		lines := tail(t, tf.nc, fleetstatus.TailOptions{Kind: fleetstatus.TailGroups, Run: "grouped", Count: 2})
		tf.submit(t, trainer.Batch{ID: "grouped", Spec: spec(gtn, 4, 2)})
		for _, l := range lines() {
			trajs, _ := l["trajectories"].([]any)
			if l["run_id"] != "grouped" || l["group_id"] == nil || len(trajs) != 2 {
				t.Fatalf("line %v", l)
			}
		}
	})
	t.Run("failures", func(t *testing.T) {
		lines := tail(t, tf.nc, fleetstatus.TailOptions{Kind: fleetstatus.TailFailures, Env: "game:NoSuchGame-v0", Count: 2})
		var reqs []*messages.EpisodeRequest
		for i := range 2 {
			reqs = append(reqs, &messages.EpisodeRequest{
				EpisodeID: fmt.Sprintf("bad-%d", i), GroupID: fmt.Sprintf("bad-%d", i), GroupSize: 1, Env: "game:NoSuchGame-v0",
				MaxLength: 512, Sampling: messages.SamplingParams{Temperature: 1, TopP: 1},
			})
		}
		tf.submit(t, trainer.Batch{ID: "broken", Requests: reqs})
		for _, l := range lines() {
			if l["run_id"] != "broken" || l["kind"] != messages.FailureEpisode || !strings.Contains(fmt.Sprint(l["reason"]), "NoSuchGame") {
				t.Fatalf("line %v", l)
			}
		}
	})
	t.Run("malformed", func(t *testing.T) {
		lines := tail(t, tf.nc, fleetstatus.TailOptions{Run: "junk", Count: 2})
		for _, data := range [][]byte{[]byte("not msgpack"), {0x81, 0xa1, 0x76, 0x09}} {
			if err := tf.nc.Publish(subj.Trajectories("junk", gtn), data); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range lines() {
			if l["error"] == nil || l["subject"] != subj.Trajectories("junk", gtn) {
				t.Fatalf("line %v", l)
			}
		}
	})
}

func TestTailSubject(t *testing.T) {
	for _, c := range []struct {
		opts fleetstatus.TailOptions
		want string
	}{
		{fleetstatus.TailOptions{}, "rf.trajectories.*.*"},
		{fleetstatus.TailOptions{Env: gtn, Run: "r.1"}, "rf.trajectories.r%2E1." + gtn},
		{fleetstatus.TailOptions{Kind: fleetstatus.TailGroups, Run: "*"}, "rf.groups.%2A.*"},
		{fleetstatus.TailOptions{Kind: fleetstatus.TailFailures, Env: gtn}, "rf.failures.*.*"},
		{fleetstatus.TailOptions{Subjects: messages.NewSubjects("a.b"), Kind: fleetstatus.TailFailures, Run: "x"}, "a.b.failures.x.*"},
	} {
		if got, err := fleetstatus.TailSubject(c.opts); err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.opts, got, err, c.want)
		}
	}
	if _, err := fleetstatus.TailSubject(fleetstatus.TailOptions{Kind: "steps"}); err == nil {
		t.Error("kind steps accepted")
	}
}
