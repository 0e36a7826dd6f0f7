package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// TestAuthConfTrainerBatches runs the trainer package (what "rollout api
// --nats URL" serves) under the trainer's user: it submits batches, reads
// their trajectories, failure records and groups, published as the
// collector's user, acknowledges each, reads the fleet's status and closes
// the batches, which removes everything left of them. Nothing is refused.
func TestAuthConfTrainerBatches(t *testing.T) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, adminJS := startAuthStreams(t, ctx, subj)

	// The batches stream is the admin's to make, as the others are: a
	// trainer submitting before it exists is refused its creation.
	t.Run("no batches stream", func(t *testing.T) {
		nc, _, _ := connectAs(t, url, "trainer")
		c, err := trainer.New(nc, trainer.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := c.Submit(sctx, trainer.Batch{ID: "early", Requests: batchRequests("early", [][]string{{"e0"}})}); err == nil {
			t.Fatal("submitted without a batches stream")
		}
		want := fmt.Sprintf("permissions violation for publish to %q", "$JS.API.STREAM.CREATE."+subj.StreamBatches())
		if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
			t.Fatalf("last error %v, want %s", err, want)
		}
		if _, err := adminJS.Stream(ctx, subj.StreamBatches()); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("batches stream: got %v, want not found", err)
		}
	})
	// What "--init-streams" makes.
	if err := bus.EnsureStreams(ctx, adminJS, subj, bus.StreamOptions{Batches: true}); err != nil {
		t.Fatal(err)
	}

	trNC, _, trLog := connectAs(t, url, "trainer")
	colNC, col, colLog := connectAs(t, url, "collector")
	clientLog := &bustest.LogRecorder{Min: slog.LevelWarn}
	c, err := trainer.New(trNC, trainer.Options{PollInterval: 50 * time.Millisecond, GroupWait: 10 * time.Second, Logger: slog.New(clientLog)})
	if err != nil {
		t.Fatal(err)
	}

	// Batch b1: group g0 of two episodes that end as trajectories, and
	// group g1 of one that fails. Batch b2: one episode, whose trajectory
	// nobody reads before the batch is closed.
	const b1, b2 = "auth-b1", "auth-b2"
	b1Reqs := batchRequests(b1, [][]string{{"e0", "e1"}, {"e2"}})
	sub, err := c.SubmitBatch(ctx, trainer.Batch{ID: b1, Requests: b1Reqs})
	if err != nil {
		t.Fatalf("trainer: submit: %v", err)
	}
	if m := sub.Manifest; m.Episodes != 3 || m.Groups != 2 || sub.Resubmitted {
		t.Fatalf("manifest %+v (resubmitted %v)", m, sub.Resubmitted)
	}
	if again, err := c.SubmitBatch(ctx, trainer.Batch{ID: b1, Requests: b1Reqs}); err != nil || !again.Resubmitted {
		t.Fatalf("trainer: submit again: %+v, %v", again, err)
	}
	b2Reqs := batchRequests(b2, [][]string{{"e0"}})
	if _, err := c.Submit(ctx, trainer.Batch{ID: b2, Requests: b2Reqs}); err != nil {
		t.Fatalf("trainer: submit: %v", err)
	}
	if n := streamMsgs(t, ctx, adminJS, subj.StreamEpisodes(), subj.EpisodesOfRun(b1)); n != 3 {
		t.Fatalf("%d episodes of %s stored, want 3", n, b1)
	}
	if m, err := c.Manifest(ctx, b1); err != nil || m.Episodes != 3 {
		t.Fatalf("trainer: manifest: %+v, %v", m, err)
	}

	// The collector's records, as it publishes them: each episode's
	// decision, then its trajectory or failure record, and the group.
	decide := func(batch, episode string) {
		t.Helper()
		if _, err := col.Publish(ctx, subj.Decided(batch, episode), nil, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			t.Fatalf("collector: decision: %v", err)
		}
	}
	publish := func(subject string, v any, msgID string) {
		t.Helper()
		data, err := messages.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, col, subject, data, msgID); err != nil {
			t.Fatalf("collector: publish %s: %v", subject, err)
		}
	}
	g0 := &messages.Group{V: messages.Version, RunID: b1, GroupID: b1Reqs[0].GroupID, Env: authEnv, MeanScore: 1}
	for _, q := range b1Reqs[:2] {
		tr := trajectoryOf(b1, q)
		decide(b1, q.EpisodeID)
		publish(subj.Trajectories(b1, authEnv), tr, messages.TrajectoryMsgID(q.EpisodeID))
		g0.Trajectories = append(g0.Trajectories, *tr)
	}
	publish(subj.Groups(b1, authEnv), g0, g0.GroupID)
	q := b1Reqs[2]
	decide(b1, q.EpisodeID)
	publish(subj.Failures(b1, messages.FailureEpisode), &messages.Failure{
		V: messages.Version, RunID: b1, EpisodeID: q.EpisodeID, GroupID: q.GroupID, Env: authEnv,
		Kind: messages.FailureEpisode, Reason: "env error", Time: time.Now().UnixNano(),
	}, q.EpisodeID)
	decide(b2, b2Reqs[0].EpisodeID)
	publish(subj.Trajectories(b2, authEnv), trajectoryOf(b2, b2Reqs[0]), messages.TrajectoryMsgID(b2Reqs[0].EpisodeID))

	// The trainer reads b1's trajectories, then its failure records
	// (acknowledged by token, as "rollout api" does), then its groups; each
	// read ends when the batch is complete for it.
	var end trainer.Progress
	onEnd := trainer.OnEnd(func(p trainer.Progress) { end = p })
	var got []string
	for res, err := range c.Trajectories(ctx, b1, onEnd) {
		if err != nil {
			t.Fatalf("trainer: trajectories: %v", err)
		}
		got = append(got, res.Value.EpisodeID)
		if err := res.Ack(ctx); err != nil {
			t.Fatalf("trainer: ack: %v", err)
		}
	}
	slices.Sort(got)
	if want := []string{b1Reqs[0].EpisodeID, b1Reqs[1].EpisodeID}; !slices.Equal(got, want) || !end.Done || end.Decided != 3 {
		t.Fatalf("trainer: trajectories %v, want %v; progress %+v", got, want, end)
	}
	got = nil
	for res, err := range c.Failures(ctx, b1, onEnd) {
		if err != nil {
			t.Fatalf("trainer: failures: %v", err)
		}
		got = append(got, res.Value.EpisodeID)
		if err := c.AckToken(ctx, b1, res.Token()); err != nil {
			t.Fatalf("trainer: ack by token: %v", err)
		}
	}
	if want := []string{q.EpisodeID}; !slices.Equal(got, want) || !end.Done || end.Failures != 1 {
		t.Fatalf("trainer: failures %v, want %v; progress %+v", got, want, end)
	}
	got = nil
	for res, err := range c.Groups(ctx, b1, onEnd) {
		if err != nil {
			t.Fatalf("trainer: groups: %v", err)
		}
		got = append(got, res.Value.GroupID)
		if err := res.Ack(ctx); err != nil {
			t.Fatalf("trainer: ack: %v", err)
		}
	}
	if want := []string{g0.GroupID}; !slices.Equal(got, want) || !end.Done || end.GroupsDelivered != 1 || end.GroupsFailed != 1 {
		t.Fatalf("trainer: groups %v, want %v; progress %+v", got, want, end)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("trainer: status: %v", err)
	}
	if len(st.Batches) != 2 || st.Batches[0].Manifest.BatchID != b1 || st.Batches[1].Manifest.BatchID != b2 {
		t.Fatalf("trainer: status lists %+v", st.Batches)
	}
	if s := st.Batches[0]; !s.Done || s.Trajectories != 2 || s.Failures != 1 || s.GroupsDelivered != 1 || s.Pending[trainer.KindGroup] != 0 {
		t.Errorf("trainer: status of %s: %+v", b1, s)
	}
	if s := st.Batches[1]; s.Pending[trainer.KindTrajectory] != 1 {
		t.Errorf("trainer: status of %s: %+v", b2, s)
	}

	// Closing removes what is left: b2's trajectory, both batches'
	// episodes (no env worker took them), decisions, marks and manifests,
	// and their consumers.
	for _, b := range []string{b1, b2} {
		if err := c.Close(ctx, b); err != nil {
			t.Fatalf("trainer: close %s: %v", b, err)
		}
	}
	if err := c.Close(ctx, b1); err != nil {
		t.Fatalf("trainer: close %s again: %v", b1, err)
	}
	for _, stream := range []string{subj.StreamEpisodes(), subj.StreamDecided(), subj.StreamTrajectories(), subj.StreamGroups(), subj.StreamFailures(), subj.StreamBatches()} {
		if n := streamMsgs(t, ctx, adminJS, stream, ""); n != 0 {
			t.Errorf("%s holds %d messages after the batches were closed", stream, n)
		}
	}
	for _, b := range []string{b1, b2} {
		for _, kind := range []string{trainer.KindGroup, trainer.KindTrajectory, trainer.KindFailure} {
			for _, stream := range []string{subj.StreamGroups(), subj.StreamTrajectories(), subj.StreamFailures()} {
				if _, err := adminJS.Consumer(ctx, stream, trainer.ConsumerName(b, kind)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
					t.Errorf("consumer %s on %s: got %v, want not found", trainer.ConsumerName(b, kind), stream, err)
				}
			}
		}
	}
	if _, err := c.Manifest(ctx, b1); !errors.Is(err, trainer.ErrUnknownBatch) {
		t.Errorf("trainer: manifest of a closed batch: got %v, want ErrUnknownBatch", err)
	}

	for role, nc := range map[string]*nats.Conn{"trainer": trNC, "collector": colNC} {
		if err := nc.Flush(); err != nil {
			t.Errorf("%s: %v", role, err)
		}
		if err := nc.LastError(); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
	for role, log := range map[string]*bustest.LogRecorder{"trainer": trLog, "collector": colLog, "trainer client": clientLog} {
		if lines := log.Lines(); len(lines) > 0 {
			t.Errorf("%s: %q", role, lines)
		}
	}
}

