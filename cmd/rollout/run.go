package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/toyllm"
)

type runCmd struct {
	Env               string        `default:"game:GuessTheNumber-v0" help:"Env id, or a comma-separated list of ids and patterns such as 'game:*' taken in turn (used when a dataset row names none)."`
	Episodes          int           `help:"Number of episodes (a multiple of --n-samples). With --dataset, 0 runs every row once."`
	Dataset           string        `type:"existingfile" help:"JSONL rows: {prompt, label, env?, obs_style?}, math {question, expected_answer}, or NeMo Gym data items."`
	ObsStyle          string        `default:"chat" enum:"chat,concat,qwen3_game" help:"How observations become prompts: chat (multi-turn ChatML), concat (GEM's history prompt per turn, one sample per turn) or qwen3_game (concat in GEM's qwen3_game template)."`
	ApplyChatTemplate bool          `help:"Wrap dataset prompts as the first user turn of the chat template."`
	NSamples          int           `default:"1" help:"Samples per prompt (group size)."`
	Concurrency       int           `default:"256" help:"Most episodes in flight."`
	MaxLength         int           `default:"4096" help:"Whole-trajectory token budget."`
	MaxTokens         int           `default:"256" help:"Per-turn generation cap (0 = the whole remaining budget)."`
	Temperature       float64       `default:"1" help:"Sampling temperature."`
	TopP              float64       `default:"1" help:"Nucleus sampling."`
	Seed              *uint64       `help:"Seed for a reproducible run (random if unset)."`
	Out               string        `default:"trajectories.jsonl" help:"Trajectory JSONL file ('-' for stdout), replaced only once the run has started."`
	FailuresOut       string        `help:"Also write failure records as JSONL to this file (replaced as --out is)."`
	Remote            []string      `sep:"none" help:"Also host a remote env served over HTTP: ID=KIND,URL with KIND http-gym or http-verify (repeatable)."`
	VLLM              []string      `sep:"," help:"vLLM base URL(s); default: the built-in stand-in model."`
	Model             string        `help:"Served model name (default: the server's first)."`
	LLMMaxInFlight    int           `default:"64" help:"Most concurrent requests per model server."`
	NATS              string        `help:"External NATS URL(s) instead of the embedded server."`
	SubmitOnly        bool          `help:"With --nats: submit and collect only; a fleet of separate processes does the work."`
	DataDir           string        `help:"Embedded server data dir (default: a temp dir, removed afterwards)."`
	Filter            bool          `help:"Dynamic filtering of groups by mean score inside --filter-range."`
	FilterRange       []float64     `default:"0,1" sep:"," help:"Low,high bounds for --filter."`
	ToyLatency        time.Duration `help:"Stand-in model: simulated time per generated token."`
	ToyMaxConcurrent  int           `help:"Stand-in model: cap on concurrently generating sequences (0 = none)."`
	Timeout           time.Duration `help:"Give up after this long (0 = never)."`
	LogLevel          string        `default:"warn" enum:"debug,info,warn,error" help:"Log level (logs go to stderr)."`
	cmdutil.NATSAuth
	cmdutil.GC
}

// Run runs the job and ends with the run's exit status (fleet.ExitStatus):
// 0 every episode a trajectory, 1 some failed, 2 all failed, 3 the run did
// not start, 4 it started but did not finish.
func (c *runCmd) Run() error {
	sum, err := c.run()
	status := fleet.ExitStatus(sum, err)
	if err == nil {
		if err = sum.Outcome(); err != nil && c.FailuresOut == "" {
			err = fmt.Errorf("%w; --failures-out FILE keeps their records", err)
		}
	}
	return exitWith(status, c.explain(err))
}

// explain adds to an error the flags that would mend it.
func (c *runCmd) explain(err error) error {
	switch {
	case errors.Is(err, fleet.ErrNoModelServer), errors.Is(err, fleet.ErrModelNotServed):
		return fmt.Errorf("%w (check --vllm and --model; without --vllm the built-in stand-in model runs)", err)
	}
	return c.Explain(err)
}

func (c *runCmd) run() (sum fleet.Summary, err error) {
	if err := c.Tune(); err != nil {
		return sum, err
	}
	if c.SubmitOnly && c.NATS == "" {
		return sum, errors.New("--submit-only needs --nats")
	}
	filter, err := cmdutil.FilterRange(c.Filter, c.FilterRange)
	if err != nil {
		return sum, err
	}
	remote, err := cmdutil.RemoteEnvs(c.Remote)
	if err != nil {
		return sum, err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	opts := fleet.Options{
		Env: c.Env, Episodes: c.Episodes, Dataset: c.Dataset, ObsStyle: c.ObsStyle, ApplyChatTemplate: c.ApplyChatTemplate,
		NSamples: c.NSamples, Concurrency: c.Concurrency, MaxLength: c.MaxLength, MaxTokens: c.MaxTokens,
		Temperature: c.Temperature, TopP: c.TopP, Seed: c.Seed, VLLM: c.VLLM, Model: c.Model,
		LLMMaxInFlight: c.LLMMaxInFlight, NATS: c.NATS, NATSAuth: c.ConnectOptions(), SubmitOnly: c.SubmitOnly, DataDir: c.DataDir,
		Filter: filter, Remote: remote, Out: os.Stdout, Logger: cmdutil.Logger(c.LogLevel),
		ToyLLM: toyllm.Options{TokenLatency: c.ToyLatency, MaxConcurrent: c.ToyMaxConcurrent},
	}
	// The outputs are written beside their paths and replace them only once
	// the run has started: a run that fails to start leaves them as they were.
	var outputs []*fleet.Output
	defer func() {
		var closeErr error
		for _, o := range outputs {
			if cerr := o.Close(sum.Started); cerr != nil && closeErr == nil {
				closeErr = cerr
			}
		}
		if sum.Started && closeErr == nil && c.Out != "-" {
			fmt.Fprintf(os.Stderr, "wrote %d trajectories to %s\n", sum.Trajectories, c.Out)
		}
		if err == nil {
			err = closeErr
		}
	}()
	if c.Out != "-" {
		o, err := fleet.CreateOutput(c.Out)
		if err != nil {
			return sum, err
		}
		outputs = append(outputs, o)
		opts.Out = o
	}
	if c.FailuresOut != "" {
		o, err := fleet.CreateOutput(c.FailuresOut)
		if err != nil {
			return sum, err
		}
		outputs = append(outputs, o)
		opts.FailuresOut = o
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		var bar *progressbar.ProgressBar
		opts.Progress = func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("episodes"), progressbar.OptionShowCount(),
					progressbar.OptionShowIts(), progressbar.OptionSetItsString("ep"),
					progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
			}
			_ = bar.Set(done)
		}
	}
	sum, err = fleet.Run(ctx, opts)
	if sum.Started {
		if len(sum.PerEnv) > 1 {
			fmt.Fprint(os.Stderr, sum.Table())
		}
		fmt.Fprintln(os.Stderr, sum.String())
	}
	return sum, err
}
