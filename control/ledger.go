package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	if last.Sequence < l.read {
		// The stream was made anew: its sequences start again.
		l.log.Warn("the control stream starts again; reading its policy states from the first", "stream", l.subj.StreamControl(), "last_seq", last.Sequence, "read_seq", l.read)
		l.read, l.epoch = 0, 0
	}
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
		l.take(m, applied)
	}
	if last.Sequence > l.read {
		l.take(last, applied)
	}
	return nil
}

// take reads one stored state and applies it unless its version is lower
// than the applied state's.
func (l *ledger) take(m *jetstream.RawStreamMsg, applied func(seq uint64, st messages.PolicyState)) {
	l.read = m.Sequence
	st, err := messages.Decode[messages.PolicyState](m.Data)
	if err != nil {
		l.log.Warn("malformed policy state stored; skipped", "seq", m.Sequence, "err", err)
		return
	}
	l.epoch = max(l.epoch, st.Epoch)
	if st.Version < l.state.Version {
		l.log.Warn("policy state refused: its version is lower than the one applied, and versions never decrease",
			"seq", m.Sequence, "epoch", st.Epoch, "policy_version", st.Version, "applied_version", l.state.Version, "applied_seq", l.seq)
		return
	}
	l.state, l.seq = *st, m.Sequence
	if applied != nil {
		applied(m.Sequence, *st)
	}
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
