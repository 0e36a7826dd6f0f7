package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes of conditions that pass by themselves on a
// cluster (nats-server's errors.json).
const (
	jsClusterIncomplete     = 10004 // incomplete results
	jsClusterNotAssigned    = 10007 // JetStream cluster not assigned to this server
	jsClusterNotAvail       = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader      = 10009 // JetStream cluster can not handle request
	jsExpectedLastSeqNotRdy = 10163 // expected last sequence per subject temporarily unavailable
)

// Transient reports whether err is a NATS condition that passes by itself,
// so that the same call is worth repeating a moment later: no server or
// stream leader answered (no responders, a timeout), the connection is
// reconnecting, a pull was cut off by a leader change or a server shutdown,
// or JetStream answered that it is temporarily unavailable, as a cluster
// does while it elects a meta or stream leader and a restarted node does
// until its JetStream is up. Refused permissions, full streams, oversize
// messages, missing streams and the like are not transient.
//
// A timeout is transient whether the call's own deadline or the caller's
// ended it: a caller that must stop when its context ends checks ctx.Err()
// as well, as Retry does.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrServerShutdown), errors.Is(err, jetstream.ErrConsumerLeadershipChanged),
		errors.Is(err, jetstream.ErrNoHeartbeat),
		// A node that has just started answers so until its JetStream is up.
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsClusterIncomplete, jsClusterNotAssigned, jsClusterNotAvail, jsClusterNotLeader, jsExpectedLastSeqNotRdy:
			return true
		}
	}
	return false
}

// Retry budget: a crashed stream or meta leader is replaced after a raft
// election timeout (4 to 9 s in nats-server 2.15) and a reconnect to
// another node takes a moment more; 20 s rides that out with room, and a
// store that is really gone still hands the work back within half a minute.
const (
	retryBudget       = 20 * time.Second
	retryCallTimeout  = 2 * time.Second
	retryFirstBackoff = 100 * time.Millisecond
	retryMaxBackoff   = time.Second
)

// Retry calls op until it returns nil or an error that is not Transient,
// for up to 20 s, or until ctx ends. Each call gets a context of its own
// bounded by 2 s (and by ctx); the pause between calls grows from 100 ms to
// 1 s. It returns op's last error, or ctx's error when ctx ended. Use it for
// JetStream calls that must outlast a leader election on a cluster: reading
// a stream, creating a consumer, acknowledging with DoubleAck.
func Retry(ctx context.Context, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(retryBudget)
	backoff := retryFirstBackoff
	for {
		cctx, cancel := context.WithTimeout(ctx, retryCallTimeout)
		err := op(cctx)
		cancel()
		if err == nil || !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		if time.Now().Add(backoff).After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		backoff = min(2*backoff, retryMaxBackoff)
		observeRetry()
	}
}