// TestAuthConfBatchesRefused checks that the trainer's batch permissions
// stop at the batches: it administers no stream and purges no steps, and
// no other role writes or reads batches (the workers and the collector may
// only look the stream up, as their health checks do).
func TestAuthConfBatchesRefused(t *testing.T) {
	_, url := startAuthServer(t)
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, adminJS, _ := connectAs(t, url, "admin")
	if err := bus.EnsureStreams(ctx, adminJS, subj, bus.StreamOptions{Batches: true}); err != nil {
		t.Fatal(err)
	}
	denied := func(t *testing.T, nc *nats.Conn, subject string) {
		t.Helper()
		want := strings.ToLower(fmt.Sprintf("permissions violation for publish to %q", subject))
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want) {
				return nil
			}
			return fmt.Errorf("last error %v, want %s", nc.LastError(), want)
		})
	}
	for _, tc := range []struct{ role, subject string }{
		{"trainer", "$JS.API.STREAM.PURGE." + subj.StreamSteps()},
		{"trainer", "$JS.API.STREAM.PURGE." + subj.StreamControl()},
		{"trainer", "$JS.API.STREAM.UPDATE." + subj.StreamBatches()},
		{"trainer", "$JS.API.STREAM.DELETE." + subj.StreamBatches()},
		{"trainer", "$JS.API.CONSUMER.CREATE." + subj.StreamBatches() + ".evil"},
		{"trainer", "$JS.API.CONSUMER.DELETE." + subj.StreamEpisodes() + ".envworker"},
		{"envworker", subj.Batch("b1")},
		{"collector", subj.BatchProgress("b1", "t", "e1")},
		{"gateway", subj.Batch("b1")},
		{"envworker", "$JS.API.STREAM.MSG.GET." + subj.StreamBatches()},
		{"llmworker", "$JS.API.STREAM.MSG.GET." + subj.StreamBatches()},
		{"gateway", "$JS.API.STREAM.INFO." + subj.StreamBatches()},
		{"collector", "$JS.API.STREAM.MSG.GET." + subj.StreamBatches()},
		{"collector", "$JS.API.STREAM.PURGE." + subj.StreamBatches()},
		{"gateway", "$JS.API.STREAM.PURGE." + subj.StreamEpisodes()},
	} {
		t.Run(tc.role+" publishes "+tc.subject, func(t *testing.T) {
			nc, _, _ := connectAs(t, url, tc.role)
			if err := nc.PublishRequest(tc.subject, nc.NewRespInbox(), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, tc.subject)
		})
	}
	if n := streamMsgs(t, ctx, adminJS, subj.StreamBatches(), ""); n != 0 {
		t.Errorf("%s holds %d messages, want 0", subj.StreamBatches(), n)
	}
}

