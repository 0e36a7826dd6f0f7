// Command collector runs the collector: it assembles step events into
// trajectories and groups until SIGINT/SIGTERM, then drains.
package main

import (
	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
)

type cli struct {
	cmdutil.Fleet
	Durable     string    `default:"collector" help:"Consumer name on the steps stream."`
	Filter      bool      `help:"Dynamic filtering: publish a group only if the mean of its scores is strictly inside --filter-range."`
	FilterRange []float64 `default:"0,1" sep:"," help:"Low,high bounds for --filter."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet collector"))
	cmdutil.Main("collector", c.Fleet, func(p cmdutil.Process) error {
		filter, err := cmdutil.FilterRange(c.Filter, c.FilterRange)
		if err != nil {
			return err
		}
		coll := collector.New(p.JS, collector.Options{Subjects: p.Subjects, Durable: c.Durable, Filter: filter, Logger: p.Log})
		return coll.Run(p.Ctx)
	})
}
