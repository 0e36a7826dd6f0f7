package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderGetMsg reads the message of stream at sequence seq (with subject
// set: the first at or after seq on that subject) through the JetStream
// API's MSG.GET, which the stream's leader answers. jetstream's
// Stream.GetMsg switches to a direct get, which any replica may answer
// however far behind, as soon as the stream allows direct gets: what must
// be current — whether an acknowledged work-queue record is gone — is asked
// here. jetstream.ErrMsgNotFound means there is no such message.
func LeaderGetMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		Subject string `json:"next_by_subj,omitempty"`
	}{seq, subject})
	if err != nil {
		return nil, err
	}
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	m, err := js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, jetstream.ErrInvalidJetStreamResponse)
	}
	var hdr nats.Header
	if len(resp.Message.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Header: hdr, Data: resp.Message.Data, Time: resp.Message.Time}, nil
}
