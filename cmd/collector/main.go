// Command collector runs the collector: it assembles step events into
// trajectories and groups until SIGINT/SIGTERM, then drains.
package main

import (
	"time"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
)

type cli struct {
	cmdutil.Fleet
	Durable       string        `default:"collector" help:"Consumer name on the steps stream (a shard of several adds -<index>of<count>)."`
	Shard         string        `default:"0/1" help:"The part of the steps stream to assemble, index/count: run one collector (and any standbys) for each index from 0 to count-1. Groups stay whole within a shard."`
	Filter        bool          `help:"Dynamic filtering: publish a group only if the mean of its scores is strictly inside --filter-range."`
	FilterRange   []float64     `default:"0,1" sep:"," help:"Low,high bounds for --filter."`
	MaxAttempts   int32         `default:"16" help:"Highest attempt number a step may carry; keep it above the env workers' --max-deliver."`
	CacheEpisodes int           `default:"65536" help:"Episodes whose steps are cached in memory; others are read back from the steps stream."`
	CacheBytes    int64         `default:"268435456" help:"Bytes of cached steps."`
	IdleTimeout   time.Duration `default:"5m" help:"Drop an episode's cached steps when none arrived for this long."`
	MaxGroups     int           `default:"16384" help:"Unfinished groups held; beyond it the oldest is dropped (its trajectories are all published)."`
	GroupBytes    int64         `default:"536870912" help:"Bytes of trajectories held in unfinished groups."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet collector"))
	cmdutil.Main("collector", c.Fleet, func(p cmdutil.Process) error {
		filter, err := cmdutil.FilterRange(c.Filter, c.FilterRange)
		if err != nil {
			return err
		}
		shard, err := collector.ParseShard(c.Shard)
		if err != nil {
			return err
		}
		coll := collector.New(p.JS, collector.Options{
			Subjects: p.Subjects, Durable: c.Durable, Shard: shard, Filter: filter, Logger: p.Log.With("shard", shard.String()),
			MaxAttempts: c.MaxAttempts, CacheEpisodes: c.CacheEpisodes, CacheBytes: c.CacheBytes, IdleTimeout: c.IdleTimeout,
			MaxGroups: c.MaxGroups, GroupBytes: c.GroupBytes, Metrics: p.Metrics.Collector(), Tracer: p.Tracing.Tracer("rollfleet/collector"),
		})
		unexpose, err := p.Expose(coll)
		if err != nil {
			return err
		}
		defer unexpose()
		return coll.Run(p.Ctx)
	})
}
