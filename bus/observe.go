package bus

import (
	"sync/atomic"
	"time"
)

// Observer receives the bus's measurements: the duration of every Publish
// (its retries included) and each repeated call of Retry. Its methods must
// be cheap and safe for concurrent use; package metrics has one.
type Observer interface {
	// Published reports one Publish that took d and ended with err.
	Published(d time.Duration, err error)
	// Retried reports one call that Retry repeats after a transient error.
	Retried()
}

// observer holds the process's Observer, if any.
var observer atomic.Pointer[Observer]

// SetObserver makes o receive the measurements of every Publish and Retry
// in this process from now on; nil stops them. It returns the observer it
// replaced (nil when there was none).
func SetObserver(o Observer) Observer {
	var old *Observer
	if o == nil {
		old = observer.Swap(nil)
	} else {
		old = observer.Swap(&o)
	}
	if old == nil {
		return nil
	}
	return *old
}

// observePublish reports a Publish that started at start.
func observePublish(start time.Time, err error) {
	if o := observer.Load(); o != nil {
		(*o).Published(time.Since(start), err)
	}
}

// observeRetry reports a repeated call of Retry.
func observeRetry() {
	if o := observer.Load(); o != nil {
		(*o).Retried()
	}
}
