package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// StreamOptions configures the JetStream streams rollfleet creates.
type StreamOptions struct {
	// Replicas per stream: 1 for a single server, 3 on a cluster.
	Replicas int
	// StepsMaxAge bounds how long step events are kept (default 24h): long
	// enough to rebuild or resume any live episode, short enough not to grow
	// without bound.
	StepsMaxAge time.Duration
	// OutputMaxAge bounds how long a trajectory, group or failure record
	// waits for its reader (default 7 days). The output streams are work
	// queues: a record is gone once its reader acknowledges it, so in a
	// running job this age is never reached.
	OutputMaxAge time.Duration
	// DecidedMaxAge bounds how long an episode's decision is kept (default
	// 1h): any later step, redelivery or re-submission of a decided episode
	// within it is recognised. Decisions are small, one per episode; the
	// stream drops the oldest when it reaches MaxBytes.
	DecidedMaxAge time.Duration
	// DuplicateWindow is the publish dedup window (default 10 minutes).
	// The server keeps every message id it saw for as long, about 130 bytes
	// each.
	DuplicateWindow time.Duration
	// StepsDuplicateWindow is the steps stream's (default 1 minute). Steps
	// are by far the most messages, and a repeat of one is harmless: the
	// collector and a resuming env worker take each turn of a run once. A
	// minute covers a publish's own retries; at 4,000 turns/s a 10-minute
	// window would hold 2.4 million step ids, some 300 MB in the server.
	StepsDuplicateWindow time.Duration
	// MaxBytes bounds each stream's size (default 256 MiB each; the steps
	// stream, which holds every token of every live episode, 1 GiB). Each
	// stream holds only work not yet consumed (undecided episodes' steps,
	// outcomes not yet acknowledged by their reader), so the bounds limit
	// what may wait, not how long a job may run. A full stream refuses new
	// messages (DiscardNew, see ErrStreamFull): the publisher backs off and
	// retries, and nothing stored is silently dropped. -1 means unlimited.
	MaxBytes, StepsMaxBytes int64
	// Batches adds the batches stream, which only trainers use (their
	// batches' manifests and progress marks): trainer clients set it, and
	// the actors, which never read it, need no permission on it.
	Batches bool
}

func (o *StreamOptions) setDefaults() {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.StepsMaxAge == 0 {
		o.StepsMaxAge = 24 * time.Hour
	}
	if o.OutputMaxAge == 0 {
		o.OutputMaxAge = 7 * 24 * time.Hour
	}
	if o.DecidedMaxAge == 0 {
		o.DecidedMaxAge = time.Hour
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 10 * time.Minute
	}
	if o.StepsDuplicateWindow == 0 {
		o.StepsDuplicateWindow = time.Minute
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 256 << 20
	}
	if o.StepsMaxBytes == 0 {
		o.StepsMaxBytes = 1 << 30
	}
}

// StreamConfigs returns the configuration of every rollfleet stream (the
// batches stream with opts.Batches).
func StreamConfigs(subj messages.Subjects, opts StreamOptions) []jetstream.StreamConfig {
	opts.setDefaults()
	limits := func(name, subject string, age time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       name,
			Subjects:   []string{subject},
			Retention:  jetstream.LimitsPolicy,
			Storage:    jetstream.FileStorage,
			Replicas:   opts.Replicas,
			MaxAge:     age,
			MaxBytes:   opts.MaxBytes,
			Discard:    jetstream.DiscardNew,
			Duplicates: opts.DuplicateWindow,
		}
	}
	// A work queue: an acked episode is gone, an unacked one comes back to
	// another worker. Direct gets let "nats stream view" page the work
	// queues (a work queue refuses the viewer's consumer). Where rollfleet
	// must know whether a record is still stored (an acknowledged output
	// record gone, say) it asks the leader (LeaderGetMsg), never a direct
	// get that a lagging replica may answer.
	episodes := limits(subj.StreamEpisodes(), subj.EpisodesAll(), 0)
	episodes.Retention = jetstream.WorkQueuePolicy
	episodes.AllowDirect = true
	steps := limits(subj.StreamSteps(), subj.StepsAll(), opts.StepsMaxAge)
	steps.MaxBytes = opts.StepsMaxBytes
	steps.Duplicates = opts.StepsDuplicateWindow
	// Decisions: losing the oldest costs nothing but the recognition of a
	// very late repeat, so a full stream discards old ones rather than
	// refusing the collector.
	decided := limits(subj.StreamDecided(), subj.DecidedAll(), opts.DecidedMaxAge)
	decided.Discard = jetstream.DiscardOld
	// A repeated decision is refused by its expected last sequence (0)
	// however late it comes, and the collector reads the stored one: the
	// window only has to cover a publish's own retries.
	decided.Duplicates = opts.StepsDuplicateWindow
	// Outcomes are work queues too: a record is kept until its reader (the
	// trainer, or rollout run's writer) acknowledges it, and then freed, so
	// the streams hold what waits to be read, not everything ever made.
	output := func(name, subject string) jetstream.StreamConfig {
		cfg := limits(name, subject, opts.OutputMaxAge)
		cfg.Retention = jetstream.WorkQueuePolicy
		cfg.AllowDirect = true
		return cfg
	}
	// The policy state: the last announcements, kept however old (a
	// restarted worker must learn the current version at once), readable
	// by direct get from any server of a cluster.
	control := limits(subj.StreamControl(), subj.Control(), 0)
	control.Discard = jetstream.DiscardOld
	control.MaxMsgsPerSubject = ControlHistory
	control.AllowDirect = true
	control.Duplicates = opts.StepsDuplicateWindow
	// Trainers' batches: each batch's manifest and its readers' progress
	// marks, one message per subject (a mark made again counts once), kept
	// as long as the outcomes they describe may wait.
	batches := limits(subj.StreamBatches(), subj.BatchesAll(), opts.OutputMaxAge)
	batches.MaxMsgsPerSubject = 1
	cfgs := []jetstream.StreamConfig{
		episodes,
		steps,
		decided,
		output(subj.StreamTrajectories(), subj.TrajectoriesAll()),
		output(subj.StreamGroups(), subj.GroupsAll()),
		output(subj.StreamFailures(), subj.FailuresAll()),
		control,
	}
	if opts.Batches {
		cfgs = append(cfgs, batches)
	}
	return cfgs
}

