package trainer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// Result is one record of a batch, delivered and not yet acknowledged.
type Result[T any] struct {
	// Value is the record.
	Value *T
	// BatchID is the batch the record belongs to.
	BatchID string
	// Seq is the record's sequence number in its stream.
	Seq uint64
	// Deliveries counts the record's deliveries, 1 the first time.
	Deliveries uint64

	msg jetstream.Msg
	r   *reader
}

// Ack acknowledges the record, waiting for the server's confirmation: it is
// then gone from its stream and never delivered again. A record is
// delivered again when it is not acknowledged within Options.AckWait.
func (r *Result[T]) Ack(ctx context.Context) error {
	if err := r.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("trainer: ack %s record %d of batch %s: %w", r.r.src.kind, r.Seq, r.BatchID, err)
	}
	r.r.acked(r.Seq)
	return nil
}

// Nak hands the record back for delivery again at once.
func (r *Result[T]) Nak() error {
	if err := r.msg.Nak(); err != nil {
		return fmt.Errorf("trainer: nak %s record %d of batch %s: %w", r.r.src.kind, r.Seq, r.BatchID, err)
	}
	return nil
}

// Token is the record's acknowledgement token for Client.AckToken (the
// JetStream ack subject of this delivery): a process that was handed the
// record by another, over HTTP say, acknowledges it with the token.
func (r *Result[T]) Token() string { return r.msg.Reply() }

// Progress is how far a batch is, as one read of it saw it.
type Progress struct {
	// Done reports that the batch is complete for the read: every episode
	// decided and every record of the read's kind delivered.
	Done bool `json:"done"`
	// Episodes and Groups are the batch's, from its manifest.
	Episodes int `json:"episodes"`
	Groups   int `json:"groups"`
	// Decided counts the episodes known to be decided: Trajectories plus
	// Failures.
	Decided      int `json:"decided"`
	Trajectories int `json:"trajectories"`
	Failures     int `json:"failures"`
	// GroupsDelivered counts the groups delivered to a reader;
	// GroupsFailed those that cannot complete (a member failed).
	GroupsDelivered int `json:"groups_delivered"`
	GroupsFailed    int `json:"groups_failed"`
	// Delivered counts the records this read yielded.
	Delivered int `json:"delivered"`
}

// ReadOption changes how a read of results goes.
type ReadOption func(*readConfig)

type readConfig struct {
	max   int
	wait  time.Duration
	onEnd func(Progress)
}

// MaxResults ends the read after n results (n ≤ 0: no limit).
func MaxResults(n int) ReadOption { return func(c *readConfig) { c.max = n } }

// MaxWait ends the read after d, complete or not (d ≤ 0: no limit); a
// poll, for a caller that comes back for more.
func MaxWait(d time.Duration) ReadOption { return func(c *readConfig) { c.wait = d } }

// OnEnd is called with the batch's progress when the read ends without an
// error, by completion, MaxResults or MaxWait (Progress.Done tells which).
func OnEnd(f func(Progress)) ReadOption { return func(c *readConfig) { c.onEnd = f } }

// Groups iterates over a batch's groups as they are published, until every
// group that can complete has been delivered (see the package doc), ctx
// ends, or a ReadOption ends the read. It also reads the batch's trajectory
// records (each group carries its trajectories) and acknowledges them.
// An error ends the iteration; the caller acknowledges each result.
func (c *Client) Groups(ctx context.Context, batch string, opts ...ReadOption) iter.Seq2[*Result[messages.Group], error] {
	return read[messages.Group](ctx, c, batch, KindGroup, opts)
}

// Trajectories iterates over a batch's trajectories as they finish, until
// every episode is decided and every trajectory delivered (see Groups).
func (c *Client) Trajectories(ctx context.Context, batch string, opts ...ReadOption) iter.Seq2[*Result[messages.Trajectory], error] {
	return read[messages.Trajectory](ctx, c, batch, KindTrajectory, opts)
}

// Failures iterates over a batch's failure records, until every episode is
// decided and every failure record delivered (see Groups).
func (c *Client) Failures(ctx context.Context, batch string, opts ...ReadOption) iter.Seq2[*Result[messages.Failure], error] {
	return read[messages.Failure](ctx, c, batch, KindFailure, opts)
}

// fetchBatch is how many records one pull asks for.
const fetchBatch = 64

