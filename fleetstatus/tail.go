package fleetstatus

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
)

// Kinds of records Tail follows.
const (
	TailTrajectories = "trajectories"
	TailGroups       = "groups"
	TailFailures     = "failures"
)

// TailOptions says which records Tail prints.
type TailOptions struct {
	// Subjects names the fleet's subjects (default prefix "rf").
	Subjects messages.Subjects
	// Kind is TailTrajectories (the default), TailGroups or TailFailures.
	Kind string
	// Env and Run, when set, select one env's and one run's records.
	// Failure records carry their env in the body, not the subject: with
	// Env, those of another env, or of none, are skipped.
	Env, Run string
	// Count stops Tail after that many lines (0: until ctx ends).
	Count int
	// Ready, if set, is called once the subscription is in place on the
	// server: a record published after it is printed.
	Ready func(subject string)
}

// TailSubject is the subject Tail subscribes to for opts.
func TailSubject(opts TailOptions) (string, error) {
	subj := opts.Subjects
	if subj.Prefix == "" {
		subj = messages.NewSubjects("")
	}
	runTok, env := "*", "*"
	if opts.Run != "" {
		runTok = messages.Token(opts.Run)
	}
	if opts.Env != "" {
		env = messages.Token(opts.Env)
	}
	switch opts.Kind {
	case "", TailTrajectories:
		return subj.Prefix + ".trajectories." + runTok + "." + env, nil
	case TailGroups:
		return subj.Prefix + ".groups." + runTok + "." + env, nil
	case TailFailures:
		// The last token is the failure kind.
		return subj.Prefix + ".failures." + runTok + ".*", nil
	}
	return "", fmt.Errorf("fleetstatus: unknown kind %q (trajectories, groups or failures)", opts.Kind)
}

// tailPendingBytes bounds what the subscription buffers while the writer
// is slower than the fleet; beyond it the server drops messages for this
// subscriber only (the streams keep every record for their readers), and
// Tail says how many it missed.
const tailPendingBytes = 256 << 20

// flushTimeout bounds the wait for the server to confirm the subscription.
const flushTimeout = 10 * time.Second

// Tail subscribes (core NATS: no consumer, so the work-queue streams'
// readers lose nothing) to the records opts selects and writes each, as it
// arrives, as one JSON line: fleet.WriteRecord's form, the same as rollout
// run's output. A message that does not decode is written as a line
// {"error": …, "subject": …} and Tail goes on. It returns the number of
// lines written when ctx ends (nil error) or after opts.Count lines.
//
// A record is seen as it is published: a publish retried by its producer
// may show twice, and records published before Tail started are not shown.
func Tail(ctx context.Context, nc *nats.Conn, w io.Writer, opts TailOptions) (int, error) {
	subject, err := TailSubject(opts)
	if err != nil {
		return 0, err
	}
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return 0, fmt.Errorf("fleetstatus: subscribe %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, tailPendingBytes); err != nil {
		return 0, fmt.Errorf("fleetstatus: %w", err)
	}
	if err := nc.FlushTimeout(flushTimeout); err != nil {
		return 0, fmt.Errorf("fleetstatus: subscribe %s: %w", subject, err)
	}
	if opts.Ready != nil {
		opts.Ready(subject)
	}
	bw := bufio.NewWriter(w)
	n, dropped := 0, 0
	for opts.Count <= 0 || n < opts.Count {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				continue // counted by Dropped below
			}
			return n, errors.Join(fmt.Errorf("fleetstatus: %s: %w", subject, err), bw.Flush())
		}
		if d, _ := sub.Dropped(); d > dropped {
			if err := writeError(bw, subject, fmt.Sprintf("missed %d messages: tail is slower than the fleet", d-dropped)); err != nil {
				return n, err
			}
			dropped = d
		}
		wrote, err := writeRecord(bw, m, opts)
		if err != nil {
			return n, fmt.Errorf("fleetstatus: write: %w", err)
		}
		if wrote {
			n++
		}
		if p, _, _ := sub.Pending(); p == 0 || (opts.Count > 0 && n >= opts.Count) {
			if err := bw.Flush(); err != nil {
				return n, fmt.Errorf("fleetstatus: write: %w", err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("fleetstatus: write: %w", err)
	}
	return n, nil
}

// writeRecord decodes m as opts.Kind says and writes it, or its error;
// it reports whether it wrote a line (a failure record of another env is
// skipped).
func writeRecord(w io.Writer, m *nats.Msg, opts TailOptions) (bool, error) {
	var v any
	var err error
	switch opts.Kind {
	case "", TailTrajectories:
		v, err = messages.Decode[messages.Trajectory](m.Data)
	case TailGroups:
		v, err = messages.Decode[messages.Group](m.Data)
	case TailFailures:
		var f *messages.Failure
		f, err = messages.Decode[messages.Failure](m.Data)
		if err == nil && opts.Env != "" && f.Env != opts.Env {
			return false, nil
		}
		v = f
	}
	if err != nil {
		return true, writeError(w, m.Subject, err.Error())
	}
	return true, fleet.WriteRecord(w, v)
}

// tailError is the line written for a message that does not decode.
type tailError struct {
	Error   string `json:"error"`
	Subject string `json:"subject"`
}

func writeError(w io.Writer, subject, msg string) error {
	line, err := json.Marshal(tailError{Error: msg, Subject: subject})
	if err != nil {
		return err
	}
	_, err = w.Write(append(line, '\n'))
	return err
}
