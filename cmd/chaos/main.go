// Command chaos runs rollfleet's chaos suite: a fleet of separate processes
// (two collectors, a NATS server or a three-node cluster) works through game
// episodes while processes of every kind are killed with SIGKILL and
// restarted, workers and collectors are paused for longer than the ack wait,
// a NATS data disk fills and frees, NATS servers lose power (with what
// they had not fsynced), step messages are forged and episodes submitted
// twice; then every outcome is read back with the harness's own
// consumer and decoder and checked. It prints a table of faults, resumes,
// retries, failures, lost, duplicated and invalid episodes and exits
// non-zero when the fleet broke the promise. See package chaos and
// docs/reliability.md.
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
	Bin             string        `help:"Directory with the rollout, envworker, llmworker and collector binaries (default: build them from the module in the current directory)."`
	Workdir         string        `help:"Directory for the NATS data, the process logs and report.txt (default: a temporary directory)."`
	Keep            bool          `help:"Keep the workdir (it is always kept when the run finds a problem)."`
	Episodes        int           `default:"2000" help:"Episodes to submit."`
	Env             []string      `sep:"," default:"game:GuessTheNumber-v0,game:Sudoku-v0-easy,game:Game2048-v0-easy" help:"Env ids the episodes play, in turn (games played from their own instructions)."`
	Seed            uint64        `default:"1" help:"Seed of the fault schedule, the victims, the down times and the episodes."`
	Duration        time.Duration `default:"5m" help:"Chaos window: submissions are spread over it and the faults fall at random moments inside it."`
	Timeout         time.Duration `default:"20m" help:"Longest wait for outcomes and for the fleet to settle after the window."`
	Kinds           []string      `sep:"," help:"Inject only these kinds of fault: envworker,llmworker,collector,model,nats (SIGKILLs), pause, disk, power-loss, forge, resubmit (default all)."`
	KillsPerKind    int           `default:"20" help:"SIGKILLs per kind of process (env worker, LLM worker, collector, model server, NATS server or cluster node)."`
	Pauses          int           `default:"10" help:"SIGSTOP/SIGCONT pauses of env workers, LLM workers and collectors."`
	PauseMin        time.Duration `help:"Shortest pause (default 1.5 times --ack-wait)."`
	PauseMax        time.Duration `help:"Longest pause (default 2.5 times --ack-wait)."`
	DiskFills       int           `default:"4" help:"Times a NATS data disk (a tmpfs; needs root on Linux) fills and frees."`
	DiskSizeMiB     int64         `name:"disk-size-mib" default:"3584" help:"Size of each NATS data tmpfs in MiB (JetStream must fit the streams' size limits, 2,304 MiB by default, into 75% of its free space)."`
	DiskHold        time.Duration `default:"15s" help:"Longest time a disk stays full (each hold is drawn from half of it to all of it)."`
	RecoverWait     time.Duration `default:"30s" help:"Time a NATS server gets after its disk is freed to serve JetStream again by itself before the harness restarts it."`
	PowerLosses     int           `default:"4" help:"Power losses of NATS servers (data dirs on lazyfs; needs FUSE): SIGKILL, drop what was not fsynced, restart; with --cluster every second one takes all nodes."`
	Sync            string        `placeholder:"always|DURATION" help:"NATS servers' JetStream sync policy, passed as rollout server --sync (default: the server's, always); an interval such as 2m shows what a power loss takes."`
	Forgeries       int           `default:"20" help:"Forged step events, each on its own live episode, cycling through the variants."`
	Resubmits       int           `default:"20" help:"Episodes submitted a second time without a message id, alternately in flight and finished."`
	Cluster         bool          `help:"Run a 3-node NATS cluster (streams of 3 replicas) instead of one server; nats kills hit its nodes."`
	EnvWorkers      int           `default:"3" help:"Env worker processes."`
	LLMWorkers      int           `default:"2" help:"LLM worker processes."`
	ModelServers    int           `default:"2" help:"Stand-in model server processes (only the first is ever killed)."`
	Collectors      int           `default:"2" help:"Collector processes; on each shard's durable one is active, the others hot standbys."`
	CollectorShards int           `default:"1" help:"Shards of the steps stream (1, 2, 4, 8 or 16): collector k runs --shard k%N/N."`
	Concurrency     int           `default:"128" help:"Episodes in flight per env worker."`
	ModelLatency    time.Duration `default:"40ms" help:"Stand-in model's time per generated token, so episodes are in flight when faults land (negative: none)."`
	MaxDown         time.Duration `default:"2s" help:"Longest pause between a kill and the restart."`
	RequestTimeout  time.Duration `default:"30s" help:"Pass --request-timeout to the env workers, if they take it."`
	AckWait         time.Duration `default:"10s" help:"Pass --ack-wait to the env workers, if they take it; pauses last longer."`
	Settle          time.Duration `help:"Least wait after the last fault before judging (default: the env workers' request timeout or ack wait, the longer, plus 30s)."`
	Quiet           bool          `help:"Print only the final table."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet chaos suite: inject faults into a fleet of processes under load, then check that nothing was lost, doubled or forged."))
	os.Exit(c.run())
}

// none maps a count of 0 on the command line to the config's "none".
func none(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (c *cli) run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := chaos.Config{
		Bin: c.Bin, Workdir: c.Workdir, Keep: c.Keep, Episodes: c.Episodes, Envs: c.Env,
		KillsPerKind: none(c.KillsPerKind), Pauses: none(c.Pauses), DiskFills: none(c.DiskFills), PowerLosses: none(c.PowerLosses), Sync: c.Sync,
		Forgeries: none(c.Forgeries), Resubmits: none(c.Resubmits),
		PauseMin: c.PauseMin, PauseMax: c.PauseMax, DiskSize: c.DiskSizeMiB << 20, DiskHold: c.DiskHold, RecoverWait: c.RecoverWait,
		Seed: c.Seed, Duration: c.Duration, Timeout: c.Timeout, Cluster: c.Cluster,
		EnvWorkers: c.EnvWorkers, LLMWorkers: c.LLMWorkers, ModelServers: c.ModelServers, Collectors: c.Collectors, CollectorShards: c.CollectorShards,
		Concurrency: c.Concurrency, ModelLatency: c.ModelLatency, MaxDown: c.MaxDown,
		RequestTimeout: c.RequestTimeout, AckWait: c.AckWait, Settle: c.Settle, Progress: os.Stderr,
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