// read is the iterator of one kind of a batch's records.
func read[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, c *Client, batch, kind string, opts []ReadOption) iter.Seq2[*Result[T], error] {
	var cfg readConfig
	for _, o := range opts {
		o(&cfg)
	}
	return func(yield func(*Result[T], error) bool) {
		r, err := c.newReader(ctx, batch, kind)
		if err != nil {
			yield(nil, err)
			return
		}
		var deadline time.Time
		if cfg.wait > 0 {
			deadline = time.Now().Add(cfg.wait)
		}
		end := func(done bool) {
			if cfg.onEnd != nil {
				p := r.progress
				p.Done, p.Delivered = done, r.delivered
				cfg.onEnd(p)
			}
		}
		for {
			if err := ctx.Err(); err != nil {
				yield(nil, fmt.Errorf("trainer: read %ss of batch %s: %w", kind, batch, err))
				return
			}
			if cfg.max > 0 && r.delivered >= cfg.max {
				end(false)
				return
			}
			wait := c.opts.PollInterval
			if !deadline.IsZero() {
				left := time.Until(deadline)
				if left <= 0 {
					end(false)
					return
				}
				wait = min(wait, left)
			}
			if r.drain != nil {
				if err := r.drainTrajectories(ctx); err != nil {
					yield(nil, err)
					return
				}
			}
			n := fetchBatch
			if cfg.max > 0 {
				n = min(n, cfg.max-r.delivered)
			}
			got, stopped, err := fetchInto[T, P](ctx, r, n, max(wait, 100*time.Millisecond), yield)
			if err != nil {
				yield(nil, err)
				return
			}
			if stopped {
				return
			}
			if got > 0 {
				continue
			}
			done, err := r.complete(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			if done {
				end(true)
				return
			}
		}
	}
}

// fetchInto pulls up to n records and yields each as it arrives. When the
// caller stops, the records still arriving from the pull are handed back.
func fetchInto[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, r *reader, n int, wait time.Duration, yield func(*Result[T], error) bool) (got int, stopped bool, err error) {
	mb, err := r.cons.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		return 0, false, fmt.Errorf("trainer: read %ss of batch %s: %w", r.src.kind, r.batch, err)
	}
	for m := range mb.Messages() {
		if stopped {
			_ = m.Nak()
			continue
		}
		got++
		meta, err := m.Metadata()
		if err != nil {
			_ = m.Nak()
			continue
		}
		v, derr := messages.Decode[T, P](m.Data())
		if derr != nil {
			// Not a record this reader can hand out: it is taken off
			// the queue, and the caller told.
			_ = m.Term()
			if !yield(nil, fmt.Errorf("trainer: %s record %d of batch %s: %w", r.src.kind, meta.Sequence.Stream, r.batch, derr)) {
				stopped = true
			}
			continue
		}
		if err := r.mark(ctx, any(v), m); err != nil {
			_ = m.Nak()
			for m := range mb.Messages() {
				_ = m.Nak()
			}
			return got, false, err
		}
		r.handedOut(meta.Sequence.Stream)
		res := &Result[T]{Value: v, BatchID: r.batch, Seq: meta.Sequence.Stream, Deliveries: meta.NumDelivered, msg: m, r: r}
		if !yield(res, nil) {
			stopped = true
		}
	}
	if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && !stopped {
		return got, false, fmt.Errorf("trainer: read %ss of batch %s: %w", r.src.kind, r.batch, err)
	}
	return got, stopped, nil
}

// reader is the state of one read of a batch's records.
type reader struct {
	c     *Client
	batch string
	man   messages.BatchManifest
	src   source
	cons  jetstream.Consumer
	drain jetstream.Consumer // the trajectories, read along with groups

	mu  sync.Mutex
	out map[uint64]bool // stream sequences handed out and maybe not acknowledged

	delivered   int
	progress    Progress
	groupsSince time.Time // when all but groups was complete
}

func (c *Client) newReader(ctx context.Context, batch, kind string) (*reader, error) {
	man, err := c.Manifest(ctx, batch)
	if err != nil {
		return nil, err
	}
	r := &reader{c: c, batch: batch, man: man, src: c.source(batch, kind), out: map[uint64]bool{}}
	if r.cons, err = c.consumer(ctx, batch, kind); err != nil {
		return nil, err
	}
	if kind == KindGroup {
		if r.drain, err = c.consumer(ctx, batch, KindTrajectory); err != nil {
			return nil, err
		}
	}
	r.progress = Progress{Episodes: int(man.Episodes), Groups: int(man.Groups)}
	return r, nil
}

func (r *reader) handedOut(seq uint64) {
	r.mu.Lock()
	r.out[seq] = true
	r.delivered++
	r.mu.Unlock()
}

func (r *reader) acked(seq uint64) {
	r.mu.Lock()
	delete(r.out, seq)
	r.mu.Unlock()
}

