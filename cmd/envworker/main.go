// Command envworker runs an env worker: it pulls episodes from NATS
// JetStream and drives their turn loops until SIGINT/SIGTERM, then drains.
package main

import (
	"fmt"

	"github.com/alecthomas/kong"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/envs"
)

type cli struct {
	cmdutil.Fleet
	Concurrency int    `default:"256" help:"Most episodes in flight in this process."`
	Durable     string `default:"envworker" help:"Shared consumer name."`
	Env         string `help:"Host only these envs: a comma-separated list of ids and patterns such as 'game:*' (default: every env). Sets in use must not overlap."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet env worker"))
	cmdutil.Main("envworker", c.Fleet, func(p cmdutil.Process) error {
		var hosted []string
		if c.Env != "" {
			var err error
			if hosted, err = envs.Match(c.Env); err != nil {
				return fmt.Errorf("--env: %w", err)
			}
		}
		w := envactor.New(p.NC, p.JS, envactor.Options{Concurrency: c.Concurrency, Subjects: p.Subjects, Durable: c.Durable, Envs: hosted, Logger: p.Log})
		return w.Run(p.Ctx)
	})
}
