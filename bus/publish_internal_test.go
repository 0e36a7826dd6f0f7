package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestStreamFull(t *testing.T) {
	api := func(code jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: 503, ErrorCode: code, Description: desc}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{api(jsStreamStoreFailed, "maximum bytes exceeded"), true},
		{api(jsStreamStoreFailed, "maximum messages exceeded"), true},
		{api(jsStreamStoreFailed, "maximum messages per subject exceeded"), true},
		{fmt.Errorf("nats: %w", api(jsStreamStoreFailed, "maximum bytes exceeded")), true},
		// The same code for another store failure, and other codes.
		{api(jsStreamStoreFailed, "malformed or corrupt message"), false},
		{api(jsStreamStoreFailed, ""), false},
		{api(10071, "wrong last sequence: 3"), false},
		{api(10060, "expected stream does not match"), false},
		{errors.New("maximum bytes exceeded"), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := streamFull(tc.err); got != tc.want {
			t.Errorf("streamFull(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
