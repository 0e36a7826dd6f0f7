package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
)

// ErrTooLarge means a message exceeds the server's maximum payload.
var ErrTooLarge = errors.New("bus: message exceeds the server's max payload")

// ErrStreamFull means the stream refused a message because it holds its
// maximum bytes or messages (DiscardNew): for a work-queue stream, nobody is
// consuming what it holds. The condition passes when a reader catches up,
// so a publisher backs off and tries again.
var ErrStreamFull = errors.New("bus: stream full")

// jsStreamStoreFailed is the JetStream API error code of a store refused
// by the stream, with the store's reason as its description.
const jsStreamStoreFailed = 10077

// streamFull reports whether err is a stream's refusal for being full.
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsStreamStoreFailed {
		return false
	}
	d := apiErr.Description
	return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded") ||
		strings.Contains(d, "maximum messages per subject exceeded")
}

// Publish stores one message in JetStream and waits for the acknowledgement.
// msgID, when set, makes a repeat inside the stream's duplicate window a
// no-op, so a retried publish never stores twice. Oversize messages fail at
// once with ErrTooLarge. A transient failure (see Transient: no stream
// leader while a cluster elects one, a reconnect, a timeout) is retried as
// Retry does, for up to 20 s.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	return PublishMsg(ctx, js, TracedMsg(subject, data, ""), msgID)
}

// Content-Type names a message body's encoding, as in HTTP: every body
// rollfleet publishes is msgpack, and saying so lets "nats sub" and "nats
// stream view" readers (and any other client) tell how to decode it.
const (
	HeaderContentType  = "Content-Type"
	ContentTypeMsgpack = "application/msgpack"
)

// msgpackContentType is the Content-Type header's value, one slice for
// every message.
var msgpackContentType = []string{ContentTypeMsgpack}

// TracedMsg is a message with a msgpack body (data; a Content-Type header
// says so), carrying traceparent (a W3C trace context, as
// messages.Traceparent writes it) as a header too unless it is empty. A
// message without a body (a progress mark) has no Content-Type.
func TracedMsg(subject string, data []byte, traceparent string) *nats.Msg {
	// The header map is the message's own (a message id is added to it);
	// the value, never written, is shared.
	m := &nats.Msg{Subject: subject, Data: data}
	if len(data) > 0 {
		m.Header = nats.Header{HeaderContentType: msgpackContentType}
	}
	if traceparent != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header[messages.HeaderTraceparent] = []string{traceparent}
	}
	return m
}

// PublishMsg is Publish for a message with headers (a traceparent, say); msg's header gains
// the message id.
func PublishMsg(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, msgID string) (err error) {
	defer func(start time.Time) { observePublish(start, err) }(time.Now())
	subject, data := msg.Subject, msg.Data
	if max := js.Conn().MaxPayload(); max > 0 && int64(len(data)) > max {
		return fmt.Errorf("%w: %s: %d bytes > %d", ErrTooLarge, subject, len(data), max)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	err = Retry(ctx, func(ctx context.Context) error {
		_, err := js.PublishMsg(ctx, msg, opts...)
		return err
	})
	if errors.Is(err, nats.ErrMaxPayload) {
		// Headers count too, so a message just under the limit can still be
		// refused by the client: the same permanent condition.
		return fmt.Errorf("%w: %s: %v", ErrTooLarge, subject, err)
	}
	if streamFull(err) {
		return fmt.Errorf("%w: publish %s: %w", ErrStreamFull, subject, err)
	}
	if err != nil {
		return fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return nil
}

// AckBatch acknowledges messages of one consumer: all but the last without
// waiting, the last with the server's confirmation. A consumer handles one
// client's acknowledgements in order, so when the last is confirmed the
// others are done too: a reader that then deletes its consumer, or stops,
// loses none of them, for one round trip per batch rather than per message.
func AckBatch(ctx context.Context, msgs []jetstream.Msg) error {
	if len(msgs) == 0 {
		return nil
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := m.Ack(); err != nil {
			return fmt.Errorf("bus: acknowledge %s: %w", m.Subject(), err)
		}
	}
	last := msgs[len(msgs)-1]
	if err := Retry(ctx, last.DoubleAck); err != nil {
		return fmt.Errorf("bus: acknowledge %s: %w", last.Subject(), err)
	}
	return nil
}
