package cmdutil

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/micro"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/metrics"
	"github.com/rollfleet/rollfleet/service"
)

// ServeMetrics starts the metrics server at addr (the --metrics flag) and
// makes the process's JetStream publishes feed it; stop undoes both. An
// empty addr serves nothing and returns a nil *metrics.Metrics, which
// measures nothing.
func ServeMetrics(addr string, log *slog.Logger) (m *metrics.Metrics, stop func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	m = metrics.New()
	srv, err := m.Serve(addr, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics: %w", err)
	}
	restore := m.ObserveBus()
	return m, func() {
		restore()
		_ = srv.Close()
	}, nil
}

// Expose makes a built actor (an *env.Worker, *llm.Worker or
// *collector.Collector) visible: its state in the process's metrics, when
// served, and the actor as an instance of the NATS service API. Call the
// returned function once the actor has stopped. A server that refuses the
// registration is logged, not fatal: the actor works without it.
func (p Process) Expose(actor any) (func(), error) {
	var svc micro.Service
	var err error
	switch a := actor.(type) {
	case *envactor.Worker:
		if err := p.Metrics.WatchEnv(a); err != nil {
			return nil, err
		}
		svc, err = service.RegisterEnv(p.NC, p.Subjects, a, p.Log)
	case *llm.Worker:
		if err := p.Metrics.WatchLLM(a); err != nil {
			return nil, err
		}
		svc, err = service.RegisterLLM(p.NC, p.Subjects, a, p.Log)
	case *collector.Collector:
		if err := p.Metrics.WatchCollector(a); err != nil {
			return nil, err
		}
		svc, err = service.RegisterCollector(p.NC, p.Subjects, a, p.Log)
	default:
		return nil, fmt.Errorf("cmdutil: cannot expose a %T", actor)
	}
	if err != nil {
		p.Log.Warn("not registered with the NATS service API", "err", err)
		return func() {}, nil
	}
	return func() { _ = svc.Stop() }, nil
}
