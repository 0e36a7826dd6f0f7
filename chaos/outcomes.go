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

	"github.com/rollfleet/rollfleet/messages"
)

// record is one message of the trajectories or failures stream, as the
// harness's own decoder reads it.
type record struct {
	stream string
	seq    uint64
	stored time.Time
	traj   *Trajectory
	fail   *Failure
	bad    error // the message did not decode
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

// outcomes reads the trajectories and failures streams incrementally, with
// ordered consumers of the harness's own, and indexes the records by episode
// id. Only the goroutine running Run uses it.
type outcomes struct {
	h       *harness
	ours    map[string]bool
	order   []string // our ids in submission order
	next    map[string]uint64
	records []*record
	byID    map[string][]*record
}

func newOutcomes(h *harness, reqs []*messages.EpisodeRequest) *outcomes {
	o := &outcomes{h: h, ours: make(map[string]bool, len(reqs)), next: map[string]uint64{}, byID: map[string][]*record{}}
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

// poll reads every record stored since the last poll.
func (o *outcomes) poll(ctx context.Context) error {
	for _, stream := range []string{o.h.subj.StreamTrajectories(), o.h.subj.StreamFailures()} {
		from := max(o.next[stream], 1)
		next, err := readStream(ctx, o.h.js, stream, from, func(seq uint64, ts time.Time, data []byte, _ nats.Header) {
			r := &record{stream: stream, seq: seq, stored: ts}
			if stream == o.h.subj.StreamTrajectories() {
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
		})
		o.next[stream] = next
		if err != nil {
			return err
		}
	}
	return nil
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
		m, err := st.GetMsg(ctx, seq)
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
