package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrTooLarge means a message exceeds the server's maximum payload.
var ErrTooLarge = errors.New("bus: message exceeds the server's max payload")

// publishAttempts and publishAttemptTimeout bound Publish: enough to ride out
// a stream leader election on a cluster (about a second), short enough to
// hand the work back quickly when the store is really gone.
const (
	publishAttempts       = 8
	publishAttemptTimeout = 2 * time.Second
)

// Publish stores one message in JetStream and waits for the acknowledgement.
// msgID, when set, makes a repeat inside the stream's duplicate window a
// no-op, so a retried publish never stores twice. Oversize messages fail at
// once with ErrTooLarge.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	if max := js.Conn().MaxPayload(); max > 0 && int64(len(data)) > max {
		return fmt.Errorf("%w: %s: %d bytes > %d", ErrTooLarge, subject, len(data), max)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	var err error
	for attempt := range publishAttempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt) * 100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("bus: publish %s: %w", subject, ctx.Err())
			}
		}
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		_, err = js.Publish(actx, subject, data, opts...)
		cancel()
		if err == nil || !retryablePublish(err) {
			break
		}
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		// Headers count too, so a message just under the limit can still be
		// refused by the client: the same permanent condition.
		return fmt.Errorf("%w: %s: %v", ErrTooLarge, subject, err)
	}
	if err != nil {
		return fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return nil
}

func retryablePublish(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}
