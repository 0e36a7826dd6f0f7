// Command rollout is rollfleet's one command: run a whole rollout job on an
// embedded NATS server with the built-in stand-in model (or real vLLM), play
// one environment over JSON lines, or serve the stand-in model or a NATS
// server for a fleet of separate processes.
package main

import (
	"github.com/alecthomas/kong"
)

type cli struct {
	Run     runCmd     `cmd:"" help:"Run episodes end to end and write trajectories as JSONL."`
	Env     envCmd     `cmd:"" help:"Play one environment over JSON lines (stdin: one JSON string action per line)."`
	Envs    envsCmd    `cmd:"" help:"List every registered env: id, family, parameters, max turns."`
	Play    playCmd    `cmd:"" help:"Play one environment yourself in the terminal."`
	Prepare prepareCmd `cmd:"" help:"Turn question/answer rows into NeMo Gym data items."`
	Toyllm  toyllmCmd  `cmd:"" help:"Serve the built-in stand-in model (vLLM's HTTP API) alone."`
	Server  serverCmd  `cmd:"" help:"Serve a standalone NATS server with JetStream for a local fleet."`
	Gateway gatewayCmd `cmd:"" help:"Serve the OpenAI-compatible gateway that records sessions as trajectories."`
}

func main() {
	var c cli
	ctx := kong.Parse(&c, kong.Name("rollout"),
		kong.Description("rollfleet: multi-turn RL rollouts on NATS"), kong.UsageOnError())
	ctx.FatalIfErrorf(ctx.Run())
}
