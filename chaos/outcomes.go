package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/messages"
)

// record is one message of the trajectories or failures stream, as the
// harness's own decoder reads it.
type record struct {
	stream  string
	seq     uint64
	subject string
	stored  time.Time
	traj    *Trajectory
	fail    *Failure
	bad     error // the message did not decode
}

// episodeID is the episode the record belongs to ("" if none).
func (r *record) episodeID() string {
	switch {
	case r.traj != nil:
		return r.traj.EpisodeID
	case r.fail != nil:
		return r.fail.EpisodeID
	}
	return ""
}

// groupRecord is one message of the groups stream.
type groupRecord struct {
	seq     uint64
	subject string
	group   *Group
	bad     error // the message did not decode
}

// Consumers of the output streams, the harness's own: it reads them as a
// trainer does.
const (
	readerTrajectories = "chaos-trajectories"
	readerFailures     = "chaos-failures"
	readerGroups       = "chaos-groups"
)

// readerAckWait is how long a record the harness took but whose
// acknowledgement was lost (a server restart) waits before it comes again.
const readerAckWait = 10 * time.Second

// outcomes reads the trajectories, failures and groups streams as the
// trainer does: through durable pull consumers of the harness's own, each
// record acknowledged once recorded here, whereupon the stream (a work
// queue) frees it. Reading the groups matters too: a groups stream nobody
// reads fills and holds up the collector. A record delivered again (its
// acknowledgement lost to a server restart) is recorded once, by its
// stream sequence. It indexes the records by episode id. Only the
// goroutine running Run uses it.
type outcomes struct {
	h *harness
	// run and subj name the subjects the fleet must publish our episodes'
	// outcomes on.
	run     string
	subj    messages.Subjects
	ours    map[string]bool
	order   []string // our ids in submission order
	records []*record
	byID    map[string][]*record
	groups  []*groupRecord
	seen    map[string]map[uint64]bool    // by stream: the sequences recorded
	readers map[string]jetstream.Consumer // by stream
}

func newOutcomes(h *harness, reqs []*messages.EpisodeRequest) *outcomes {
	o := &outcomes{h: h, run: h.runID, subj: h.subj, ours: make(map[string]bool, len(reqs)), byID: map[string][]*record{},
		seen: map[string]map[uint64]bool{}, readers: map[string]jetstream.Consumer{}}
	for _, r := range reqs {
		o.ours[r.EpisodeID] = true
		o.order = append(o.order, r.EpisodeID)
	}
	return o
}

// decided counts our episodes that have at least one outcome record.
func (o *outcomes) decided() int {
	n := 0
	for id := range o.byID {
		if o.ours[id] {
			n++
		}
	}
	return n
}

// sources are the output streams with the names of the harness's
// consumers.
func (o *outcomes) sources() []struct{ stream, durable string } {
	return []struct{ stream, durable string }{
		{o.subj.StreamTrajectories(), readerTrajectories},
		{o.subj.StreamFailures(), readerFailures},
		{o.subj.StreamGroups(), readerGroups},
	}
}

// reader returns the harness's consumer of stream, creating it the first
// time (every run's records: nothing else reads on the harness's server).
func (o *outcomes) reader(ctx context.Context, stream, durable string) (jetstream.Consumer, error) {
	if c := o.readers[stream]; c != nil {
		return c, nil
	}
	c, err := o.h.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: readerAckWait, MaxAckPending: 4096,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	}
	o.readers[stream] = c
	return c, nil
}

// poll takes every record the output streams deliver now, recording and
// acknowledging each.
func (o *outcomes) poll(ctx context.Context) error {
	for _, src := range o.sources() {
		cons, err := o.reader(ctx, src.stream, src.durable)
		if err != nil {
			return err
		}
		for {
			batch, err := cons.FetchNoWait(1000)
			if err != nil {
				delete(o.readers, src.stream) // looked up again next time
				return fmt.Errorf("stream %s: %w", src.stream, err)
			}
			n := 0
			for m := range batch.Messages() {
				n++
				if err := o.take(ctx, src.stream, m); err != nil {
					return err
				}
			}
			if err := batch.Error(); err != nil {
				delete(o.readers, src.stream)
				return fmt.Errorf("stream %s: %w", src.stream, err)
			}
			if n == 0 {
				break
			}
		}
	}
	return nil
}

