package fleet

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/service"
)

// expose adds the embedded actors' state to opts.Metrics and registers
// each with the NATS service API on its own connection, as the separate
// processes do. A refused registration is logged: the run goes on
// without it. The services stop before the connections close.
func expose(stack *cleanup, opts Options, conns map[string]*nats.Conn, lw *llm.Worker, ew *envactor.Worker, coll *collector.Collector) error {
	if err := opts.Metrics.WatchLLM(lw); err != nil {
		return err
	}
	if err := opts.Metrics.WatchEnv(ew); err != nil {
		return err
	}
	if err := opts.Metrics.WatchCollector(coll); err != nil {
		return err
	}
	subj := messages.NewSubjects("")
	for _, register := range []func() (micro.Service, error){
		func() (micro.Service, error) { return service.RegisterLLM(conns["llmworker"], subj, lw, opts.Logger) },
		func() (micro.Service, error) { return service.RegisterEnv(conns["envworker"], subj, ew, opts.Logger) },
		func() (micro.Service, error) {
			return service.RegisterCollector(conns["collector"], subj, coll, opts.Logger)
		},
	} {
		svc, err := register()
		if err != nil {
			opts.Logger.Warn("not registered with the NATS service API", "err", err)
			continue
		}
		stack.push(func() { _ = svc.Stop() })
	}
	return nil
}
