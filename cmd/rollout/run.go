package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

type runCmd struct {
	Env                string           `default:"game:GuessTheNumber-v0" help:"Env id, or a comma-separated list of ids and patterns such as 'game:*' taken in turn (used when a dataset row names none)."`
	Episodes           int              `help:"Number of episodes (a multiple of --n-samples). With --dataset, 0 runs every row once."`
	Dataset            string           `type:"existingfile" help:"JSONL rows: {prompt, label, env?, obs_style?}, math {question, expected_answer}, or NeMo Gym data items."`
	ObsStyle           string           `default:"chat" enum:"chat,concat,qwen3_game" help:"How observations become prompts: chat (one multi-turn conversation in the model's chat template, see --chat-template), concat (GEM's history prompt per turn, one sample per turn) or qwen3_game (concat in GEM's qwen3_game template)."`
	ApplyChatTemplate  bool             `help:"Wrap dataset prompts as the first user turn of the chat template."`
	ChatTemplate       string           `default:"model" enum:"model,chatml" help:"Chat template of chat-style episodes: model renders the model's own on the model server (its first prompt, and every feedback turn as the template puts it after the model's turn); chatml is rollfleet's ChatML, for a server that cannot render."`
	ChatTemplateKwargs string           `placeholder:"JSON" help:"Extra chat template variables for every render, a JSON object such as '{\"enable_thinking\": false}'."`
	NSamples           int              `default:"1" help:"Samples per prompt (group size)."`
	Concurrency        int              `default:"256" help:"Most episodes in flight."`
	SubmitWindow       int              `help:"Most submitted episodes not yet decided (default twice --concurrency, at least 4096)."`
	MaxLength          int              `default:"4096" help:"Whole-trajectory token budget."`
	MaxTokens          int              `default:"256" help:"Per-turn generation cap (0 = the whole remaining budget)."`
	PromptOverflow     string           `default:"fail" enum:"fail,truncate-left" help:"A prompt longer than --max-length minus --max-tokens: fail its episode (failure kind prompt_too_long) or truncate-left (cut the start of its content, never the chat template's role headers)."`
	MaxStaleness       *int32           `help:"Staleness bound of each episode: a turn starts only while the fleet's policy version minus the first turn's is at most this (default: the env workers', none unless they set one)."`
	StalePolicy        string           `enum:",drop,restart,keep" default:"" help:"Past --max-staleness: drop (a failure of kind stale), restart (play it again under the current policy) or keep (finish and flag it); default the env workers' (drop)."`
	Temperature        float64          `default:"1" help:"Sampling temperature."`
	TopP               float64          `default:"1" help:"Nucleus sampling."`
	Seed               *uint64          `help:"Seed for a reproducible run (random if unset)."`
	Out                string           `default:"trajectories.jsonl" help:"Trajectory JSONL file ('-' for stdout), replaced only when the run finishes; with --filter only the kept groups' trajectories."`
	MathJudge          string           `placeholder:"MODEL_OR_URL" help:"Ask an LLM judge about math answers the grader rejects, both ways round, as NeMo Gym's math server does (off by default): a model name (the run's model judges) or a vLLM URL; its prompts and verdicts go to judge_evaluations."`
	MathStrict         bool             `help:"Grade math answers strictly: a decimal that only rounds to the expected value at 6 places (0.333333 for 1/3) and an unlabelled equation's right-hand side (2x+z=1 for 1), both of which NeMo Gym's grader rewards, are wrong."`
	Format             string           `default:"openrlhf" enum:"openrlhf,nemo-gym" help:"Format of --out: openrlhf (trajectories with OpenRLHF's fields) or nemo-gym (results as NeMo Gym's rollout collection writes them: responses_create_params, response, reward, the verifier's fields, _ng_task_index, _ng_rollout_index, agent_ref)."`
	FailuresOut        string           `help:"Also write failure records as JSONL to this file (replaced as --out is)."`
	GroupsOut          string           `help:"Also write groups as JSONL to this file, one object per group with its trajectories (replaced as --out is)."`
	Resume             string           `placeholder:"RUN_ID" help:"Continue the interrupted run RUN_ID (same --out): episodes already written are not played again, none is written twice."`
	Remote             []string         `sep:"none" help:"Also host a remote env served over HTTP: ID=KIND,URL with KIND http-gym or http-verify (repeatable)."`
	VLLM               []string         `sep:"," help:"vLLM base URL(s); default: the built-in stand-in model."`
	Model              string           `help:"Served model name (default: the server's first)."`
	LLMMaxInFlight     cmdutil.InFlight `default:"auto" help:"Most concurrent requests per model server: auto adapts it to each server's load from its /metrics (requests running and waiting, KV-cache usage) and its latency, starting at 64; a number fixes it."`
	LLMRouting         string           `default:"sticky" enum:"sticky,sticky-wait,least-loaded,round-robin" help:"How requests are spread over the model servers: sticky (each episode on its own server, for its prefix cache, or the least-loaded one when that is full), sticky-wait (sticky, but wait up to --llm-routing-wait for a slot of the episode's server before going elsewhere), least-loaded or round-robin."`
	LLMRoutingWait     time.Duration    `default:"1s" help:"With sticky-wait routing: how long a request waits for a slot of its episode's server before going to another."`
	NATS               string           `help:"External NATS URL(s) instead of the embedded server."`
	SubmitOnly         bool             `help:"With --nats: submit and collect only; a fleet of separate processes does the work."`
	DataDir            string           `help:"Embedded server data dir (default: a temp dir, removed afterwards)."`
	Sync               string           `placeholder:"always|DURATION" help:"Embedded server: when JetStream syncs its store to disk: always (before acknowledging each write; the default with --data-dir) or an interval such as 2m (nats-server's default; the default on a temp dir, which a crash loses anyway), which loses the writes acknowledged in the last interval on a power loss or OS crash."`
	Filter             bool             `help:"Dynamic filtering of groups by mean score inside --filter-range."`
	FilterRange        []float64        `default:"0,1" sep:"," help:"Low,high bounds for --filter."`
	ToyLatency         time.Duration    `help:"Stand-in model: simulated time per generated token."`
	ToyMaxConcurrent   int              `help:"Stand-in model: cap on concurrently generating sequences (0 = none)."`
	ToyCache           toyCacheFlags    `embed:"" prefix:"toy-"`
	Tokenizer          string           `type:"existingdir" placeholder:"DIR" help:"Stand-in model: serve this Hugging Face tokenizer directory's vocabulary and chat template (tokenizer.json, tokenizer_config.json) instead of its byte-level ChatML toy; scripts/fetch-tokenizers.sh fetches real ones into .cache/tokenizers."`
	Timeout            time.Duration    `help:"Give up after this long (0 = never)."`
	LogLevel           string           `default:"warn" enum:"debug,info,warn,error" help:"Log level (logs go to stderr)."`
	LogFormat          string           `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
	OTLP               string           `placeholder:"URL" help:"Send the embedded workers' OpenTelemetry spans to this OTLP/HTTP collector (http://host:4318); off when empty."`
	Metrics            string           `placeholder:"ADDR" help:"Serve Prometheus metrics (/metrics), liveness (/healthz) and readiness (/readyz) over HTTP on this address (host:port) while the run lasts."`
	Dashboard          string           `placeholder:"ADDR" help:"Serve a live dashboard of the run on ADDR (host:port; port 0: any free port; the URL is printed)."`
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
	run := jobs.NewRunID()
	if c.Resume != "" {
		// A run that finished removes its manifest before its ledger: one
		// whose end a crash cut short may have only its ledger left.
		err := c.loadManifest()
		if err != nil && !errors.Is(err, fleet.ErrNoPartialOutput) {
			return sum, err
		}
		if done, ferr := c.finishedBefore(); done || ferr != nil {
			return sum, ferr
		}
		if err != nil {
			return sum, err
		}
		run = c.Resume
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
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat)
	exp, stopTracing, err := cmdutil.StartTracing(ctx, c.OTLP, "rollout", log)
	if err != nil {
		return sum, fmt.Errorf("--otlp: %w", err)
	}
	defer stopTracing()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	kwargs, err := templateKwargs(c.ChatTemplateKwargs)
	if err != nil {
		return sum, err
	}
	var toyTok *toyllm.ModelTokenizer
	if c.Tokenizer != "" && len(c.VLLM) == 0 {
		if toyTok, err = toyllm.LoadModelTokenizer(c.Tokenizer, ""); err != nil {
			return sum, fmt.Errorf("--tokenizer: %w", err)
		}
	}
	toyOpts := toyllm.Options{TokenLatency: c.ToyLatency, MaxConcurrent: c.ToyMaxConcurrent, Tokenizer: toyTok}
	if err := c.ToyCache.apply(&toyOpts); err != nil {
		return sum, fmt.Errorf("stand-in model: %w", err)
	}
	opts := fleet.Options{
		Env: c.Env, Episodes: c.Episodes, Dataset: c.Dataset, ObsStyle: c.ObsStyle, ApplyChatTemplate: c.ApplyChatTemplate,
		ChatTemplateName: templateName(c.ChatTemplate), ChatTemplateKwargs: kwargs,
		NSamples: c.NSamples, Concurrency: c.Concurrency, MaxLength: c.MaxLength, MaxTokens: c.MaxTokens, PromptOverflow: c.PromptOverflow,
		MaxStaleness: c.MaxStaleness, StalePolicy: c.StalePolicy,
		Temperature: c.Temperature, TopP: c.TopP, Seed: c.Seed, VLLM: c.VLLM, Model: c.Model,
		LLMMaxInFlight: int(c.LLMMaxInFlight), LLMRouting: c.LLMRouting, LLMRoutingWait: c.LLMRoutingWait, NATS: c.NATS, NATSAuth: c.ConnectOptions(), SubmitOnly: c.SubmitOnly, DataDir: c.DataDir, Sync: c.Sync,
		Filter: filter, Remote: remote, Out: os.Stdout, Format: c.Format, MathJudge: c.MathJudge, MathStrict: c.MathStrict, Logger: log, RunID: run, SubmitWindow: c.SubmitWindow,
		Tracer: exp.Tracer("rollfleet/rollout"),
		ToyLLM: toyOpts,
	}
	if opts.Seed == nil {
		// Drawn here so that the manifest can make the same episodes again.
		s := rand.Uint64()
		opts.Seed = &s
	}
	if c.Dashboard != "" {
		closeDashboard, err := startRunDashboard(c.Dashboard, &opts, opts.Logger)
		if err != nil {
			return sum, err
		}
		defer closeDashboard()
	}
	files, err := c.openRunFiles(&opts)
	if err != nil {
		return sum, err
	}
	defer func() {
		if cerr := files.close(sum, err); err == nil {
			err = cerr
		}
	}()
	if term.IsTerminal(int(os.Stderr.Fd())) {
		// The progress, the policy and the stream watchers call from their
		// own goroutines.
		var mu sync.Mutex
		var bar *progressbar.ProgressBar
		full, paused := "", ""
		newBar := func(total int) {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription("episodes"+paused+full), progressbar.OptionShowCount(),
				progressbar.OptionShowIts(), progressbar.OptionSetItsString("ep"),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		}
		opts.Progress = func(done, total int) {
			mu.Lock()
			defer mu.Unlock()
			if bar == nil {
				newBar(total)
			}
			_ = bar.Set(done)
		}
		opts.Full = func(kinds []string) {
			mu.Lock()
			defer mu.Unlock()
			full = ""
			for _, k := range kinds {
				full += " [" + k + " stream full: no consumer is reading]"
			}
			if bar != nil {
				bar.Describe("episodes" + paused + full)
			}
		}
		opts.Policy = func(st messages.PolicyState) {
			mu.Lock()
			defer mu.Unlock()
			paused = ""
			if st.Paused {
				paused = fmt.Sprintf(" [paused for a weight update, policy v%d]", st.Version)
			}
			if bar != nil {
				bar.Describe("episodes" + paused + full)
			}
		}
	}
	m, stopMetrics, err := cmdutil.ServeMetrics(c.Metrics, opts.Logger)
	if err != nil {
		return sum, err
	}
	defer stopMetrics()
	opts.Metrics = m
	sum, err = fleet.Run(ctx, opts)
	if sum.Started {
		if len(sum.PerEnv) > 1 {
			fmt.Fprint(os.Stderr, sum.Table())
		}
		fmt.Fprintln(os.Stderr, sum.String())
	}
	return sum, err
}

// loadManifest takes the interrupted run's job from its manifest beside
// --out: the flags that define its episodes are the manifest's.
func (c *runCmd) loadManifest() error {
	if c.Out == "-" {
		return errors.New("--resume needs the --out file of the interrupted run")
	}
	m, err := fleet.LoadManifest(c.Out, c.Resume)
	if err != nil {
		return err
	}
	c.Env, c.Episodes, c.Dataset, c.ObsStyle, c.ApplyChatTemplate = m.Env, m.Episodes, m.Dataset, m.ObsStyle, m.ApplyChatTemplate
	c.ChatTemplate, c.ChatTemplateKwargs = cmp.Or(m.ChatTemplate, "model"), string(m.ChatTemplateKwargs)
	c.Tokenizer = cmp.Or(c.Tokenizer, m.Tokenizer)
	c.NSamples, c.MaxLength, c.MaxTokens, c.Temperature, c.TopP = m.NSamples, m.MaxLength, m.MaxTokens, m.Temperature, m.TopP
	c.Seed = &m.Seed
	c.Filter, c.FilterRange = m.Filter != nil, m.Filter
	if !c.Filter {
		c.FilterRange = []float64{0, 1}
	}
	c.FailuresOut, c.GroupsOut, c.PromptOverflow = m.FailuresOut, m.GroupsOut, cmp.Or(m.PromptOverflow, c.PromptOverflow)
	c.Format, c.MathJudge, c.MathStrict = cmp.Or(m.Format, fleet.FormatOpenRLHF), m.MathJudge, m.MathStrict
	// Where the work is done is the run's too, unless told: its NATS or
	// data dir (a fleet that moved is given with --nats), and a fleet's
	// run stays one.
	if c.NATS == "" && c.DataDir == "" {
		c.NATS, c.DataDir = m.NATS, m.DataDir
	}
	c.SubmitOnly = c.SubmitOnly || m.SubmitOnly
	return nil
}

// manifest is what defines the run's episodes and where they are played.
func (c *runCmd) manifest(opts *fleet.Options) (fleet.Manifest, error) {
	m := fleet.Manifest{
		RunID: opts.RunID, Env: c.Env, Episodes: c.Episodes, Dataset: c.Dataset, ObsStyle: c.ObsStyle,
		ApplyChatTemplate: c.ApplyChatTemplate, NSamples: c.NSamples, MaxLength: c.MaxLength, MaxTokens: c.MaxTokens,
		Temperature: c.Temperature, TopP: c.TopP, Seed: *opts.Seed, FailuresOut: c.FailuresOut, GroupsOut: c.GroupsOut,
		PromptOverflow: c.PromptOverflow, Format: c.Format, MathJudge: c.MathJudge, MathStrict: c.MathStrict,
		NATS: bus.StripUserinfo(c.NATS), SubmitOnly: c.SubmitOnly,
		ChatTemplate: opts.ChatTemplateName, ChatTemplateKwargs: opts.ChatTemplateKwargs, Tokenizer: c.Tokenizer,
	}
	if opts.Filter != nil {
		m.Filter = []float64{opts.Filter.Low, opts.Filter.High}
	}
	if c.DataDir != "" {
		// Absolute, so that a resume from another directory finds it.
		dir, err := filepath.Abs(c.DataDir)
		if err != nil {
			return m, fmt.Errorf("--data-dir: %w", err)
		}
		m.DataDir = dir
	}
	return m, nil
}

// resumeHint is the command that continues run, as the user can paste it:
// --resume takes the rest from the manifest, but not credentials.
func (c *runCmd) resumeHint(run string) string {
	hint := "rollout run --resume " + run + " --out " + shellQuote(c.Out)
	if bus.StripUserinfo(c.NATS) != c.NATS {
		hint += " --nats URL (with the credentials it had)"
	}
	if c.ConnectOptions().Method() != "" {
		hint += " (with the same NATS credentials)"
	}
	return hint
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runFiles are a run's outputs, ledger and manifest.
type runFiles struct {
	out, run string
	// resume: the files are an interrupted run's, kept whatever happens
	// until the run finishes.
	resume  bool
	hint    string // the command that continues the run
	outputs []*fleet.Output
	ledger  *fleet.Ledger
}

// openRunFiles creates (or, resuming, reopens) the run's ledger and
// manifest beside --out and its outputs beside their paths. The ledger
// comes first: it holds the run's lock, so that a second process touches
// none of the files.
func (c *runCmd) openRunFiles(opts *fleet.Options) (*runFiles, error) {
	f := &runFiles{out: c.Out, run: opts.RunID, resume: c.Resume != "", hint: c.resumeHint(opts.RunID)}
	if c.Out != "-" {
		l, err := fleet.OpenLedger(c.Out, opts.RunID, f.resume)
		if err != nil {
			return nil, err
		}
		f.ledger, opts.Ledger = l, l
	}
	var outs [3]*fleet.Output // trajectories, failures, groups
	for k, path := range c.outputPaths() {
		if path == "" || path == "-" {
			continue
		}
		o, err := fleet.CreateOutput(path, opts.RunID, f.resume)
		if err != nil {
			f.abandon()
			return nil, err
		}
		f.outputs = append(f.outputs, o)
		outs[k] = o
	}
	if outs[0] != nil {
		opts.Out = outs[0]
	}
	if outs[1] != nil {
		opts.FailuresOut = outs[1]
	}
	if outs[2] != nil {
		opts.GroupsOut = outs[2]
	}
	if f.ledger == nil {
		return f, nil
	}
	if f.resume {
		err := f.ledger.Scan(fleet.LedgerFiles{
			Trajectories: outs[0], Failures: outs[1], Groups: outs[2], GroupSize: max(c.NSamples, 1), TrajectoriesFromGroups: opts.Filter != nil,
		})
		if err != nil {
			f.abandon()
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "resuming run %s: %d episodes written before\n", opts.RunID, f.ledger.Episodes())
		return f, nil
	}
	m, err := c.manifest(opts)
	if err == nil {
		err = fleet.SaveManifest(c.Out, m)
	}
	if err != nil {
		f.abandon()
		return nil, err
	}
	return f, nil
}

// outputPaths are the run's trajectories, failures and groups outputs; a
// path may be empty (none) or "-" (stdout).
func (c *runCmd) outputPaths() [3]string { return [3]string{c.Out, c.FailuresOut, c.GroupsOut} }

// finishedBefore reports whether the run being resumed had finished, its
// ledger marked so, and a crash cut short the end that moves its outputs
// over their destinations and removes its manifest and ledger; if so it
// completes that end.
func (c *runCmd) finishedBefore() (bool, error) {
	l, err := fleet.OpenLedger(c.Out, c.Resume, true)
	if errors.Is(err, fleet.ErrNoPartialOutput) {
		return false, nil // the resume itself says what is missing
	}
	if err != nil {
		return false, err
	}
	if !l.Finished() {
		return false, l.Close(false)
	}
	f := &runFiles{out: c.Out, run: c.Resume, resume: true, hint: c.resumeHint(c.Resume), ledger: l}
	for _, path := range c.outputPaths() {
		if path == "" || path == "-" {
			continue
		}
		o, err := fleet.CreateOutput(path, c.Resume, true)
		if errors.Is(err, fleet.ErrNoPartialOutput) {
			continue // moved over its destination before the crash
		}
		if err != nil {
			f.abandon()
			return true, err
		}
		f.outputs = append(f.outputs, o)
	}
	if err := f.finish(); err != nil {
		return true, err
	}
	fmt.Fprintf(os.Stderr, "run %s had finished: its trajectories are in %s\n", c.Resume, c.Out)
	return true, nil
}

// abandon ends the files of a run that did not start. A new run's are
// removed: nothing was written, and the files that were there stay as
// they were. An interrupted run's are kept as they are, for the next
// --resume: only a run that finished removes them.
func (f *runFiles) abandon() {
	for _, o := range f.outputs {
		if f.resume {
			_ = o.Suspend()
		} else {
			_ = o.Discard()
		}
	}
	if f.ledger != nil {
		_ = f.ledger.Close(!f.resume)
		if !f.resume {
			_ = fleet.RemoveManifest(f.out, f.run)
		}
	}
}

// close ends the run's files: a finished run's outputs replace their
// destinations; an unfinished one's stay for --resume, as do those of an
// interrupted run whose resume did not start; a new run that never
// started leaves no trace.
func (f *runFiles) close(sum fleet.Summary, runErr error) error {
	if !sum.Started {
		f.abandon()
		if f.resume && f.ledger != nil {
			fmt.Fprintf(os.Stderr, "run %s not resumed: its files are kept as they were; once the cause is mended, continue it with: %s\n", f.run, f.hint)
		}
		return nil
	}
	if runErr != nil {
		err := f.suspend()
		if f.ledger != nil {
			fmt.Fprintf(os.Stderr, "run %s unfinished: what it wrote is kept; continue it with: %s\n", f.run, f.hint)
		}
		return err
	}
	if err := f.finish(); err != nil {
		return err
	}
	if f.out != "-" {
		fmt.Fprintf(os.Stderr, "wrote %d trajectories to %s\n", sum.AllTrajectories(), f.out)
	}
	return nil
}

// suspend keeps the files of a run that started but did not finish, for
// --resume.
func (f *runFiles) suspend() error {
	var errs []error
	for _, o := range f.outputs {
		errs = append(errs, o.Suspend())
	}
	if f.ledger != nil {
		errs = append(errs, f.ledger.Close(false))
	}
	return errors.Join(errs...)
}

// finish ends the files of a run that finished in an order that a power
// loss at any instant leaves either unfinished or marked finished, which
// --resume completes: the outputs synced, then the ledger marked finished,
// each output moved over its destination, the manifest removed and last
// the ledger.
func (f *runFiles) finish() error {
	var errs []error
	for _, o := range f.outputs {
		errs = append(errs, o.Sync())
	}
	if f.ledger != nil && !f.ledger.Finished() && errors.Join(errs...) == nil {
		errs = append(errs, f.ledger.MarkFinished())
	}
	if err := errors.Join(errs...); err != nil {
		return errors.Join(err, f.suspend())
	}
	for _, o := range f.outputs {
		errs = append(errs, o.Finish())
	}
	if f.ledger == nil {
		return errors.Join(errs...)
	}
	if errors.Join(errs...) == nil {
		// Already gone when a crash cut short a finish that removed it.
		if err := fleet.RemoveManifest(f.out, f.run); !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "run %s finished, but its files were not all moved in place; complete it with: %s\n", f.run, f.hint)
		return errors.Join(err, f.ledger.Close(false))
	}
	return f.ledger.Close(true)
}

// templateName is the messages.EpisodeRequest.ChatTemplateName of a
// --chat-template value.
func templateName(flag string) string {
	if flag == "model" {
		return ""
	}
	return flag
}

// templateKwargs checks --chat-template-kwargs: empty, or a JSON object.
func templateKwargs(flag string) ([]byte, error) {
	if flag == "" {
		return nil, nil
	}
	if !messages.IsJSONObject([]byte(flag)) {
		return nil, fmt.Errorf("--chat-template-kwargs must be a JSON object, got %.64q", flag)
	}
	return []byte(flag), nil
}
