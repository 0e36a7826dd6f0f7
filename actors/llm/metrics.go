package llm

import (
	"strings"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/vllm"
)

// Metrics receives an LLM worker's measurements (package metrics has one).
// Endpoint is called once per model endpoint, by New, with the endpoint's
// base URL; what it returns times that endpoint's completion and tokenize
// calls. Implementations must be safe for concurrent use.
type Metrics interface {
	Endpoint(url string) vllm.Observer
}

// observer is the observer of the endpoint at u, if any.
func (o *Options) observer(u string) vllm.Observer {
	if o.Metrics == nil {
		return nil
	}
	return o.Metrics.Endpoint(strings.TrimRight(u, "/"))
}

// EndpointStatus is the state of one model endpoint of a worker.
type EndpointStatus struct {
	URL string `json:"url"`
	// Healthy is false while the endpoint is marked down (after a failed
	// call, until its /health answers).
	Healthy bool `json:"healthy"`
	// InFlight is the number of requests it serves now, MaxInFlight its
	// bound (an adaptive bound's current value).
	InFlight    int `json:"in_flight"`
	MaxInFlight int `json:"max_in_flight"`
}

// Endpoints returns the state of the worker's model endpoints.
func (w *Worker) Endpoints() []EndpointStatus {
	out := make([]EndpointStatus, len(w.router.eps))
	for i, e := range w.router.eps {
		n, limit := e.slots.inFlight()
		out[i] = EndpointStatus{URL: e.url, Healthy: e.healthy.Load(), InFlight: n, MaxInFlight: limit}
	}
	return out
}

// ID is the worker's id (Options.ID).
func (w *Worker) ID() string { return w.opts.ID }

// Policy returns the policy state the worker follows, and false before Run
// has read it.
func (w *Worker) Policy() (messages.PolicyState, bool) {
	ctl := w.watcher.Load()
	if ctl == nil {
		return messages.PolicyState{}, false
	}
	return ctl.State(), true
}
