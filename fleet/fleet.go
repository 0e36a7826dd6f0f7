// Package fleet runs a whole rollout job: it brings up (or connects to) NATS,
// starts the env worker, LLM worker and collector actors and the built-in
// stand-in model when no vLLM server is given, submits the episodes (made by
// package jobs) and reads their outcomes through the trainer client
// (package trainer), and streams the resulting trajectories out as
// OpenRLHF-ready JSONL.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
	"github.com/rollfleet/rollfleet/remoteenv"
	"github.com/rollfleet/rollfleet/toyllm"
	"github.com/rollfleet/rollfleet/trainer"
)

// Options describes one rollout job. Zero values take the defaults noted.
type Options struct {
	// Env is the env id, or a comma-separated list of ids and patterns such
	// as "game:*", used in turn by prompts whose dataset row names none.
	Env string
	// Episodes is the number of episodes (n samples per prompt count
	// separately). With a dataset, 0 means every row once.
	Episodes int
	// Dataset is a JSONL file of rows {"prompt", "label", "env"?,
	// "obs_style"?}, {"question", "expected_answer"} math rows, or NeMo Gym
	// data items; empty runs the env's own instructions as the prompt.
	Dataset string
	// ObsStyle is the observation style of rows that name none
	// (messages.ObsChat when empty).
	ObsStyle string
	// ApplyChatTemplate wraps dataset prompts as the first user turn of the
	// model's chat template.
	ApplyChatTemplate bool
	// ChatTemplateName is empty for the model's own chat template, rendered
	// by the model server, or messages.TemplateChatML; ChatTemplateKwargs a
	// JSON object of extra template variables (such as
	// {"enable_thinking": false}) for every render, or empty.
	ChatTemplateName   string
	ChatTemplateKwargs []byte
	// PromptOverflow is what happens to a prompt longer than the budget
	// (messages.PromptOverflowFail when empty, or PromptOverflowTruncateLeft).
	PromptOverflow string
	// NSamples is n samples per prompt (default 1).
	NSamples int
	// Concurrency is the env worker's episode limit (default 256).
	Concurrency int
	// MaxLength is the whole-trajectory token budget (default 4096).
	MaxLength int
	// MaxTokens caps each turn's generation; 0 leaves each turn the whole
	// remaining budget, as OpenRLHF does without a cap.
	MaxTokens int
	// Temperature (default 1) and TopP (default 1) are sampling parameters.
	Temperature, TopP float64
	// Seed makes the run reproducible; nil draws one.
	Seed *uint64
	// VLLM lists model server URLs; empty starts the built-in stand-in.
	VLLM []string
	// Model is the served model name (empty: the server's first).
	Model string
	// ModelCheckTimeout bounds the check of each VLLM server before the run
	// (see CheckModels; default 10s).
	ModelCheckTimeout time.Duration
	// LLMMaxInFlight, when positive, is a fixed bound on requests per model
	// endpoint; 0 (the default) adapts each bound to its server's load
	// (llm.Options.MaxInFlight).
	LLMMaxInFlight int
	// LLMRouting and LLMRoutingWait are the LLM worker's routing policy
	// over the model servers and its wait bound (llm.Options.Routing and
	// RoutingWait; empty and 0 take their defaults).
	LLMRouting     string
	LLMRoutingWait time.Duration
	// NATS is an external server URL list; empty runs an embedded server.
	NATS string
	// NATSAuth adds credentials and TLS to the connections to NATS.
	NATSAuth bus.ConnectOptions
	// DataDir holds the embedded server's store; empty uses a temp dir that
	// is removed afterwards. The run holds the dir's lock: a second process
	// on it fails with bus.ErrDataDirInUse.
	DataDir string
	// Sync is the embedded server's sync policy (bus.ServerOptions.Sync).
	// Empty: bus.SyncAlways with a DataDir, bus.TempStoreSync on a temp
	// dir (a resumed run reads its ledger and outputs, never the store).
	Sync string
	// SubmitOnly submits and collects without starting actors: a fleet of
	// separate processes does the work.
	SubmitOnly bool
	// Filter enables dynamic filtering of groups in the collector.
	Filter *collector.ScoreRange
	// MaxDeliver is how often an episode is delivered to an env worker
	// before its failure is recorded (default 5): an outage of the model
	// side hands episodes back, and they resume when it is over.
	MaxDeliver int
	// Remote lists remote envs (served over HTTP) the embedded env worker
	// hosts; their ids may be used like registered ones.
	Remote []remoteenv.Config
	// ToyLLM configures the stand-in model (latency, capacity, recording).
	ToyLLM toyllm.Options
	// RunID names the run (default: a fresh jobs.NewRunID). Its episodes,
	// steps and outcomes carry it, so runs sharing a server never mix; the
	// same id with a Ledger resumes an interrupted run.
	RunID string
	// Ledger, when set, records each episode and group as it is written,
	// and what it held already (a resumed run's) is neither submitted nor
	// written again.
	Ledger *Ledger
	// SubmitWindow bounds how many submitted episodes may be undecided
	// (default max(2×Concurrency, 4096)).
	SubmitWindow int
	// Streams configures the streams, when they are created.
	Streams bus.StreamOptions
	// Out receives one trajectory JSON object per line; nil discards. With
	// Filter it receives only the trajectories of kept groups. Nothing is
	// written before the run has started (Summary.Started).
	Out io.Writer
	// MathJudge, when set, asks an LLM judge about the math answers the
	// grader rejects, both ways round, as NeMo Gym's math server does: a
	// model name (the LLM workers' model judges; the name is recorded) or
	// the URL of a vLLM server, which an LLM worker of its own serves on
	// envactor.JudgeSubjects.
	MathJudge string
	// MathStrict grades math episodes with mathgrade's Strict options (the
	// math envs' strict option) instead of NeMo Gym's.
	MathStrict bool
	// Format is the format of Out's lines: FormatOpenRLHF (when empty) or
	// FormatNeMoGym.
	Format string
	// FailuresOut receives one failure record JSON object per line; nil discards.
	FailuresOut io.Writer
	// GroupsOut receives one group JSON object per line, with its
	// trajectories; nil discards.
	GroupsOut io.Writer
	// Progress is called after every finished episode.
	Progress func(done, total int)
	// MaxStaleness, when set, bounds how far the policy may move on during
	// an episode (see messages.EpisodeRequest.MaxStaleness); nil leaves the
	// env workers' default. StalePolicy is what happens past the bound
	// (messages.StaleDrop, StaleRestart or StaleKeep; empty leaves the env
	// workers' default).
	MaxStaleness *int32
	StalePolicy  string
	// Policy is called with the fleet's policy state at the start and at
	// each change (a pause, a resume, a new version).
	Policy func(messages.PolicyState)
	// Full is called when the set of output streams that refuse records for
	// being full changes ("trajectory", "failure", "group"): the run waits
	// for a reader, and says so.
	Full func(kinds []string)
	// Metrics, when set, receives the measurements of the run's actors and
	// connection (see package metrics); the caller serves them.
	Metrics *metrics.Metrics
	// Attach, when set, is called once the run's NATS server is up and its
	// streams exist, before anything is submitted, with a function that
	// opens named connections to it: an observer (the dashboard) watches the
	// run through it. Its stop is called when the run ends, after the actors
	// have stopped and before its connections are drained; an error ends the
	// run before it starts.
	Attach func(connect func(name string) (*nats.Conn, error)) (stop func(), err error)
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Tracer, when set, records the spans of the embedded env worker, LLM
	// worker and collector (see package tracing); nil records none.
	Tracer trace.Tracer
}

