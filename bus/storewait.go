package bus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/internal/lograte"
)

// JetStream API error codes of a store that takes no writes (nats-server's
// errors.json): its file system is full or read-only, or JetStream's own
// store limit is reached.
const (
	jsInsufficientResources = 10023 // insufficient resources
	jsConsumerStoreFailed   = 10012 // error creating store for consumer
	jsStorageResources      = 10047 // insufficient storage resources available
	jsStreamCreateFailed    = 10049 // error creating store for stream
)

// StoreUnwritable reports whether err is the NATS server refusing a
// stream or consumer because its store takes no writes: the disk is full
// ("no space left on device") or read-only, or JetStream's store limit is
// reached. It passes once space is freed (and, on a single server, once
// WatchStore has restarted JetStream): a process starting then waits for
// it, as running ones do, rather than exiting.
func StoreUnwritable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsInsufficientResources, jsConsumerStoreFailed, jsStorageResources, jsStreamCreateFailed:
			return true
		}
	}
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "no space left on device") || strings.Contains(s, "read-only file system")
}

// Store wait pacing: the pause between tries grows to storeWaitMaxBackoff,
// and a line is logged every storeWaitLogEvery while the store stays
// unwritable.
const (
	storeWaitMaxBackoff = 5 * time.Second
	storeWaitLogEvery   = 30 * time.Second
)

// RetryStore is Retry that also waits, as long as ctx allows, while op fails
// because the NATS store takes no writes (StoreUnwritable), logging what it
// waits for (what: "create the episodes consumer") now and then. Use it
// for what a process must make at start, such as its consumer.
func RetryStore(ctx context.Context, log *slog.Logger, what string, op func(ctx context.Context) error) error {
	backoff := retryFirstBackoff
	logs := lograte.Every{Interval: storeWaitLogEvery}
	for {
		err := Retry(ctx, op)
		if !StoreUnwritable(err) {
			return err
		}
		if ok, _ := logs.Allow(time.Now()); ok {
			log.Warn("waiting for the NATS store to take writes", "to", what, "err", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, storeWaitMaxBackoff)
	}
}
