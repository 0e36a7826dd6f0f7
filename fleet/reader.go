package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// Kinds of output record a run reads.
const (
	kindTrajectory = "trajectory"
	kindFailure    = "failure"
	kindGroup      = "group"
)

// record is one output message of the run, acknowledged once written.
type record struct {
	kind string
	msg  jetstream.Msg
}

// ErrOutputTaken means another consumer already reads this run's records of
// some kind from its work-queue stream (a trainer's, say), so the run cannot.
var ErrOutputTaken = errors.New("fleet: another consumer reads these records")

// JetStream API error codes of a work-queue stream refusing a consumer
// whose subjects overlap another's.
const (
	jsWQMultipleUnfiltered = 10099
	jsWQNotUnique          = 10100
)

// consumerName names the run's consumer of one kind of record. Consumers
// unused for an hour are deleted by the server; what they had not
// acknowledged stays in the work queue for the next reader.
func consumerName(run, kind string) string { return "run-" + messages.NameToken(run) + "-" + kind }

// readOutputs starts the consumers of a run's records on the output
// streams, delivering each to records; the caller acknowledges it once
// written. Group records are read only when groups is set. Stop them with
// the returned function.
func readOutputs(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, run string, groups bool, records chan<- record, log *slog.Logger) (stop func(), err error) {
	type source struct{ kind, stream, filter string }
	sources := []source{
		{kindTrajectory, subj.StreamTrajectories(), subj.TrajectoriesOfRun(run)},
		{kindFailure, subj.StreamFailures(), subj.FailuresOfRun(run)},
	}
	if groups {
		sources = append(sources, source{kindGroup, subj.StreamGroups(), subj.GroupsOfRun(run)})
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, src := range sources {
		cons, err := js.CreateOrUpdateConsumer(ctx, src.stream, jetstream.ConsumerConfig{
			Durable: consumerName(run, src.kind), FilterSubject: src.filter,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
			MaxAckPending: 1024, InactiveThreshold: time.Hour,
		})
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsWQNotUnique || apiErr.ErrorCode == jsWQMultipleUnfiltered) {
			err = fmt.Errorf("%w: %s records of run %s in %s: %v", ErrOutputTaken, src.kind, run, src.stream, err)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("fleet: read %s: %w", src.stream, err)
		}
		kind := src.kind
		cc, err := cons.Consume(func(m jetstream.Msg) {
			select {
			case records <- record{kind: kind, msg: m}:
			case <-ctx.Done():
			}
		}, jetstream.PullMaxMessages(256), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.Debug("output consumer", "kind", kind, "err", err)
		}))
		if err != nil {
			stop()
			return nil, fmt.Errorf("fleet: read %s: %w", src.stream, err)
		}
		stops = append(stops, cc.Stop)
	}
	return stop, nil
}

// endRun removes what a finished run leaves on the server: its consumers,
// which would otherwise linger until the server drops them as inactive, and
// its episodes' decisions, which would otherwise stay their hour. Nothing
// of the run is in flight any more; it is best effort (a user without the
// right to purge leaves the decisions to their max age).
func endRun(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, run string, log *slog.Logger) {
	forgetConsumers(ctx, js, subj, run, true, log)
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
// the work queues, for the next consumer.
func forgetConsumers(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, run string, episodes bool, log *slog.Logger) {
	del := func(stream, name string) {
		// A consumer left behind only delays redelivery, and the server
		// drops it after an hour unused.
		if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			log.Debug("consumer of the run left to the server", "stream", stream, "consumer", name, "err", err)
		}
	}
	for kind, stream := range map[string]string{
		kindTrajectory: subj.StreamTrajectories(), kindFailure: subj.StreamFailures(), kindGroup: subj.StreamGroups(),
	} {
		del(stream, consumerName(run, kind))
	}
	if episodes {
		del(subj.StreamEpisodes(), envactor.ConsumerConfig(envactor.Options{Run: run}).Durable)
	}
}