func (o *Options) setDefaults() {
	if o.NSamples <= 0 {
		o.NSamples = 1
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 256
	}
	if o.SubmitWindow <= 0 {
		o.SubmitWindow = max(2*o.Concurrency, 4096)
	}
	// The episodes' own defaults (MaxLength, Temperature, TopP, Seed) are
	// jobs.Options'.
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Run executes the job and returns its summary. It returns when every
// submitted episode has ended as a trajectory or a failure, or ctx ends.
//
// Before anything is submitted it checks its inputs (envs, dataset rows),
// the model servers (CheckModels, when VLLM lists any and the actors run
// here), takes the data dir and starts the readers of the run's outputs:
// an error then comes with Summary.Started false and nothing written.
// ExitStatus maps the result to rollout run's exit status.
//
// Episodes are submitted as the run goes, at most SubmitWindow ahead of
// those decided, so a run of any length holds only what is in flight, and
// a run whose outcomes cannot be stored (an output stream full) stops
// submitting instead of queueing more work.
func Run(ctx context.Context, opts Options) (Summary, error) {
	opts.setDefaults()
	start := time.Now()
	p, err := newPlan(opts)
	if err != nil {
		return Summary{}, err
	}
	if !opts.SubmitOnly && len(opts.VLLM) > 0 {
		if err := CheckModels(ctx, opts.VLLM, opts.Model, opts.ModelCheckTimeout, opts.Logger); err != nil {
			return Summary{}, err
		}
	}

	var stack cleanup
	defer stack.run()
	connect, err := startBus(&stack, opts)
	if err != nil {
		return Summary{}, err
	}
	nc, err := connect("rollout")
	if err != nil {
		return Summary{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Summary{}, fmt.Errorf("fleet: jetstream: %w", err)
	}
	subj := messages.NewSubjects("")
	if err := bus.EnsureStreams(ctx, js, subj, opts.Streams); errors.Is(err, bus.ErrStreamMismatch) {
		opts.Logger.Warn("streams left as they are", "err", err)
	} else if err != nil {
		return Summary{}, err
	}
	opts.Metrics.WatchNATS(nc, js, subj)
	if opts.Attach != nil {
		stopAttached, err := opts.Attach(connect)
		if err != nil {
			return Summary{}, fmt.Errorf("fleet: attach: %w", err)
		}
		stack.push(stopAttached)
	}

	tc, err := newTrainerClient(nc, subj, opts)
	if err != nil {
		return Summary{}, err
	}
	if opts.Ledger != nil && opts.Ledger.Resumed() {
		// The interrupted run's consumers hold what they had delivered until
		// their ack wait ends; without them it is delivered again at once.
		forgetConsumers(ctx, tc, js, subj, p.RunID(), !opts.SubmitOnly, opts.Logger)
	}
	// The run's readers exist before the first submit, so nothing is missed.
	// Their callbacks block on records until the run is over.
	ctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	records := make(chan record, 1024)
	groups := true
	stopReaders, err := readOutputs(ctx, tc, p.RunID(), groups, records)
	if errors.Is(err, trainer.ErrOutputTaken) && opts.GroupsOut == nil && opts.Filter == nil {
		// A trainer reads the groups: they are its, and the run does without.
		groups = false
		opts.Logger.Info("this run's groups are read by another consumer", "err", err)
		stopReaders, err = readOutputs(ctx, tc, p.RunID(), groups, records)
	}
	if err != nil {
		return Summary{}, err
	}
	stack.push(stopReaders)
	// A finished run's consumers are deleted once its actors have stopped
	// (the stack unwinds in reverse).
	finished := false
	stack.push(func() {
		if finished {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			endRun(dctx, tc, js, subj, p.RunID(), opts.Logger)
			cancel()
		}
	})

	var coll *collector.Collector
	if !opts.SubmitOnly {
		coll, err = startActors(ctx, &stack, opts, p.RunID(), connect)
		if err != nil {
			return Summary{}, err
		}
	}

	g := newGatherer(opts, p, groups, coll)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watch sync.WaitGroup
	watch.Go(func() { watchFull(watchCtx, js, subj, coll, opts) })
	ctl, err := control.Watch(ctx, nc, control.WatchOptions{Subjects: subj, Logger: opts.Logger})
	if err != nil {
		stopWatch()
		watch.Wait()
		return Summary{}, err
	}
	defer ctl.Close()
	p.SetVersion(ctl.State().Version) // before the first episode is made
	watch.Go(func() { watchPolicy(watchCtx, ctl, p, opts.Policy) })
	batch := trainer.Batch{
		ID: p.RunID(), Plan: p.Plan, Window: opts.SubmitWindow, Decided: g.waitDecided,
		Unlisted: true,
	}
	if opts.Ledger != nil {
		batch.Skip = opts.Ledger.Written()
	}
	submitErr := make(chan error, 1)
	watch.Go(func() {
		_, err := tc.SubmitBatch(watchCtx, batch)
		submitErr <- err
	})
	sum, err := g.gather(ctx, records, submitErr)
	stopWatch()
	watch.Wait()
	sum.Wall = time.Since(start)
	finished = err == nil
	if coll != nil {
		st := coll.Stats()
		sum.GroupsFiltered, sum.GroupsIncomplete = int(st.GroupsFiltered), int(st.GroupsIncomplete)
	}
	sum.FilterOn = opts.Filter != nil
	if opts.Ledger != nil {
		sum.ResumedTrajectories, sum.ResumedFailures = opts.Ledger.Before()
	}
	return sum, err
}

// ErrEpisodesTaken means the run cannot start env workers of its own on a
// server whose episodes standing env workers already take: the run must
// be submitted to them (SubmitOnly).
var ErrEpisodesTaken = errors.New("fleet: episodes taken by other env workers")

// cleanup runs registered stop functions in reverse order.
type cleanup struct{ fns []func() }

func (c *cleanup) push(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}

// startBus starts the embedded server (or checks the external one) and
// returns a function that opens named connections to it.
func startBus(stack *cleanup, opts Options) (func(name string) (*nats.Conn, error), error) {
	track := func(nc *nats.Conn, err error) (*nats.Conn, error) {
		if err == nil {
			stack.push(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = bus.Drain(ctx, nc)
			})
		}
		return nc, err
	}
	if opts.NATS != "" {
		return func(name string) (*nats.Conn, error) {
			return track(bus.Connect(opts.NATS, name, opts.Logger, opts.NATSAuth))
		}, nil
	}
	dir := opts.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "rollfleet-")
		if err != nil {
			return nil, fmt.Errorf("fleet: data dir: %w", err)
		}
		stack.push(func() { _ = os.RemoveAll(tmp) })
		dir = tmp
	}
	syncPolicy := opts.Sync
	if syncPolicy == "" && opts.DataDir == "" {
		syncPolicy = bus.TempStoreSync
	}
	sopts := bus.ServerOptions{DontListen: true, DataDir: dir, Logger: opts.Logger, Sync: syncPolicy}
	s, err := bus.StartServer(sopts)
	if err != nil {
		return nil, err
	}
	stack.push(func() { bus.Shutdown(s) })
	// The store watchdog restarts JetStream after a full or read-only disk;
	// it stops before the server does.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	watch.Go(func() {
		if err := bus.WatchStore(watchCtx, s, sopts, bus.StoreWatchOptions{Logger: opts.Logger}); err != nil {
			opts.Logger.Error("store watchdog", "err", err)
		}
	})
	stack.push(func() { stopWatch(); watch.Wait() })
	return func(name string) (*nats.Conn, error) {
		return track(bus.ConnectInProcess(s, name))
	}, nil
}

