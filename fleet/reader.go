package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// record is one output message of the run, acknowledged once written.
type record struct {
	kind string
	msg  jetstream.Msg
}

// consumerPrefix begins the names of a run's consumers, "run-<run>-<kind>",
// which tells a rollout run job from a trainer's batch in rollout status.
const consumerPrefix = "run"

// newTrainerClient is the trainer client a run submits its episodes and
// reads its records through.
func newTrainerClient(nc *nats.Conn, subj messages.Subjects, opts Options) (*trainer.Client, error) {
	return trainer.New(nc, trainer.Options{
		Subjects: subj, AckWait: 30 * time.Second, MaxAckPending: 1024, ConsumerIdle: time.Hour,
		Streams: opts.Streams, Remote: opts.Remote, ConsumerPrefix: consumerPrefix, Logger: opts.Logger,
	})
}

// readKinds are the kinds of record a run reads: groups only when groups.
func readKinds(groups bool) []string {
	if groups {
		return []string{trainer.KindTrajectory, trainer.KindFailure, trainer.KindGroup}
	}
	return []string{trainer.KindTrajectory, trainer.KindFailure}
}

// readOutputs starts the consumers of a run's records on the output
// streams, delivering each to records; the caller acknowledges it once
// written. Group records are read only when groups is set. Stop them with
// the returned function.
func readOutputs(ctx context.Context, tc *trainer.Client, run string, groups bool, records chan<- record) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, kind := range readKinds(groups) {
		s, err := tc.Consume(ctx, run, kind, func(m jetstream.Msg) {
			select {
			case records <- record{kind: kind, msg: m}:
			case <-ctx.Done():
			}
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("fleet: %w", err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// endRun removes what a finished run leaves on the server: its consumers,
// which would otherwise linger until the server drops them as inactive, and
// its episodes' decisions, which would otherwise stay their hour. Nothing
// of the run is in flight any more; it is best effort (a user without the
// right to purge leaves the decisions to their max age).
func endRun(ctx context.Context, tc *trainer.Client, js jetstream.JetStream, subj messages.Subjects, run string, log *slog.Logger) {
	forgetConsumers(ctx, tc, js, subj, run, true, log)
	st, err := js.Stream(ctx, subj.StreamDecided())
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(subj.DecidedOfRun(run)))
	}
	if err == nil {
		// No other run's decisions left: the stream's blocks go too.
		_, err = bus.CompactIfEmpty(ctx, st, 0)
	}
	if err != nil {
		log.Debug("decisions of the finished run left to their max age", "run", run, "err", err)
	}
}

// forgetConsumers deletes the run's output consumers and, with episodes,
// its env worker's. What they delivered and nobody acknowledged stays in
// the work queues, for the next consumer. A consumer left behind only
// delays redelivery, and the server drops it after an hour unused.
func forgetConsumers(ctx context.Context, tc *trainer.Client, js jetstream.JetStream, subj messages.Subjects, run string, episodes bool, log *slog.Logger) {
	if err := tc.Forget(ctx, run); err != nil {
		log.Debug("consumers of the run left to the server", "run", run, "err", err)
	}
	if !episodes {
		return
	}
	name := envactor.ConsumerConfig(envactor.Options{Run: run}).Durable
	if err := js.DeleteConsumer(ctx, subj.StreamEpisodes(), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		log.Debug("consumer of the run left to the server", "stream", subj.StreamEpisodes(), "consumer", name, "err", err)
	}
}
