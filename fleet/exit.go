package fleet

import (
	"errors"
	"fmt"
)

// Exit statuses of a run, as rollout run exits with them (ExitStatus).
const (
	// ExitOK: every episode ended as a trajectory.
	ExitOK = 0
	// ExitSomeFailed: the run finished, and some episodes (not all) ended
	// as failure records.
	ExitSomeFailed = 1
	// ExitAllFailed: the run finished, and every episode ended as a
	// failure record.
	ExitAllFailed = 2
	// ExitStartup: the run did not start: bad flags or inputs (an unknown
	// env, an unreadable dataset), no model server answering, the data dir
	// in use, an output that cannot be written, no NATS. Nothing was
	// submitted and the outputs were left as they were.
	ExitStartup = 3
	// ExitUnfinished: the run started but did not finish (interrupted, out
	// of time, or an error along the way); the outputs hold what arrived.
	ExitUnfinished = 4
)

// Outcome errors of a run that finished with failure records.
var (
	// ErrSomeFailed: some episodes, not all, ended as failure records.
	ErrSomeFailed = errors.New("fleet: some episodes failed")
	// ErrAllFailed: every episode ended as a failure record.
	ErrAllFailed = errors.New("fleet: every episode failed")
)

// Outcome is nil when every episode of a finished run ended as a
// trajectory; otherwise it wraps ErrSomeFailed or ErrAllFailed and counts
// them. A resumed run counts what was written before it too.
func (s Summary) Outcome() error {
	switch {
	case s.AllFailures() == 0:
		return nil
	case s.AllTrajectories() == 0:
		return fmt.Errorf("%w: %d of %d (%s)", ErrAllFailed, s.AllFailures(), s.Episodes, s.kinds())
	}
	return fmt.Errorf("%w: %d of %d (%s)", ErrSomeFailed, s.AllFailures(), s.Episodes, s.kinds())
}

// ExitStatus is the exit status of a run that returned sum and err: one of
// the Exit constants.
func ExitStatus(sum Summary, err error) int {
	switch {
	case err != nil && !sum.Started:
		return ExitStartup
	case err != nil:
		return ExitUnfinished
	case sum.AllFailures() == 0:
		return ExitOK
	case sum.AllTrajectories() == 0:
		return ExitAllFailed
	}
	return ExitSomeFailed
}
