package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// ledger folds the policy states the control stream stored, in stream
// order, into the state the fleet applies. Only stored states count: a
// publish the stream refused (a wrong expected sequence, a repeated message
// id) reaches the subject's subscribers but is never read here. A stored
// state whose version is lower than the applied one's is refused, so
// versions never move backwards, whoever stores them; every watcher and
// client applies the same rule to the same sequence, and so ends on the
// same state. The epoch inside a state is only its payload: the order is
// the stream's.
//
// A ledger is not safe for concurrent use.
type ledger struct {
	subj   messages.Subjects
	log    *slog.Logger
	stream jetstream.Stream // looked up at the first read, and again after an error

	state messages.PolicyState // applied
	seq   uint64               // the stream sequence of state, 0 for the initial state
	read  uint64               // the last stream sequence read
	epoch uint64               // the highest epoch read, refused or not

	// When the messages at seq and read were stored: another message at
	// the same sequence means the stream was made anew.
	takenAt, readAt time.Time
}

func newLedger(subj messages.Subjects, log *slog.Logger) *ledger {
	return &ledger{subj: subj, log: log, state: messages.PolicyState{V: messages.Version}}
}

// update reads the states stored since the last read, in order, and passes
// each one it applies to applied (which may be nil). With the stream
// missing, nothing changes and the error wraps jetstream.ErrStreamNotFound.
func (l *ledger) update(ctx context.Context, js jetstream.JetStream, applied func(seq uint64, st messages.PolicyState)) error {
	if l.stream == nil {
		s, err := js.Stream(ctx, l.subj.StreamControl())
		if err != nil {
			return fmt.Errorf("control: stream %s: %w", l.subj.StreamControl(), err)
		}
		l.stream = s
	}
	last, err := l.stream.GetLastMsgForSubject(ctx, l.subj.Control())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // nothing stored (or all purged): the state stays
	}
	if err != nil {
		l.stream = nil
		return fmt.Errorf("control: read %s: %w", l.subj.Control(), err)
	}
	anew := last.Sequence == l.read && !last.Time.Equal(l.readAt) // another message at the same sequence
	if last.Sequence < l.read {
		// Direct gets may be answered by a replica that is behind: only the
		// stream's own information (the leader's) says it was made anew.
		info, err := l.stream.Info(ctx)
		if err != nil {
			l.stream = nil
			return fmt.Errorf("control: stream %s: %w", l.subj.StreamControl(), err)
		}
		if info.State.LastSeq >= l.read {
			return nil // a replica behind; the next read sees the rest
		}
		anew = true
	}
	if anew {
		l.log.Warn("the control stream starts again; its policy states are read from the first, whatever their versions",
			"stream", l.subj.StreamControl(), "last_seq", last.Sequence, "read_seq", l.read)
		l.read, l.epoch, l.seq = 0, 0, 0
		l.readAt, l.takenAt = time.Time{}, time.Time{}
		l.state = messages.PolicyState{V: messages.Version}
	}
	took := false
	// The states between the last read and the last stored, normally none.
	for l.read+1 < last.Sequence {
		m, err := l.stream.GetMsg(ctx, l.read+1, jetstream.WithGetMsgSubject(l.subj.Control()))
		if err != nil {
			l.stream = nil
			return fmt.Errorf("control: read %s after sequence %d: %w", l.subj.Control(), l.read, err)
		}
		if m.Sequence >= last.Sequence {
			break
		}
		took = l.take(ctx, m) || took
	}
	if last.Sequence > l.read {
		took = l.take(ctx, last) || took
	}
	// Several states read at once (a worker's start, a reconnect) end in
	// the last one taken: only that one is applied.
	if took && applied != nil {
		applied(l.seq, l.state)
	}
	return nil
}

// take reads one stored state and takes it unless its version is lower
// than the taken state's while that state is still stored: versions never
// decrease within the stream's history, and a purged history (the operator
// resetting the fleet's policy) no longer holds them back.
func (l *ledger) take(ctx context.Context, m *jetstream.RawStreamMsg) bool {
	l.read, l.readAt = m.Sequence, m.Time
	st, err := messages.Decode[messages.PolicyState](m.Data)
	if err != nil {
		l.log.Warn("malformed policy state stored; skipped", "seq", m.Sequence, "err", err)
		return false
	}
	l.epoch = max(l.epoch, st.Epoch)
	if st.Version < l.state.Version {
		if !l.purged(ctx) {
			l.log.Warn("policy state refused: its version is lower than the one applied, and versions never decrease",
				"seq", m.Sequence, "epoch", st.Epoch, "policy_version", st.Version, "applied_version", l.state.Version, "applied_seq", l.seq)
			return false
		}
		l.log.Warn("the applied policy state is no longer stored (the control stream was purged): taking the stored state, whatever its version",
			"seq", m.Sequence, "policy_version", st.Version, "applied_version", l.state.Version, "applied_seq", l.seq)
	}
	l.state, l.seq, l.takenAt = *st, m.Sequence, m.Time
	return true
}

// purged reports whether the taken state is gone from the stream (purged,
// the stream made anew, or pushed out by ControlHistory later states). An
// error, or a replica behind (which still holds it), counts as not gone.
func (l *ledger) purged(ctx context.Context) bool {
	if l.seq == 0 {
		return false
	}
	m, err := l.stream.GetMsg(ctx, l.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	return err == nil && !m.Time.Equal(l.takenAt)
}

// storedAt reports whether the first state stored after sequence seq is
// want: whether an announcement expecting seq was stored.
func (l *ledger) storedAt(ctx context.Context, seq uint64, want messages.PolicyState) (bool, error) {
	if l.stream == nil {
		return false, nil
	}
	m, err := l.stream.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(l.subj.Control()))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("control: read %s after sequence %d: %w", l.subj.Control(), seq, err)
	}
	st, err := messages.Decode[messages.PolicyState](m.Data)
	return err == nil && *st == want, nil
}