// startActors starts the model stand-in (unless vLLM URLs are given) and the
// three actors, each on its own connection, as they would run as processes.
func startActors(ctx context.Context, stack *cleanup, opts Options, run string, connect func(string) (*nats.Conn, error)) (*collector.Collector, error) {
	endpoints := opts.VLLM
	if len(endpoints) == 0 {
		toy := opts.ToyLLM
		if toy.Logger == nil {
			toy.Logger = opts.Logger
		}
		srv := toyllm.New(toy)
		// Stopped by the stack only, after the workers: an interrupted run's
		// episodes in flight finish against it instead of failing over.
		url, stop, err := srv.Start(context.WithoutCancel(ctx), "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("fleet: start stand-in model: %w", err)
		}
		stack.push(stop)
		endpoints = []string{url}
	}
	// Connections are pushed before the actors' stop, so they close after
	// the actors have stopped.
	conns := map[string]*nats.Conn{}
	for _, name := range []string{"llmworker", "envworker", "collector"} {
		nc, err := connect(name)
		if err != nil {
			return nil, err
		}
		conns[name] = nc
	}
	lw, err := llm.New(conns["llmworker"], llm.Options{Endpoints: endpoints, Model: opts.Model, MaxInFlight: opts.LLMMaxInFlight, Routing: opts.LLMRouting, RoutingWait: opts.LLMRoutingWait, Logger: opts.Logger, Metrics: opts.Metrics.LLM(), Tracer: opts.Tracer})
	if err != nil {
		return nil, err
	}
	envJS, err := jetstream.New(conns["envworker"])
	if err != nil {
		return nil, err
	}
	colJS, err := jetstream.New(conns["collector"])
	if err != nil {
		return nil, err
	}
	envOpts := envactor.Options{Concurrency: opts.Concurrency, MaxDeliver: opts.MaxDeliver, Remote: opts.Remote, Run: run, Logger: opts.Logger, Metrics: opts.Metrics.Env(), Tracer: opts.Tracer}
	// Made here, so that a server whose episodes standing env workers
	// already take fails the run at start rather than its worker later.
	_, err = envJS.CreateOrUpdateConsumer(ctx, messages.NewSubjects("").StreamEpisodes(), envactor.ConsumerConfig(envOpts))
	if bus.IsWorkQueueOverlap(err) {
		return nil, fmt.Errorf("%w: env workers of this server take every run's episodes (%v); run with --submit-only to let them play this one", ErrEpisodesTaken, err)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: episodes consumer: %w", err)
	}
	if opts.MathJudge != "" {
		var nc *nats.Conn
		if envactor.JudgeIsURL(opts.MathJudge) {
			if nc, err = connect("judge"); err != nil {
				return nil, err
			}
		}
		jo, jw, err := envactor.NewJudge(nc, opts.MathJudge, messages.NewSubjects(""), opts.Logger)
		if err != nil {
			return nil, err
		}
		envOpts.Judge = jo
		if jw != nil {
			stop, err := jw.Start(ctx)
			if err != nil {
				nc.Close()
				return nil, fmt.Errorf("fleet: the judge's %w", err)
			}
			stack.push(func() { stop(); nc.Close() })
		}
	}
	ew, err := envactor.New(conns["envworker"], envJS, envOpts)
	if err != nil {
		return nil, err
	}
	coll := collector.New(colJS, collector.Options{Filter: opts.Filter, Logger: opts.Logger, Metrics: opts.Metrics.Collector(), Tracer: opts.Tracer})
	if err := expose(stack, opts, conns, lw, ew, coll); err != nil {
		return nil, err
	}
	// Stopped in dependency order (reverse of start): the env worker first,
	// so its episodes still have an LLM worker to finish with and a
	// collector to take their last steps.
	start := func(run func(context.Context) error) <-chan struct{} {
		actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := run(actx); err != nil {
				opts.Logger.Error("actor stopped", "err", err)
			}
		}()
		stack.push(func() { cancel(); <-done })
		return done
	}
	start(coll.Run)
	// The env worker asks the LLM worker from its first episode on.
	stopLLM, err := lw.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	stack.push(stopLLM)
	start(ew.Run)
	return coll, nil
}

