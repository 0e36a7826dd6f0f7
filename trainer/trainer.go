// Package trainer is the Go client of a trainer driving a rollfleet fleet:
// it submits batches of episodes, reads their outcomes (groups,
// trajectories, failure records) as they finish, acknowledging each, and
// pauses and resumes the fleet around weight updates.
//
// # Batches
//
// Submit publishes a batch's episodes to the episodes work queue with the
// batch id as their run id, and stores the batch's manifest (episodes,
// groups, n, submit version) on the batches stream, so that a trainer
// restarted mid-batch knows what to expect. Submitting the same batch again
// (same id, same episodes) is harmless: every episode has a message id,
// and JetStream stores each once within its duplicate window.
//
// # Results
//
// Groups, Trajectories and Failures read a batch's records through durable
// explicit-ack pull consumers, one per batch and kind ("batch-<id>-group",
// …), made by Submit. Each Result must be acknowledged (Result.Ack, or
// Client.AckToken with Result.Token): an acknowledged record is gone from
// its work queue, and one that is not is delivered again once the ack wait
// (Options.AckWait) has passed, to this reader or a later one. A trainer
// that crashes and starts again therefore gets every record it had not
// acknowledged, and none that it had.
//
// Every reader marks each record it receives on the batches stream
// (BatchProgress subjects: one per episode decided, one per group
// delivered), and a read ends when the batch is complete: every episode
// decided (a trajectory or a failure record), every record of the read's
// kind delivered, and — for Groups — every group that can complete
// delivered (a group with a failed member is never published). A record
// delivered to a reader that stopped without acknowledging it is waited
// for: it comes back after the ack wait.
//
// Groups also reads the batch's trajectory records, marks and acknowledges
// them: a group carries its trajectories, and the trajectories of a group
// that cannot complete are dropped. Read a batch's groups or its
// trajectories, not both at once. Close removes what is left of a batch
// (its consumers, records nobody read, its marks and manifest) once the
// trainer is done with it.
//
// # rollout run
//
// rollout run submits its jobs and reads their records through this
// package: an unlisted batch (Batch.Unlisted) made one episode at a time
// from a jobs.Plan, paced by a window over the episodes decided
// (Batch.Window, Batch.Decided), read with Consume.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// Sentinel errors. Errors returned by the client wrap them where they apply.
var (
	// ErrBadBatch means a batch was refused before anything was submitted:
	// an invalid spec or request. The message names the field.
	ErrBadBatch = errors.New("trainer: bad batch")
	// ErrUnknownBatch means no manifest of the batch is stored: it was never
	// submitted, it was closed, or its manifest aged out.
	ErrUnknownBatch = errors.New("trainer: unknown batch")
	// ErrBatchExists means a batch id is taken by a batch of other episodes.
	ErrBatchExists = errors.New("trainer: batch id already used by another batch")
	// ErrOutputTaken means another consumer already reads the batch's
	// records of some kind (a durable consumer on every run's records).
	ErrOutputTaken = errors.New("trainer: another consumer reads these records")
	// ErrBadAckToken means an acknowledgement token is not the ack subject
	// of a record of the batch.
	ErrBadAckToken = errors.New("trainer: bad ack token")
	// ErrGroupsMissing means every episode of a batch was decided and every
	// record delivered, but some groups that could complete did not arrive
	// within Options.GroupWait (a collector restarted while it held them).
	// Their trajectories were delivered and acknowledged by the read.
	ErrGroupsMissing = errors.New("trainer: groups missing")
)

// Defaults of Options.
const (
	DefaultAckWait       = 60 * time.Second
	DefaultPollInterval  = 200 * time.Millisecond
	DefaultGroupWait     = 2 * time.Minute
	DefaultMaxAckPending = 1024
	// DefaultConsumerIdle is how long a batch's consumers may go unused
	// before the server deletes them (their records stay).
	DefaultConsumerIdle = 7 * 24 * time.Hour
)

// Options configures a Client. Zero values take the defaults noted.
type Options struct {
	// Subjects names the fleet's subjects (default prefix "rf").
	Subjects messages.Subjects
	// AckWait is how long a delivered record waits for its acknowledgement
	// before it is delivered again (default DefaultAckWait). It is the
	// consumers' setting, applied when a batch is submitted or read.
	AckWait time.Duration
	// PollInterval is how long a read waits for new records before it
	// checks whether the batch is complete (default DefaultPollInterval).
	PollInterval time.Duration
	// GroupWait bounds how long a read of groups waits for groups that
	// should come once every episode is decided (default DefaultGroupWait).
	GroupWait time.Duration
	// MaxAckPending bounds the records of one batch and kind delivered and
	// not yet acknowledged (default DefaultMaxAckPending).
	MaxAckPending int
	// ConsumerIdle is how long a batch's consumers may stay unused before
	// the server deletes them (default DefaultConsumerIdle).
	ConsumerIdle time.Duration
	// Streams configures the streams, when Submit creates them.
	Streams bus.StreamOptions
	// Remote lists the envs the fleet hosts over HTTP, which batches may
	// name besides the registered envs.
	Remote []remoteenv.Config
	// ConsumerPrefix begins the names of the batches' consumers,
	// "<prefix>-<batch>-<kind>" (default "batch"; rollout run's are "run",
	// which tells its jobs from a trainer's batches in rollout status).
	ConsumerPrefix string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.GroupWait <= 0 {
		o.GroupWait = DefaultGroupWait
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.ConsumerIdle <= 0 {
		o.ConsumerIdle = DefaultConsumerIdle
	}
	if o.ConsumerPrefix == "" {
		o.ConsumerPrefix = "batch"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Client is a trainer's handle on a fleet. Its methods are safe for
// concurrent use.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj messages.Subjects
	ctl  *control.Client
	opts Options
	log  *slog.Logger
}

// New returns a client on nc, which the caller keeps and closes.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	if nc == nil {
		return nil, errors.New("trainer: no connection")
	}
	opts.setDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("trainer: jetstream: %w", err)
	}
	ctl, err := control.NewClient(nc, opts.Subjects)
	if err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return &Client{nc: nc, js: js, subj: opts.Subjects, ctl: ctl, opts: opts, log: opts.Logger}, nil
}

// State reads the fleet's policy state.
func (c *Client) State(ctx context.Context) (messages.PolicyState, error) {
	st, err := c.ctl.State(ctx)
	if err != nil {
		return st, fmt.Errorf("trainer: %w", err)
	}
	return st, nil
}

// Pause holds every new generation and returns once no LLM worker runs one:
// the weights can be swapped. onPause is messages.OnPauseFinish (empty means
// it: running generations end) or messages.OnPauseAbort (they are cancelled
// and generated again after the resume). See control.Client.Pause.
func (c *Client) Pause(ctx context.Context, onPause string) (messages.PolicyState, error) {
	st, err := c.ctl.Pause(ctx, onPause)
	if err != nil {
		return st, fmt.Errorf("trainer: pause: %w", err)
	}
	return st, nil
}

// Resume lets generation go on under policy version, which may not be
// older than the fleet's (control.ErrVersionBackwards).
func (c *Client) Resume(ctx context.Context, version int64) (messages.PolicyState, error) {
	st, err := c.ctl.Resume(ctx, version)
	if err != nil {
		return st, fmt.Errorf("trainer: resume: %w", err)
	}
	return st, nil
}

// Workers asks every worker of the fleet for its status.
func (c *Client) Workers(ctx context.Context) ([]messages.WorkerStatus, error) {
	ws, err := c.ctl.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("trainer: workers: %w", err)
	}
	return ws, nil
}
