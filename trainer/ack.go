package trainer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
)

// ackToken is what an acknowledgement token names: a delivery of a stream's
// record by a consumer.
type ackToken struct {
	stream, consumer string
	seq              uint64 // the record's stream sequence
}

// maxAckToken bounds a token's length: an ack subject is far shorter.
const maxAckToken = 512

// parseAckToken parses a JetStream ack subject, the v1 form
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending> or
// the v2 form $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.
// <sseq>.<dseq>.<ts>.<pending>[.<token>]. Anything else is ErrBadAckToken.
func parseAckToken(s string) (ackToken, error) {
	bad := func(why string) (ackToken, error) {
		return ackToken{}, fmt.Errorf("%w: %s", ErrBadAckToken, why)
	}
	if len(s) > maxAckToken {
		return bad(fmt.Sprintf("%d bytes, longer than %d", len(s), maxAckToken))
	}
	rest, ok := strings.CutPrefix(s, "$JS.ACK.")
	if !ok {
		return bad("not a JetStream ack subject")
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
			return bad(fmt.Sprintf("byte %q not allowed", c))
		}
	}
	toks := strings.Split(rest, ".")
	var stream, consumer string
	var nums []string
	switch len(toks) {
	case 7:
		stream, consumer, nums = toks[0], toks[1], toks[2:]
	case 9, 10:
		stream, consumer, nums = toks[2], toks[3], toks[4:9]
	default:
		return bad(fmt.Sprintf("%d tokens after $JS.ACK, want 7, 9 or 10", len(toks)))
	}
	for _, t := range toks {
		if t == "" {
			return bad("empty token")
		}
	}
	var seq uint64
	for i, n := range nums {
		v, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			return bad(fmt.Sprintf("%q is not a number", n))
		}
		if i == 1 {
			seq = v
		}
	}
	if seq == 0 {
		return bad("stream sequence 0")
	}
	return ackToken{stream: stream, consumer: consumer, seq: seq}, nil
}

// AckToken acknowledges a record of a batch by its token (Result.Token),
// waiting for the server's confirmation. The token must name one of the
// batch's consumers (ErrBadAckToken otherwise), so a token can acknowledge
// nothing but a record of its batch. Acknowledging a record already
// acknowledged succeeds.
func (c *Client) AckToken(ctx context.Context, batch, token string) error {
	t, err := parseAckToken(token)
	if err != nil {
		return err
	}
	var src *source
	for _, k := range kinds {
		s := c.source(batch, k)
		if s.stream == t.stream && s.consumer == t.consumer {
			src = &s
		}
	}
	if src == nil {
		return fmt.Errorf("%w: it names consumer %s of %s, not one of batch %s's", ErrBadAckToken, t.consumer, t.stream, batch)
	}
	_, err = c.nc.RequestWithContext(ctx, token, []byte("+ACK"))
	if err == nil {
		return nil
	}
	// No answer: the server does not confirm an acknowledgement of a
	// delivery that is no longer pending. The record is acknowledged if
	// it is gone from its work queue.
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) {
		if _, gerr := bus.LeaderGetMsg(context.WithoutCancel(ctx), c.js, src.stream, t.seq, ""); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return nil
		}
	}
	return fmt.Errorf("trainer: ack %s record %d of batch %s: %w", src.kind, t.seq, batch, err)
}