// mark records on the batches stream that a record was received: its
// episode decided, or its group delivered.
func (r *reader) mark(ctx context.Context, v any, m jetstream.Msg) error {
	subj := r.c.subj
	var subject string
	switch v := v.(type) {
	case *messages.Group:
		subject = subj.BatchProgress(r.batch, markGroup, v.GroupID)
	case *messages.Trajectory:
		subject = subj.BatchProgress(r.batch, markTrajectory, v.EpisodeID)
	case *messages.Failure:
		if v.EpisodeID == "" {
			return nil // a record of a message, not of an episode
		}
		subject = subj.BatchProgress(r.batch, markFailure, v.GroupID, v.EpisodeID)
	default:
		return fmt.Errorf("trainer: cannot mark %T", v)
	}
	if err := bus.Publish(ctx, r.c.js, subject, nil, ""); err != nil {
		return fmt.Errorf("trainer: mark progress of batch %s: %w", r.batch, err)
	}
	return nil
}

// drainTrajectories marks and acknowledges every trajectory record of the
// batch waiting (a read of groups).
func (r *reader) drainTrajectories(ctx context.Context) error {
	for {
		mb, err := r.drain.FetchNoWait(fetchBatch)
		if err != nil {
			return fmt.Errorf("trainer: read trajectories of batch %s: %w", r.batch, err)
		}
		var msgs []jetstream.Msg
		var failed error
		for m := range mb.Messages() {
			if failed != nil {
				_ = m.Nak()
				continue
			}
			// The record's message id is not its episode id (it names the
			// run the outcome came from): the episode is read from the
			// record, without decoding its tokens.
			id := messages.PeekStrings(m.Data(), "id")["id"]
			if id == "" {
				_ = m.Term()
				r.c.log.Warn("trajectory record without an episode id dropped", "batch", r.batch)
				continue
			}
			if err := bus.Publish(ctx, r.c.js, r.c.subj.BatchProgress(r.batch, markTrajectory, id), nil, ""); err != nil {
				_ = m.Nak()
				failed = fmt.Errorf("trainer: mark progress of batch %s: %w", r.batch, err)
				continue
			}
			msgs = append(msgs, m)
		}
		if len(msgs) > 0 {
			if err := bus.AckBatch(ctx, msgs); err != nil {
				return fmt.Errorf("trainer: acknowledge trajectories of batch %s: %w", r.batch, err)
			}
		}
		if failed != nil {
			return failed
		}
		if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("trainer: read trajectories of batch %s: %w", r.batch, err)
		}
		if len(msgs) == 0 {
			return nil
		}
	}
}

// complete reports whether the read is over: the batch's episodes all
// decided and every record of the read's kind delivered, none waiting for
// redelivery but those this read handed out.
func (r *reader) complete(ctx context.Context) (bool, error) {
	// The order matters: marks first, then the records in the streams,
	// then the consumers, so that a record moving from one to the next
	// meanwhile is counted at most once, or not at all (and the batch looks
	// incomplete, until the next check).
	c := r.c
	bp, err := c.batchProgress(ctx, r.man)
	if err != nil {
		return false, err
	}
	own, err := r.cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("trainer: consumer %s: %w", r.src.consumer, err)
	}
	r.progress = bp.Progress
	if bp.Decided < int(r.man.Episodes) || own.NumPending > 0 {
		return false, nil
	}
	mine, err := r.stillOut(ctx)
	if err != nil {
		return false, err
	}
	if own.NumAckPending > mine {
		return false, nil // delivered elsewhere, and not acknowledged yet
	}
	if r.drain != nil {
		tr, err := r.drain.Info(ctx)
		if err != nil {
			return false, fmt.Errorf("trainer: consumer %s: %w", r.c.source(r.batch, KindTrajectory).consumer, err)
		}
		if tr.NumPending > 0 || tr.NumAckPending > 0 {
			return false, nil
		}
	}
	if r.src.kind != KindGroup {
		return true, nil
	}
	want := int(r.man.Groups) - bp.GroupsFailed
	if bp.GroupsDelivered >= want {
		return true, nil
	}
	// Every episode is decided: the missing groups are being published,
	// or were lost with a collector.
	if r.groupsSince.IsZero() {
		r.groupsSince = time.Now()
	}
	if time.Since(r.groupsSince) < c.opts.GroupWait {
		return false, nil
	}
	if bp.unknownGroupFailures > 0 && bp.GroupsDelivered >= want-bp.unknownGroupFailures {
		return true, nil // failures of unknown groups account for them
	}
	return false, fmt.Errorf("%w: %d of the %d groups of batch %s that can complete did not arrive within %v", ErrGroupsMissing, want-bp.GroupsDelivered, want, r.batch, c.opts.GroupWait)
}

