// Command chaos runs rollfleet's chaos suite: a fleet of separate processes
// works through GuessTheNumber episodes while processes of every kind are
// killed with SIGKILL and restarted; then every outcome is checked. It prints
// a table of kills, resumes, retries, failures, lost and duplicated episodes
// and exits non-zero when an episode was lost or duplicated or a trajectory
// broke an invariant. See package chaos and docs/reliability.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/chaos"
)

type cli struct {
	Bin            string        `help:"Directory with the rollout, envworker, llmworker and collector binaries (default: build them from the module in the current directory)."`
	Workdir        string        `help:"Directory for the NATS data, the process logs and report.txt (default: a temporary directory)."`
	Keep           bool          `help:"Keep the workdir (it is always kept when the run finds a problem)."`
	Episodes       int           `default:"2000" help:"Episodes to submit."`
	KillsPerKind   int           `default:"20" help:"SIGKILLs per kind of process (env worker, LLM worker, collector, model server, NATS server)."`
	Kinds          []string      `sep:"," help:"Kill only these kinds (envworker,llmworker,collector,model,nats; default all)."`
	Seed           uint64        `default:"1" help:"Seed of the kill schedule, the victims, the down times and the episodes."`
	Duration       time.Duration `default:"5m" help:"Chaos window: submissions are spread over it and the kills fall at random moments inside it."`
	Timeout        time.Duration `default:"20m" help:"Longest wait for outcomes and for the fleet to settle after the window."`
	Env            string        `default:"game:GuessTheNumber-v0" help:"Env id of the episodes (a game played from its own instructions)."`
	EnvWorkers     int           `default:"3" help:"Env worker processes."`
	LLMWorkers     int           `default:"2" help:"LLM worker processes."`
	ModelServers   int           `default:"2" help:"Stand-in model server processes (only the first is ever killed)."`
	Concurrency    int           `default:"128" help:"Episodes in flight per env worker."`
	ModelLatency   time.Duration `default:"40ms" help:"Stand-in model's time per generated token, so episodes are in flight when kills land (negative: none)."`
	MaxDown        time.Duration `default:"2s" help:"Longest pause between a kill and the restart."`
	RequestTimeout time.Duration `help:"Pass --request-timeout to the env workers, if they take it."`
	AckWait        time.Duration `help:"Pass --ack-wait to the env workers, if they take it."`
	Settle         time.Duration `help:"Least wait after the last kill before judging (default: the env workers' request timeout or ack wait, the longer, plus 30s)."`
	Quiet          bool          `help:"Print only the final table."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet chaos suite: kill and restart fleet processes under load, then check that nothing was lost."))
	os.Exit(c.run())
}

func (c *cli) run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := chaos.Config{
		Bin: c.Bin, Workdir: c.Workdir, Keep: c.Keep, Episodes: c.Episodes, KillsPerKind: c.KillsPerKind,
		Seed: c.Seed, Duration: c.Duration, Timeout: c.Timeout, Env: c.Env,
		EnvWorkers: c.EnvWorkers, LLMWorkers: c.LLMWorkers, ModelServers: c.ModelServers,
		Concurrency: c.Concurrency, ModelLatency: c.ModelLatency, MaxDown: c.MaxDown,
		RequestTimeout: c.RequestTimeout, AckWait: c.AckWait, Settle: c.Settle, Progress: os.Stderr,
	}
	if c.KillsPerKind == 0 {
		cfg.KillsPerKind = -1 // none
	}
	for _, k := range c.Kinds {
		cfg.Kinds = append(cfg.Kinds, chaos.Kind(k))
	}
	if c.Quiet {
		cfg.Progress = nil
	}
	if cfg.Bin == "" {
		dir, err := os.MkdirTemp("", "rollfleet-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "chaos: building the fleet's binaries")
		if err := chaos.Build(ctx, ".", dir); err != nil {
			fmt.Fprintln(os.Stderr, err, "\n(run from the module root, or give --bin)")
			return 2
		}
		cfg.Bin = dir
	} else if abs, err := filepath.Abs(cfg.Bin); err == nil {
		cfg.Bin = abs
	}
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		fmt.Print(rep.Table())
		fmt.Print(rep.Details())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if !rep.OK() {
		return 1
	}
	return 0
}
