// Command rollout is rollfleet's one command: run a whole rollout job on an
// embedded NATS server with the built-in stand-in model (or real vLLM), play
// one environment over JSON lines, or serve the stand-in model or a NATS
// server for a fleet of separate processes.
//
// Bad flags exit with status 3 (fleet.ExitStartup) after a one-line error
// and a pointer to the command's --help; rollout run's exit statuses are
// fleet's Exit constants (docs/run.md).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/fleet"
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
	Consume consumeCmd `cmd:"" help:"Read groups (or trajectories, failures) from a fleet as a trainer does, acknowledging each."`
	API     apiCmd     `cmd:"" name:"api" help:"Serve the trainer API (batches, results, pause and resume) over HTTP, for a fleet or an embedded one."`
	Status  statusCmd  `cmd:"" help:"Print the fleet at a glance: streams, consumers, workers, policy, batches and runs."`
	Tail    tailCmd    `cmd:"" help:"Print trajectories (or groups, failures) as JSON lines as they are published."`

	Dashboard dashboardCmd `cmd:"" help:"Serve a live web dashboard of a fleet: throughput, success rates, failures, workers, stream backlog."`
}

func main() {
	var c cli
	parser := kong.Must(&c, kong.Name("rollout"), kong.Description("rollfleet: multi-turn RL rollouts on NATS"))
	ctx, err := parser.Parse(os.Args[1:])
	if err != nil {
		os.Exit(usageError(parser, os.Stderr, err))
	}
	parser.FatalIfErrorf(ctx.Run())
}

// usageError prints a command line's error in one line, with where to find
// the command's help instead of the whole help page, and returns the exit
// status.
func usageError(parser *kong.Kong, w io.Writer, err error) int {
	fmt.Fprintf(w, "%s: error: %v\n", parser.Model.Name, err)
	help := parser.Model.Name
	var perr *kong.ParseError
	if errors.As(err, &perr) && perr.Context != nil {
		if node := perr.Context.Selected(); node != nil && strings.HasPrefix(node.FullPath(), help+" ") {
			help = node.FullPath()
		}
	}
	fmt.Fprintf(w, "see '%s --help'\n", help)
	return fleet.ExitStartup
}

// exitError is an error that ends the process with a given status (kong's
// FatalIfErrorf honours ExitCode); a nil error with status 0 is success.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the process's exit status.
func (e *exitError) ExitCode() int { return e.code }

// exitWith returns err ending the process with status code; nil when there
// is nothing to report.
func exitWith(code int, err error) error {
	switch {
	case err == nil && code == 0:
		return nil
	case err == nil:
		err = fmt.Errorf("exit status %d", code)
	}
	return &exitError{code: code, err: err}
}