// authEnv is the env of the batches the auth tests submit.
const authEnv = "game:GuessTheNumber-v0"

// batchRequests makes a batch's explicit requests: one group per list of
// episode names, the ids prefixed by the batch.
func batchRequests(batch string, groups [][]string) []*messages.EpisodeRequest {
	var out []*messages.EpisodeRequest
	for g, eps := range groups {
		for i, ep := range eps {
			out = append(out, &messages.EpisodeRequest{
				V: messages.Version, EpisodeID: batch + "-" + ep, GroupID: fmt.Sprintf("%s-g%d", batch, g),
				SampleIndex: int32(i), GroupSize: int32(len(eps)), Env: authEnv,
				Sampling: messages.SamplingParams{Temperature: 1}, MaxLength: 256,
			})
		}
	}
	return out
}

// trajectoryOf is a one-turn trajectory of a request's episode.
func trajectoryOf(batch string, q *messages.EpisodeRequest) *messages.Trajectory {
	return &messages.Trajectory{
		V: messages.Version, RunID: batch, EpisodeID: q.EpisodeID, GroupID: q.GroupID,
		SampleIndex: q.SampleIndex, GroupSize: q.GroupSize, Env: q.Env,
		ObservationTokens: messages.Tokens{1, 2, 3}, ActionRanges: messages.Ranges{{Start: 1, End: 3}},
		RolloutLogProbs: messages.Logprobs{0, -0.5, -0.25}, Reward: 1, Scores: 1, Turns: 1,
		StepRewards: []float64{1}, FinishReason: "stop", ObsStyle: messages.ObsChat, Success: true,
	}
}

// streamMsgs counts a stream's messages, on filter ("": all), as the admin
// sees them.
func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, filter string) uint64 {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var opts []jetstream.StreamInfoOpt
	if filter != "" {
		opts = append(opts, jetstream.WithSubjectFilter(filter))
	}
	info, err := st.Info(ctx, opts...)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	if filter == "" {
		return info.State.Msgs
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}