// ControlHistory is how many policy states the control stream keeps: the
// current one and the recent ones before it, for people reading the log of
// pauses and versions.
const ControlHistory = 64

// EnsureStreams creates every rollfleet stream that does not exist yet.
// Every actor calls it at start, so any one of them can bring up an empty
// server. It changes an existing stream only to turn direct gets on or off
// as StreamConfigs has them (a stream made by an older rollfleet), nothing
// else: a worker started with other defaults must not, say, scale a
// cluster's three replicas down to one. A stream whose replicas or
// retention differ from opts, or whose direct gets could not be changed
// (a user not allowed to update streams), is reported, and the caller
// decides.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, opts StreamOptions) error {
	opts.setDefaults()
	var mismatched []string
	for _, cfg := range StreamConfigs(subj, opts) {
		st, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue // another process created it first
			}
			if err != nil {
				return fmt.Errorf("bus: create stream %s: %w", cfg.Name, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("bus: stream %s: %w", cfg.Name, err)
		}
		have := st.CachedInfo().Config
		if have.Replicas != cfg.Replicas {
			mismatched = append(mismatched, fmt.Sprintf("%s has %d replicas, not %d", cfg.Name, have.Replicas, cfg.Replicas))
		}
		if have.Retention != cfg.Retention {
			// Made by an older rollfleet: JetStream cannot change a
			// stream's retention, and a limits stream never frees what
			// its readers consumed.
			mismatched = append(mismatched, fmt.Sprintf("%s has %s retention, not %s (recreate it, or use a new data dir)", cfg.Name, have.Retention, cfg.Retention))
		}
		if have.AllowDirect != cfg.AllowDirect {
			have.AllowDirect = cfg.AllowDirect
			if _, err := js.UpdateStream(ctx, have); err != nil {
				mismatched = append(mismatched, fmt.Sprintf("%s: allow_direct not set to %v: %v", cfg.Name, cfg.AllowDirect, err))
			}
		}
	}
	if len(mismatched) > 0 {
		return fmt.Errorf("%w: %s", ErrStreamMismatch, strings.Join(mismatched, "; "))
	}
	return nil
}

// ErrStreamMismatch means a stream exists with another replica count or
// retention than asked for (an output stream made by an older rollfleet
// keeps every record instead of freeing what its reader acknowledged). The
// stream is left as it is.
var ErrStreamMismatch = errors.New("bus: existing stream differs from the requested configuration")

// CompactIfEmpty reclaims an emptied stream's disk: when the stream holds
// no message and has stored some since the sequence given, it purges
// everything below the next sequence, which is nothing, and returns the
// stream's last sequence (else it returns since). Why: messages removed by
// subject or one by one leave deleted bytes and tombstones in the file
// store's last block until that block fills, which a standing fleet idle
// between jobs would keep; a purge by sequence drops the block. It is safe
// when the stream is empty at the time of the check: a message stored
// after it has a higher sequence and is untouched, and no consumer has a
// delivery pending below it.
func CompactIfEmpty(ctx context.Context, st jetstream.Stream, since uint64) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return since, err
	}
	last := info.State.LastSeq
	if info.State.Msgs != 0 || last == since {
		return since, nil
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(last+1)); err != nil {
		return since, err
	}
	return last, nil
}

// JetStream API error codes of a work-queue stream refusing a consumer
// whose subjects overlap another's.
const (
	jsWQMultipleUnfiltered = 10099
	jsWQNotUnique          = 10100
)

// IsWorkQueueOverlap reports whether err is a work-queue stream's refusal
// of a consumer whose subjects overlap another consumer's: the messages it
// would read are another reader's already.
func IsWorkQueueOverlap(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jsWQNotUnique || apiErr.ErrorCode == jsWQMultipleUnfiltered)
}
