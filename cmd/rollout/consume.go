package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
)

// consumeCmd reads one kind of output record as a trainer does: a durable
// consumer on the work-queue stream, each record acknowledged (and so freed
// from the stream) once written.
type consumeCmd struct {
	Kind    string        `default:"groups" enum:"groups,trajectories,failures" help:"Records to read: groups, trajectories or failures."`
	RunID   string        `name:"run" help:"Read only this run's records (default: every run's)."`
	Durable string        `default:"trainer" help:"Durable consumer name: readers sharing it share the records."`
	Out     string        `help:"Write each record as a JSON line to this file ('-' for stdout); default: discard."`
	Every   time.Duration `default:"10s" help:"Print the count read so far this often (0: never)."`
	Drain   bool          `help:"With --kind groups: also take the same runs' trajectories off their stream unread (each group holds its trajectories), as consumer DURABLE-trajectories, deleted when consume stops; only where no other reader takes them (a work queue refuses a second consumer of the same records)."`
	cmdutil.Fleet
}

// Run reads until interrupted.
func (c *consumeCmd) Run() error {
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat)
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	m, stopMetrics, err := cmdutil.ServeMetrics(c.Metrics, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	nc, js, subj, err := c.Connect(ctx, "consume-"+c.Durable, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	m.WatchNATS(nc, js, subj)
	cons, decode, err := c.reader(ctx, js, subj, c.Kind, c.Durable, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "rollout consume: reading %s as %s\n", c.Kind, c.Durable)
	if c.Kind == "groups" && c.Drain {
		// A group holds its trajectories: left on their stream unread, they
		// would wait there until their max age.
		tname := c.Durable + "-trajectories"
		tcons, _, err := c.reader(ctx, js, subj, "trajectories", tname, time.Minute)
		if err != nil {
			return fmt.Errorf("%w (another reader takes these trajectories? then no --drain)", err)
		}
		// Deleted when consume stops, so that it never keeps a later reader
		// of these trajectories out (one that outlives a killed consume is
		// removed by its inactive threshold).
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := js.DeleteConsumer(dctx, subj.StreamTrajectories(), tname); err != nil {
				log.Warn("delete the trajectories consumer", "consumer", tname, "err", err)
			}
		}()
		dctx, cancel := context.WithCancel(ctx)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			if err := consume(dctx, tcons, nil, nil, 0, "trajectories", m.Reader("trajectories")); err != nil {
				log.Error("draining trajectories stopped", "err", err)
			}
		}()
		defer func() { cancel(); <-drained }()
	}
	var w *bufio.Writer
	switch c.Out {
	case "":
	case "-":
		w = bufio.NewWriter(os.Stdout)
	default:
		f, err := os.OpenFile(c.Out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		w = bufio.NewWriterSize(f, 1<<20)
	}
	return consume(ctx, cons, decode, w, c.Every, c.Kind, m.Reader(c.Kind))
}

// reader makes (or takes up again) the durable consumer of kind's records,
// of one run's with --run, and returns it with the records' decoder.
func (c *consumeCmd) reader(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, kind, durable string, inactive time.Duration) (jetstream.Consumer, func([]byte) (any, error), error) {
	stream, filter := subj.StreamGroups(), subj.GroupsAll()
	decode := func(b []byte) (any, error) { return messages.Decode[messages.Group](b) }
	switch kind {
	case "trajectories":
		stream, filter = subj.StreamTrajectories(), subj.TrajectoriesAll()
		decode = func(b []byte) (any, error) { return messages.Decode[messages.Trajectory](b) }
	case "failures":
		stream, filter = subj.StreamFailures(), subj.FailuresAll()
		decode = func(b []byte) (any, error) { return messages.Decode[messages.Failure](b) }
	}
	if c.RunID != "" {
		filter = map[string]string{
			"groups": subj.GroupsOfRun(c.RunID), "trajectories": subj.TrajectoriesOfRun(c.RunID), "failures": subj.FailuresOfRun(c.RunID),
		}[kind]
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024,
		InactiveThreshold: inactive,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	}
	return cons, decode, nil
}

// consume fetches records in batches, writes them, flushes and then
// acknowledges them, until ctx ends; counts feeds the metrics (nil: none).
func consume(ctx context.Context, cons jetstream.Consumer, decode func([]byte) (any, error), w *bufio.Writer, every time.Duration, kind string, counts *metrics.Reader) error {
	var n, last int
	lastPrint := time.Now()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			if w != nil {
				v, err := decode(m.Data())
				if err == nil {
					err = fleet.WriteRecord(w, v)
				}
				if err != nil {
					counts.Malformed()
					fmt.Fprintf(os.Stderr, "rollout consume: %s: %v\n", m.Subject(), err)
				}
			}
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "rollout consume: fetch: %v\n", err)
		}
		if w != nil {
			if err := w.Flush(); err != nil {
				return err
			}
		}
		if err := bus.AckBatch(ctx, msgs); err != nil {
			if ctx.Err() == nil {
				// The records come again after the ack wait.
				fmt.Fprintf(os.Stderr, "rollout consume: %v\n", err)
			}
		} else {
			counts.Read(len(msgs))
		}
		n += len(msgs)
		if every > 0 && time.Since(lastPrint) >= every && n != last {
			fmt.Fprintf(os.Stderr, "%s read: %d\n", kind, n)
			last, lastPrint = n, time.Now()
		}
	}
	fmt.Fprintf(os.Stderr, "%s read: %d\n", kind, n)
	return nil
}