// stillOut returns how many of the records this read handed out are still
// unacknowledged (in their stream: an acknowledged record of a work queue
// is gone).
func (r *reader) stillOut(ctx context.Context) (int, error) {
	r.mu.Lock()
	seqs := make([]uint64, 0, len(r.out))
	for s := range r.out {
		seqs = append(seqs, s)
	}
	r.mu.Unlock()
	if len(seqs) == 0 {
		return 0, nil
	}
	n := 0
	for _, s := range seqs {
		_, err := bus.LeaderGetMsg(ctx, r.c.js, r.src.stream, s, "")
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			r.acked(s)
		case err != nil:
			return 0, fmt.Errorf("trainer: stream %s: %w", r.src.stream, err)
		default:
			n++
		}
	}
	return n, nil
}

// batchProgress is what the marks and streams say of a batch.
type batchProgress struct {
	Progress
	unknownGroupFailures int
	// pending counts the records of each kind waiting in the streams
	// (undelivered, or delivered and not acknowledged).
	pending map[string]int
}

// batchProgress reads a batch's marks, its failure records still in their
// stream and its consumers' counts.
func (c *Client) batchProgress(ctx context.Context, man messages.BatchManifest) (batchProgress, error) {
	batch := man.BatchID
	bp := batchProgress{Progress: Progress{Episodes: int(man.Episodes), Groups: int(man.Groups)}, pending: map[string]int{}}
	st, err := c.js.Stream(ctx, c.subj.StreamBatches())
	if err != nil {
		return bp, fmt.Errorf("trainer: batches stream: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.subj.BatchProgressOf(batch)))
	if err != nil {
		return bp, fmt.Errorf("trainer: progress of batch %s: %w", batch, err)
	}
	trajs := map[string]bool{}
	fails := map[string]string{} // episode → group
	groups := map[string]bool{}
	prefix := strings.TrimSuffix(c.subj.BatchProgressOf(batch), ">")
	for subject := range info.State.Subjects {
		kind, keys, err := parseMark(strings.TrimPrefix(subject, prefix))
		if err != nil {
			continue
		}
		switch {
		case kind == markTrajectory && len(keys) == 1:
			trajs[keys[0]] = true
		case kind == markFailure && len(keys) == 2:
			fails[keys[1]] = keys[0]
		case kind == markGroup && len(keys) == 1:
			groups[keys[0]] = true
		}
	}
	// Failure records not delivered yet, or delivered and not acknowledged.
	if err := c.scanFailures(ctx, batch, fails); err != nil {
		return bp, err
	}
	for _, k := range kinds {
		src := c.source(batch, k)
		ci, err := c.js.Consumer(ctx, src.stream, src.consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return bp, fmt.Errorf("trainer: consumer %s: %w", src.consumer, err)
		}
		info := ci.CachedInfo()
		bp.pending[k] = int(info.NumPending) + info.NumAckPending
		if k == KindTrajectory {
			// Trajectories not delivered yet have no mark: the consumer
			// counts them, after the marks were read.
			bp.Trajectories += int(info.NumPending)
		}
	}
	failedGroups := map[string]bool{}
	for ep, g := range fails {
		if trajs[ep] {
			continue
		}
		bp.Failures++
		if g == "" {
			bp.unknownGroupFailures++
		} else {
			failedGroups[g] = true
		}
	}
	bp.Trajectories += len(trajs)
	bp.Decided = bp.Trajectories + bp.Failures
	bp.GroupsDelivered, bp.GroupsFailed = len(groups), len(failedGroups)
	return bp, nil
}

// parseMark splits a mark subject's tail, "<kind>.<token>…".
func parseMark(tail string) (kind string, keys []string, err error) {
	parts := strings.Split(tail, ".")
	for _, p := range parts[1:] {
		k, err := messages.ParseToken(p)
		if err != nil {
			return "", nil, err
		}
		keys = append(keys, k)
	}
	return parts[0], keys, nil
}

// scanFailures adds the failure records of a batch that are in their
// stream to fails (episode → group). They are few and small.
func (c *Client) scanFailures(ctx context.Context, batch string, fails map[string]string) error {
	filter := c.subj.FailuresOfRun(batch)
	for seq := uint64(1); ; {
		raw, err := bus.LeaderGetMsg(ctx, c.js, c.subj.StreamFailures(), seq, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("trainer: failure records of batch %s: %w", batch, err)
		}
		seq = raw.Sequence + 1
		f, err := messages.Decode[messages.Failure](raw.Data)
		if err != nil || f.EpisodeID == "" {
			continue
		}
		if _, ok := fails[f.EpisodeID]; !ok || fails[f.EpisodeID] == "" {
			fails[f.EpisodeID] = f.GroupID
		}
	}
}
