package collector

import "github.com/rollfleet/rollfleet/messages"

// Metrics receives the outcome of every episode the collector stores (package
// metrics has one): a trajectory, or a failure record. Implementations
// must be cheap and safe for concurrent use; they must not keep either.
type Metrics interface {
	Stored(t *messages.Trajectory, f *messages.Failure)
}

// observe reports a stored outcome.
func (c *Collector) observe(t *messages.Trajectory, f *messages.Failure) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.Stored(t, f)
	}
}
