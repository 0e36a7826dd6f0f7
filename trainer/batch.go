package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// Kinds of a batch's records, as they name its consumers.
const (
	KindGroup      = "group"
	KindTrajectory = "trajectory"
	KindFailure    = "failure"
)

// Kinds of progress marks (see messages.Subjects.BatchProgress).
const (
	markTrajectory = "t" // keys: episode
	markFailure    = "f" // keys: group (empty when unknown), episode
	markGroup      = "g" // keys: group
)

// ConsumerName names a batch's consumer of one kind of record, as a client
// with the default Options.ConsumerPrefix does: "batch-<id>-<kind>".
func ConsumerName(batch, kind string) string { return consumerName("batch", batch, kind) }

func consumerName(prefix, batch, kind string) string {
	return prefix + "-" + messages.NameToken(batch) + "-" + kind
}

// source is where a batch's records of one kind are.
type source struct {
	kind, stream, filter, consumer string
}

func (c *Client) source(batch, kind string) source {
	s := source{kind: kind, consumer: consumerName(c.opts.ConsumerPrefix, batch, kind)}
	switch kind {
	case KindGroup:
		s.stream, s.filter = c.subj.StreamGroups(), c.subj.GroupsOfRun(batch)
	case KindTrajectory:
		s.stream, s.filter = c.subj.StreamTrajectories(), c.subj.TrajectoriesOfRun(batch)
	default:
		s.stream, s.filter = c.subj.StreamFailures(), c.subj.FailuresOfRun(batch)
	}
	return s
}

var kinds = []string{KindGroup, KindTrajectory, KindFailure}

