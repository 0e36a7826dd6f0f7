// Command envworker runs an env worker: it pulls episodes from NATS
// JetStream and drives their turn loops until SIGINT/SIGTERM, then drains.
package main

import (
	"fmt"
	"time"

	"github.com/alecthomas/kong"

	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/remoteenv"
)

type cli struct {
	cmdutil.Fleet
	Concurrency    int           `default:"256" help:"Most episodes in flight in this process."`
	Durable        string        `default:"envworker" help:"Shared consumer name."`
	Env            string        `help:"Host only these envs: a comma-separated list of ids and patterns such as 'game:*' (default: every env). Sets in use must not overlap."`
	Remote         []string      `sep:"none" help:"Host a remote env served over HTTP: ID=KIND,URL with KIND http-gym or http-verify (repeatable)."`
	AckWait        time.Duration `default:"1m" help:"Redelivery timeout of an episode whose worker stopped signalling progress (a crash): it then resumes elsewhere."`
	MaxDeliver     int           `default:"5" help:"Deliveries of an episode before its failure is recorded."`
	RequestTimeout time.Duration `default:"180s" help:"Longest wait for one generate or tokenize reply; a request cut off by a crash is retried after it."`
	MaxStaleness   int32         `default:"-1" help:"Staleness bound of episodes whose request sets none: a turn starts only while the fleet's policy version minus the first turn's is at most this (-1: none)."`
	StalePolicy    string        `default:"drop" enum:"drop,restart,keep" help:"Past the bound, for episodes whose request says nothing: drop (a failure of kind stale), restart (play it again under the current policy) or keep (finish and flag it)."`
	MaxRestarts    int           `default:"3" help:"Restarts of one episode under the restart policy before it is dropped as stale."`
	MathJudge      string        `placeholder:"MODEL_OR_URL" help:"The LLM judge of math episodes that ask for one (rollout run --math-judge): a model name (the fleet's LLM workers serve it) or a vLLM URL (this process runs an LLM worker for it on subjects under the prefix with 'judge' appended). Without it such episodes keep the grader's word."`
	MathStrict     bool          `help:"Grade math episodes whose env options do not set strict strictly: a decimal that only rounds to the expected value at 6 places and an unlabelled equation's right-hand side, which NeMo Gym's grader rewards, are wrong."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet env worker"))
	cmdutil.Main("envworker", c.Fleet, func(p cmdutil.Process) error {
		remote, err := cmdutil.RemoteEnvs(c.Remote)
		if err != nil {
			return err
		}
		var hosted []string
		if c.Env != "" {
			if hosted, err = remoteenv.Match(c.Env, remote); err != nil {
				return fmt.Errorf("--env: %w", err)
			}
		}
		opts := envactor.Options{
			Concurrency: c.Concurrency, Subjects: p.Subjects, Durable: c.Durable, Envs: hosted, Remote: remote,
			AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, RequestTimeout: c.RequestTimeout, Logger: p.Log,
			MaxStaleness: &c.MaxStaleness, StalePolicy: c.StalePolicy, MaxRestarts: restarts(c.MaxRestarts),
			MathStrict: c.MathStrict,
			Tracer:     p.Tracing.Tracer("rollfleet/envworker"),
			Metrics:    p.Metrics.Env(),
		}
		if c.MathJudge != "" {
			jo, jw, err := envactor.NewJudge(p.NC, c.MathJudge, p.Subjects, p.Log)
			if err != nil {
				return fmt.Errorf("--math-judge: %w", err)
			}
			opts.Judge = jo
			if jw != nil {
				stop, err := jw.Start(p.Ctx)
				if err != nil {
					return fmt.Errorf("--math-judge: %w", err)
				}
				// Stopped after the env worker (deferred), whose last
				// episodes may still ask it.
				defer stop()
			}
		}
		w, err := envactor.New(p.NC, p.JS, opts)
		if err != nil {
			return err
		}
		unexpose, err := p.Expose(w)
		if err != nil {
			return err
		}
		defer unexpose()
		return w.Run(p.Ctx)
	})
}

// restarts maps --max-restarts to Options.MaxRestarts, where 0 means the
// default: a flag of 0 allows none.
func restarts(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
