// Command envworker runs an env worker: it pulls episodes from NATS
// JetStream and drives their turn loops until SIGINT/SIGTERM, then drains.
package main

import (
	"github.com/alecthomas/kong"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
)

type cli struct {
	cmdutil.Fleet
	Concurrency int    `default:"256" help:"Most episodes in flight in this process."`
	Durable     string `default:"envworker" help:"Shared consumer name."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet env worker"))
	cmdutil.Main("envworker", c.Fleet, func(p cmdutil.Process) error {
		w := envactor.New(p.NC, p.JS, envactor.Options{Concurrency: c.Concurrency, Subjects: p.Subjects, Durable: c.Durable, Logger: p.Log})
		return w.Run(p.Ctx)
	})
}