// consumer makes (or updates) a batch's consumer of one kind.
func (c *Client) consumer(ctx context.Context, batch, kind string) (jetstream.Consumer, error) {
	src := c.source(batch, kind)
	cons, err := c.js.CreateOrUpdateConsumer(ctx, src.stream, jetstream.ConsumerConfig{
		Durable: src.consumer, FilterSubject: src.filter,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.opts.AckWait, MaxDeliver: -1,
		MaxAckPending: c.opts.MaxAckPending, InactiveThreshold: c.opts.ConsumerIdle,
	})
	if bus.IsWorkQueueOverlap(err) {
		return nil, fmt.Errorf("%w: %s records of batch %s in %s: %v", ErrOutputTaken, kind, batch, src.stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("trainer: consumer %s: %w", src.consumer, err)
	}
	return cons, nil
}

// ensureConsumers makes a batch's three consumers, before its episodes are
// submitted: the counts of records not yet delivered are then theirs.
func (c *Client) ensureConsumers(ctx context.Context, batch string) error {
	for _, k := range kinds {
		if _, err := c.consumer(ctx, batch, k); err != nil {
			return err
		}
	}
	return nil
}

// Consume delivers a batch's records of one kind to deliver as they come,
// on the batch's durable consumer (made if missing), until stop is called;
// deliver acknowledges each record once it has kept it, and one it does
// not is delivered again after Options.AckWait. It is the reader under
// rollout run, which keeps its own account of a job: unlike Groups,
// Trajectories and Failures it marks nothing and never ends by itself.
func (c *Client) Consume(ctx context.Context, batch, kind string, deliver func(jetstream.Msg)) (stop func(), err error) {
	if !slices.Contains(kinds, kind) {
		return nil, fmt.Errorf("trainer: no record kind %q", kind)
	}
	cons, err := c.consumer(ctx, batch, kind)
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(deliver, jetstream.PullMaxMessages(256), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.log.Debug("batch consumer", "batch", batch, "kind", kind, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("trainer: read %s records of batch %s: %w", kind, batch, err)
	}
	return cc.Stop, nil
}

// Forget deletes a batch's consumers and leaves everything else of it
// where it is: a record nobody
// acknowledged goes to the next consumer of its stream. rollout run forgets
// an interrupted job's consumers before it resumes it, so that what they
// had delivered comes again at once rather than after the ack wait. See
// Close for removing the records too.
func (c *Client) Forget(ctx context.Context, batch string) error {
	var errs []error
	for _, k := range kinds {
		src := c.source(batch, k)
		if err := c.js.DeleteConsumer(ctx, src.stream, src.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete consumer %s: %w", src.consumer, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trainer: forget batch %s: %w", batch, err)
	}
	return nil
}

// Manifest reads a batch's manifest (ErrUnknownBatch when none is stored).
func (c *Client) Manifest(ctx context.Context, batch string) (messages.BatchManifest, error) {
	st, err := c.js.Stream(ctx, c.subj.StreamBatches())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return messages.BatchManifest{}, fmt.Errorf("%w: %s (no batches stream)", ErrUnknownBatch, batch)
	}
	if err != nil {
		return messages.BatchManifest{}, fmt.Errorf("trainer: batches stream: %w", err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, c.subj.Batch(batch))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return messages.BatchManifest{}, fmt.Errorf("%w: %s", ErrUnknownBatch, batch)
	}
	if err != nil {
		return messages.BatchManifest{}, fmt.Errorf("trainer: manifest of batch %s: %w", batch, err)
	}
	m, err := messages.Decode[messages.BatchManifest](raw.Data)
	if err != nil {
		return messages.BatchManifest{}, fmt.Errorf("trainer: manifest of batch %s: %w", batch, err)
	}
	return *m, nil
}

// Batches lists the manifests of every batch kept (submitted and not
// closed, within the streams' max age), oldest first.
func (c *Client) Batches(ctx context.Context) ([]messages.BatchManifest, error) {
	st, err := c.js.Stream(ctx, c.subj.StreamBatches())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("trainer: batches stream: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.subj.BatchManifests()))
	if err != nil {
		return nil, fmt.Errorf("trainer: batches stream: %w", err)
	}
	var out []messages.BatchManifest
	for subject := range info.State.Subjects {
		id, err := messages.ParseToken(strings.TrimPrefix(subject, strings.TrimSuffix(c.subj.BatchManifests(), "*")))
		if err != nil {
			continue
		}
		m, err := c.Manifest(ctx, id)
		if errors.Is(err, ErrUnknownBatch) {
			continue // closed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sortManifests(out)
	return out, nil
}

func sortManifests(ms []messages.BatchManifest) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && (ms[j].SubmitTime < ms[j-1].SubmitTime || ms[j].SubmitTime == ms[j-1].SubmitTime && ms[j].BatchID < ms[j-1].BatchID); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// Close removes what is left of a batch once the trainer is done with it:
// its consumers, its episodes not yet played, its records nobody
// acknowledged (groups when the trainer read trajectories, failure records
// it did not read), its episodes' decisions, and its manifest and marks.
// An episode being played when the batch is closed still ends as a record,
// which waits in its stream for the streams' max age. Closing a closed
// batch does nothing.
func (c *Client) Close(ctx context.Context, batch string) error {
	var errs []error
	if err := c.Forget(ctx, batch); err != nil {
		errs = append(errs, err)
	}
	purge := func(stream, filter string) {
		st, err := c.js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return
		}
		if err == nil {
			err = st.Purge(ctx, jetstream.WithPurgeSubject(filter))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("purge %s of %s: %w", filter, stream, err))
		}
	}
	purge(c.subj.StreamEpisodes(), c.subj.EpisodesOfRun(batch))
	for _, k := range kinds {
		src := c.source(batch, k)
		purge(src.stream, src.filter)
	}
	purge(c.subj.StreamDecided(), c.subj.DecidedOfRun(batch))
	purge(c.subj.StreamBatches(), c.subj.BatchProgressOf(batch))
	purge(c.subj.StreamBatches(), c.subj.Batch(batch))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trainer: close batch %s: %w", batch, err)
	}
	c.log.Info("batch closed", "batch", batch)
	return nil
}