// plan is the job's episodes, with the options the run's outputs need.
type plan struct {
	*jobs.Plan
	opts Options
}

// newPlan checks the job's inputs and every episode it makes.
func newPlan(opts Options) (*plan, error) {
	switch opts.Format {
	case "", FormatOpenRLHF, FormatNeMoGym:
	default:
		return nil, fmt.Errorf("fleet: output format %q: want %s", opts.Format, strings.Join(Formats, " or "))
	}
	var rows []jobs.DatasetRow
	if opts.Dataset != "" {
		var err error
		if rows, err = jobs.ReadDataset(opts.Dataset); err != nil {
			return nil, err
		}
	}
	p, err := jobs.New(opts.jobOptions(), rows)
	if err != nil {
		return nil, err
	}
	return &plan{Plan: p, opts: opts}, nil
}

// jobOptions are the options that make the job's episodes.
func (o *Options) jobOptions() jobs.Options {
	return jobs.Options{
		RunID: o.RunID, Env: o.Env, Episodes: o.Episodes, Dataset: o.Dataset, NSamples: o.NSamples,
		ObsStyle: o.ObsStyle, ApplyChatTemplate: o.ApplyChatTemplate, PromptOverflow: o.PromptOverflow,
		ChatTemplateName: o.ChatTemplateName, ChatTemplateKwargs: o.ChatTemplateKwargs,
		MaxLength: o.MaxLength, MaxTokens: o.MaxTokens, MaxStaleness: o.MaxStaleness, StalePolicy: o.StalePolicy,
		Temperature: o.Temperature, TopP: o.TopP, Seed: o.Seed,
		MathJudge: o.MathJudge != "", MathStrict: o.MathStrict, Remote: o.Remote,
	}
}
