// Command llmworker runs an LLM worker: it answers generate and tokenize
// requests by forwarding them to vLLM-compatible model servers until
// SIGINT/SIGTERM, then drains.
package main

import (
	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
)

type cli struct {
	cmdutil.Fleet
	VLLM        []string `required:"" sep:"," help:"Model server base URL(s), comma-separated (vLLM or 'rollout toyllm')."`
	Model       string   `help:"Served model name (default: each server's first)."`
	MaxInFlight int      `default:"64" help:"Most concurrent requests per model server."`
	Queue       string   `default:"llm" help:"Queue group."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet LLM worker"))
	cmdutil.Main("llmworker", c.Fleet, func(p cmdutil.Process) error {
		w, err := llm.New(p.NC, llm.Options{Endpoints: c.VLLM, Model: c.Model, MaxInFlight: c.MaxInFlight, Subjects: p.Subjects, Queue: c.Queue, Logger: p.Log})
		if err != nil {
			return err
		}
		return w.Run(p.Ctx)
	})
}