// take records a delivered record, unless it recorded it already, and
// acknowledges it. A lost acknowledgement only brings the record again.
func (o *outcomes) take(ctx context.Context, stream string, m jetstream.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	seq := meta.Sequence.Stream
	if o.seen[stream] == nil {
		o.seen[stream] = map[uint64]bool{}
	}
	if !o.seen[stream][seq] {
		o.seen[stream][seq] = true
		o.add(stream, seq, m.Subject(), meta.Timestamp, m.Data())
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = m.DoubleAck(actx)
	cancel()
	return nil
}

// add records one message of an output stream.
func (o *outcomes) add(stream string, seq uint64, subject string, ts time.Time, data []byte) {
	if stream == o.subj.StreamGroups() {
		g := &groupRecord{seq: seq, subject: subject}
		if g.group, g.bad = DecodeGroup(data); g.bad != nil {
			g.group = nil
		}
		o.groups = append(o.groups, g)
		return
	}
	r := &record{stream: stream, seq: seq, subject: subject, stored: ts}
	if stream == o.subj.StreamTrajectories() {
		r.traj, r.bad = DecodeTrajectory(data)
	} else {
		r.fail, r.bad = DecodeFailure(data)
	}
	if r.bad != nil {
		r.traj, r.fail = nil, nil
	}
	o.records = append(o.records, r)
	id := r.episodeID()
	o.byID[id] = append(o.byID[id], r)
}

// drain takes the records until the harness's consumers have none left to
// deliver and none unacknowledged, or ctx ends.
func (o *outcomes) drain(ctx context.Context) error {
	for {
		err := o.poll(ctx)
		if err == nil {
			var left []string
			for _, src := range o.sources() {
				cons, ierr := o.reader(ctx, src.stream, src.durable)
				if ierr != nil {
					err = ierr
					break
				}
				info, ierr := cons.Info(ctx)
				if ierr != nil {
					err = ierr
					break
				}
				if info.NumPending+uint64(info.NumAckPending) > 0 {
					left = append(left, fmt.Sprintf("%s: %d pending, %d unacknowledged", src.stream, info.NumPending, info.NumAckPending))
				}
			}
			if err == nil && len(left) == 0 {
				return nil
			}
			if err == nil {
				err = errors.New(strings.Join(left, "; "))
			}
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("outcome records not all read: %w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// unread counts the records left in the output streams. Once the harness
// has drained its consumers, every record is acknowledged and freed.
func (o *outcomes) unread(ctx context.Context) (map[string]uint64, error) {
	left := map[string]uint64{}
	for _, src := range o.sources() {
		st, err := o.h.js.Stream(ctx, src.stream)
		if err != nil {
			return nil, err
		}
		if n := st.CachedInfo().State.Msgs; n > 0 {
			left[src.stream] = n
		}
	}
	return left, nil
}

// readStream hands fn every message of a stream (its sequence, store time,
// data and headers) from sequence from up to the stream's last sequence when
// it is called, in order, and returns the sequence to continue from. It
// reads with an ordered consumer of its own.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, from uint64, fn func(seq uint64, ts time.Time, data []byte, hdr nats.Header)) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return from, fmt.Errorf("stream %s: %w", stream, err)
	}
	state := st.CachedInfo().State
	if state.LastSeq < from || state.Msgs == 0 {
		return from, nil
	}
	from = max(from, state.FirstSeq)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
	})
	if err != nil {
		return from, fmt.Errorf("stream %s: %w", stream, err)
	}
	for from <= state.LastSeq {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return from, fmt.Errorf("stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return from, fmt.Errorf("stream %s: %w", stream, err)
			}
			if meta.Sequence.Stream >= from {
				fn(meta.Sequence.Stream, meta.Timestamp, m.Data(), m.Headers())
				from = meta.Sequence.Stream + 1
			}
			n++
		}
		if err := batch.Error(); err != nil {
			return from, fmt.Errorf("stream %s: %w", stream, err)
		}
		if n == 0 {
			return from, fmt.Errorf("stream %s: no message from sequence %d although the last is %d", stream, from, state.LastSeq)
		}
	}
	return from, nil
}

// leftover lists the episode requests still in the episodes work queue
// (their message ids, with stream sequence and store time). Once the fleet
// is idle, a request left there was never acknowledged and will not be
// delivered again: JetStream gave up on it after MaxDeliver deliveries.
func leftover(ctx context.Context, h *harness) (map[string]time.Time, error) {
	st, err := h.js.Stream(ctx, h.subj.StreamEpisodes())
	if err != nil {
		return nil, err
	}
	state := st.CachedInfo().State
	left := map[string]time.Time{}
	if state.Msgs == 0 {
		return left, nil
	}
	for seq := state.FirstSeq; seq <= state.LastSeq; seq++ {
		m, err := bus.LeaderGetMsg(ctx, h.js, h.subj.StreamEpisodes(), seq, "")
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return left, err
		}
		left[m.Header.Get(jetstream.MsgIDHeader)] = m.Time
	}
	return left, nil
}

// maxDeliveries is JetStream's advisory that a message has been delivered
// as often as its consumer allows.
type maxDeliveries struct {
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	Time       time.Time `json:"timestamp"`
}

// advisories collects JetStream's max-deliveries advisories for the
// episodes stream; the subscription's goroutine and Run share it.
type advisories struct {
	mu   sync.Mutex
	seen []maxDeliveries
}

func (a *advisories) subscribe(h *harness) (*nats.Subscription, error) {
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + h.subj.StreamEpisodes() + ".>"
	return h.nc.Subscribe(subject, func(m *nats.Msg) {
		var adv maxDeliveries
		if json.Unmarshal(m.Data, &adv) != nil {
			return
		}
		a.mu.Lock()
		a.seen = append(a.seen, adv)
		a.mu.Unlock()
	})
}

func (a *advisories) list() []maxDeliveries {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// decisionHeader and decisionRunHeader are the headers of a collector's
// decision of an episode (a message without a body on its decided subject).
const (
	decisionHeader    = "Rf-Outcome"
	decisionRunHeader = "Rf-Run"
)

// decisions reads every decision the collectors stored: "<kind> for run
// <run>" by episode.
func decisions(ctx context.Context, h *harness) (map[string]string, error) {
	out := map[string]string{}
	_, err := readStream(ctx, h.js, h.subj.StreamDecided(), 1, func(_ uint64, _ time.Time, _ []byte, hdr nats.Header) {
		// The message id is "<episode>/<run>".
		run := hdr.Get(decisionRunHeader)
		if id, ok := strings.CutSuffix(hdr.Get(jetstream.MsgIDHeader), "/"+run); ok && id != "" {
			out[id] = hdr.Get(decisionHeader) + " for run " + run
		}
	})
	return out, err
}
