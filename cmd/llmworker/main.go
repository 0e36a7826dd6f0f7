// Command llmworker runs an LLM worker: it answers generate and tokenize
// requests by forwarding them to vLLM-compatible model servers until
// SIGINT/SIGTERM, then drains. With --gateway it also serves the
// OpenAI-compatible gateway in the same process.
package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/gateway"
)

type cli struct {
	cmdutil.Fleet
	VLLM        []string         `required:"" sep:"," help:"Model server base URL(s), comma-separated (vLLM or 'rollout toyllm')."`
	Model       string           `help:"Served model name (default: each server's first)."`
	MaxInFlight cmdutil.InFlight `default:"auto" help:"Most concurrent requests per model server: auto adapts it to each server's load from its /metrics (requests running and waiting, KV-cache usage) and its latency, starting at 64; a number fixes it."`
	Routing     string           `default:"sticky" enum:"sticky,sticky-wait,least-loaded,round-robin" help:"How requests are spread over the model servers: sticky (each episode on its own server, for its prefix cache, or the least-loaded one when that is full), sticky-wait (sticky, but wait up to --routing-wait for a slot of the episode's server before going elsewhere), least-loaded or round-robin."`
	RoutingWait time.Duration    `default:"1s" help:"With sticky-wait routing: how long a request waits for a slot of its episode's server before going to another."`
	Queue       string           `default:"llm" help:"Queue group."`

	Gateway          string        `placeholder:"ADDR" group:"Gateway" help:"Also serve the OpenAI-compatible gateway on this address (host:port)."`
	GatewayEnv       string        `default:"gateway" group:"Gateway" help:"Env of the trajectories the gateway publishes when a finish names none."`
	SessionTTL       time.Duration `default:"30m" group:"Gateway" help:"Expire gateway sessions idle for longer than this (published as failures)."`
	MaxSessions      int           `default:"4096" group:"Gateway" help:"Most open gateway sessions."`
	MaxSessionTokens int           `default:"262144" group:"Gateway" help:"Most tokens one gateway session holds."`
	NoIdlessSessions bool          `group:"Gateway" help:"Serve gateway calls without a session id unrecorded, instead of attaching them to a session by their tokens."`
	ToolCallParser   string        `default:"hermes" enum:"hermes,none" group:"Gateway" help:"Read tool calls out of the gateway's chat replies (as vLLM's --tool-call-parser)."`
	ReasoningParser  string        `default:"none" enum:"qwen3,none" group:"Gateway" help:"Split <think> reasoning out of the gateway's chat replies (as vLLM's --reasoning-parser)."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet LLM worker"))
	cmdutil.Main("llmworker", c.Fleet, func(p cmdutil.Process) error {
		w, err := llm.New(p.NC, llm.Options{
			Endpoints: c.VLLM, Model: c.Model, MaxInFlight: int(c.MaxInFlight), Routing: c.Routing, RoutingWait: c.RoutingWait, Subjects: p.Subjects, Queue: c.Queue, Logger: p.Log, Metrics: p.Metrics.LLM(),
			Tracer: p.Tracing.Tracer("rollfleet/llmworker"),
		})
		if err != nil {
			return err
		}
		unexpose, err := p.Expose(w)
		if err != nil {
			return err
		}
		defer unexpose()
		if c.Gateway == "" {
			return w.Run(p.Ctx)
		}
		gw, err := gateway.New(p.NC, gateway.Options{
			Subjects: p.Subjects, Env: c.GatewayEnv, SessionTTL: c.SessionTTL, MaxSessions: c.MaxSessions,
			MaxSessionTokens: c.MaxSessionTokens, ToolCallParser: c.ToolCallParser, ReasoningParser: c.ReasoningParser,
			NoIdlessSessions: c.NoIdlessSessions, Streams: c.Streams(), Logger: p.Log,
		})
		if err != nil {
			return err
		}
		// The signal stops the gateway first, so that the calls it is serving
		// can still reach this worker; the worker stops once the gateway has.
		// A worker that fails stops the gateway too.
		gwCtx, stopGateway := context.WithCancel(p.Ctx)
		defer stopGateway()
		workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(p.Ctx))
		defer stopWorker()
		var wg sync.WaitGroup
		var werr, gerr error
		wg.Go(func() {
			defer stopGateway()
			werr = w.Run(workerCtx)
		})
		wg.Go(func() {
			defer stopWorker()
			gerr = gw.ListenAndServe(gwCtx, c.Gateway)
		})
		wg.Wait()
		return errors.Join(werr, gerr)
	})
}
