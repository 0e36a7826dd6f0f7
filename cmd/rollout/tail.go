package main

import (
	"fmt"
	"os"

	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleetstatus"
)

// tailCmd prints the fleet's results as JSON lines as they are published.
type tailCmd struct {
	lookFlags
	Env      string `help:"Only this env's records."`
	RunID    string `name:"run" help:"Only this run's (or trainer batch's) records."`
	Failures bool   `xor:"kind" help:"Print failure records instead of trajectories."`
	Groups   bool   `xor:"kind" help:"Print groups instead of trajectories."`
	Count    int    `help:"Stop after this many lines (0: until interrupted)."`
}

func (c *tailCmd) Run() error {
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	nc, subj, err := c.connect(ctx, "rollout-tail")
	if err != nil {
		return err
	}
	defer nc.Close()
	kind := fleetstatus.TailTrajectories
	switch {
	case c.Failures:
		kind = fleetstatus.TailFailures
	case c.Groups:
		kind = fleetstatus.TailGroups
	}
	_, err = fleetstatus.Tail(ctx, nc, os.Stdout, fleetstatus.TailOptions{
		Subjects: subj, Kind: kind, Env: c.Env, Run: c.RunID, Count: c.Count,
		Ready: func(subject string) { fmt.Fprintf(os.Stderr, "rollout tail: following %s\n", subject) },
	})
	return err
}
