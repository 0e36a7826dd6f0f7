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

// Endpoints returns the state of the worker's model endpoints: health, the
// requests each serves now and its in-flight bound (an adaptive bound's
// current value).
func (w *Worker) Endpoints() []messages.EndpointStatus {
	out := make([]messages.EndpointStatus, len(w.router.eps))
	for i, e := range w.router.eps {
		n, limit := e.slots.inFlight()
		out[i] = messages.EndpointStatus{URL: e.url, Healthy: e.healthy.Load(), InFlight: int64(n), Max: int64(limit)}
	}
	return out
}

// ID is the worker's id (Options.ID).
func (w *Worker) ID() string { return w.opts.ID }

// Policy returns the policy state the worker follows, and false before Run
// has read it.
func (w *Worker) Policy() (messages.PolicyState, bool) { return w.watcher.Load().Current() }
