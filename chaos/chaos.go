// Package chaos is rollfleet's chaos harness. It runs a fleet as separate OS
// processes — a NATS server, env workers, LLM workers, stand-in model servers
// and a collector — submits episodes at a steady pace, and meanwhile kills
// processes of every kind with SIGKILL at random (seeded) moments and starts
// them again, the NATS server on the same data directory and port. When the
// fleet has settled it reads every outcome back from JetStream and checks the
// promise "nothing lost": each submitted episode has exactly one trajectory or
// failure record, and every trajectory keeps the trajectory invariants and
// replays against its game.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
)

// Kind names a kind of fleet process the harness kills.
type Kind string

// The kinds of fleet process, in the order reports list them.
const (
	KindEnvWorker Kind = "envworker"
	KindLLMWorker Kind = "llmworker"
	KindCollector Kind = "collector"
	KindModel     Kind = "model"
	KindNATS      Kind = "nats"
)

// Kinds lists every kind of fleet process in report order.
var Kinds = []Kind{KindEnvWorker, KindLLMWorker, KindCollector, KindModel, KindNATS}

// Binaries are the commands the harness runs; Build puts them in one directory.
var Binaries = []string{"rollout", "envworker", "llmworker", "collector"}

// Config describes one chaos run. Zero values take the defaults noted.
type Config struct {
	// Bin is the directory holding the rollout, envworker, llmworker and
	// collector binaries (see Build). Required.
	Bin string
	// Workdir receives the NATS data directory, one log file per process and
	// the report. Empty makes a temporary directory. It is removed at the
	// end unless Keep is set or the run found a problem.
	Workdir string
	// Keep leaves the workdir in place.
	Keep bool
	// Episodes is the number of episodes submitted (default 2000).
	Episodes int
	// KillsPerKind is how many times each kind of process is killed
	// (default 20). Zero kills come from a negative value.
	KillsPerKind int
	// Kinds limits the kills to these kinds (default: all of Kinds).
	Kinds []Kind
	// Seed drives the kill schedule, the choice of victims, the down times
	// and the episodes' seeds.
	Seed uint64
	// Duration is the chaos window (default 5m): episodes are submitted at
	// a steady pace over its first nine tenths and the kills fall at
	// uniformly random moments inside it.
	Duration time.Duration
	// Timeout bounds the wait for outcomes and for the fleet to settle
	// after the window (default 20m).
	Timeout time.Duration
	// Env is the env id of every episode (default game:GuessTheNumber-v0).
	Env string
	// EnvWorkers, LLMWorkers and ModelServers are the fleet's size
	// (defaults 3, 2 and 2). One collector runs.
	EnvWorkers, LLMWorkers, ModelServers int
	// Concurrency is each env worker's episode limit (default 128).
	Concurrency int
	// ModelLatency is the stand-in model's simulated time per generated
	// token (default 40ms), so episodes last seconds and kills find
	// them in flight. Negative means none.
	ModelLatency time.Duration
	// MaxDown is the longest pause between a kill and the restart; each
	// pause is drawn uniformly from [0, MaxDown] (default 2s).
	MaxDown time.Duration
	// ReadyTimeout bounds the wait for a started process to be ready
	// (default 60s).
	ReadyTimeout time.Duration
	// RequestTimeout and AckWait, when set, are passed to the env workers
	// as --request-timeout and --ack-wait, but only if their --help lists
	// those flags; otherwise the workers keep their own defaults (180s and
	// 1m).
	RequestTimeout, AckWait time.Duration
	// Settle is how long after the last kill the harness waits at least
	// before it judges the outcomes: a request that a kill cut off leaves
	// its episode silent until the env worker's request timeout, and an
	// episode of a killed worker comes back after the ack wait. Default: the
	// longer of the two as the env workers have them, plus 30s.
	Settle time.Duration
	// Progress receives one line per notable event; nil discards them.
	Progress io.Writer
}

func (c *Config) setDefaults() {
	if c.Episodes == 0 {
		c.Episodes = 2000
	}
	if c.KillsPerKind == 0 {
		c.KillsPerKind = 20
	}
	c.KillsPerKind = max(c.KillsPerKind, 0)
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Minute
	}
	if c.Env == "" {
		c.Env = "game:GuessTheNumber-v0"
	}
	if c.EnvWorkers <= 0 {
		c.EnvWorkers = 3
	}
	if c.LLMWorkers <= 0 {
		c.LLMWorkers = 2
	}
	if c.ModelServers <= 0 {
		c.ModelServers = 2
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 128
	}
	if c.ModelLatency == 0 {
		c.ModelLatency = 40 * time.Millisecond
	}
	if c.MaxDown <= 0 {
		c.MaxDown = 2 * time.Second
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

func (c *Config) check() error {
	if c.Bin == "" {
		return errors.New("chaos: Config.Bin is required (see Build)")
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(c.Bin, b)); err != nil {
			return fmt.Errorf("chaos: binary %s: %w", b, err)
		}
	}
	for _, k := range c.Kinds {
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("chaos: unknown kind %q (want one of %v)", k, Kinds)
		}
	}
	if _, err := envs.Lookup(c.Env); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// Build compiles the fleet's binaries from the module at moduleDir into
// outDir with the go command.
func Build(ctx context.Context, moduleDir, outDir string) error {
	args := []string{"build", "-o", outDir + string(filepath.Separator)}
	for _, b := range Binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: go build: %v\n%s", err, out)
	}
	return nil
}

// harness is one run's state. The fleet's procs belong to the fleet owner
// goroutine while it runs and to Run before and after.
type harness struct {
	cfg     Config
	workdir string
	logDir  string
	rng     *rand.Rand
	t0      time.Time

	natsURL  string
	nats     *proc
	models   []*proc
	llms     []*proc
	envws    []*proc
	coll     *proc
	procs    []*proc
	envFlags []string

	nc         *nats.Conn
	js         jetstream.JetStream
	subj       messages.Subjects
	harnessLog *os.File

	rep      *Report
	finished bool          // Run got to the end; set last
	settle   time.Duration // see Config.Settle
	// submitSeqs maps the episodes stream's sequences to episode ids; the
	// submitter writes it, Run reads it once the submitter has returned.
	submitSeqs    map[uint64]string
	submitRetries atomic.Int64
	submitted     atomic.Int64
}

// Run performs one chaos run and returns its report; the error is about the
// harness (it could not start the fleet, say), not about what the run found,
// which is in the report (see Report.OK). Run stops every process it started
// before it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, rng: newRNG(cfg.Seed), subj: messages.NewSubjects(""), submitSeqs: map[uint64]string{}}
	h.rep = newReport(cfg)
	if err := h.prepareWorkdir(); err != nil {
		return nil, err
	}
	h.rep.Workdir = h.workdir
	defer func() { h.teardown() }()
	h.t0 = time.Now()
	if err := h.startFleet(ctx); err != nil {
		return h.rep, err
	}
	if err := h.connect(ctx); err != nil {
		return h.rep, err
	}
	err := h.run(ctx)
	h.rep.Wall = time.Since(h.t0)
	h.rep.Kept = h.cfg.Keep || err != nil || !h.rep.OK()
	if werr := h.rep.write(filepath.Join(h.workdir, "report.txt")); werr != nil && err == nil {
		err = werr
	}
	h.finished = err == nil
	return h.rep, err
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(h.cfg.Progress, "%7.1fs  %s\n", time.Since(h.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (h *harness) prepareWorkdir() error {
	dir := h.cfg.Workdir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "rollfleet-chaos-")
		if err != nil {
			return fmt.Errorf("chaos: workdir: %w", err)
		}
		dir = tmp
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("chaos: workdir: %w", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "nats")); err == nil {
			return fmt.Errorf("chaos: workdir %s holds an earlier run's data; give an empty or new directory", dir)
		}
	}
	h.workdir = dir
	h.logDir = filepath.Join(dir, "logs")
	return os.MkdirAll(h.logDir, 0o755)
}

// teardown stops the fleet and removes the workdir of a finished run that
// is not to be kept. It runs on every return from Run, panics included.
func (h *harness) teardown() {
	if h.nc != nil {
		h.nc.Close()
	}
	if h.harnessLog != nil {
		_ = h.harnessLog.Close()
	}
	h.stopFleet()
	// A run that ended early (an error, a panic) keeps its logs.
	if h.finished && !h.rep.Kept {
		_ = os.RemoveAll(h.workdir)
	}
}

// connect opens the harness's own connection; it submits episodes and
// reads outcomes, and rides out server restarts like any fleet process.
func (h *harness) connect(ctx context.Context) error {
	f, err := os.OpenFile(filepath.Join(h.logDir, "harness.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	h.harnessLog = f // closed by teardown, after the connection
	log := slog.New(slog.NewTextHandler(f, nil)).With("process", "chaos")
	nc, err := bus.Connect(h.natsURL, "chaos", log)
	if err != nil {
		return err
	}
	h.nc = nc
	if h.js, err = jetstream.New(nc); err != nil {
		return err
	}
	deadline := time.Now().Add(h.cfg.ReadyTimeout)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = bus.EnsureStreams(sctx, h.js, h.subj, bus.StreamOptions{})
		cancel()
		if err == nil || errors.Is(err, bus.ErrStreamMismatch) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: streams: %w", err)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// run drives the chaos window and the wait for outcomes, then checks them.
func (h *harness) run(ctx context.Context) error {
	reqs := h.requests()
	events := h.plan()
	h.rep.Submitted = len(reqs)
	h.progress("fleet up: nats %s, %d env workers, %d LLM workers, %d model servers, 1 collector; %d episodes over %s, %d kills",
		h.natsURL, len(h.envws), len(h.llms), len(h.models), len(reqs), h.cfg.Duration, len(events))
	var adv advisories
	sub, err := adv.subscribe(h)
	if err != nil {
		return fmt.Errorf("chaos: advisories: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	chaosDone := make(chan struct{})
	stopOwner := make(chan struct{})
	ownerStopped := false
	stop := func() {
		if !ownerStopped {
			ownerStopped = true
			close(stopOwner)
			wg.Wait()
		}
	}
	defer stop()
	wg.Go(func() { h.own(runCtx, events, chaosDone, stopOwner) })
	submitDone := make(chan error, 1)
	wg.Go(func() { submitDone <- h.submit(runCtx, reqs) })

	out := newOutcomes(h, reqs)
	err = h.await(ctx, out, submitDone, chaosDone)
	stop()
	if err != nil {
		return err
	}
	// Everything the fleet will ever do is done: read the rest and check.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	if err := out.poll(rctx); err != nil {
		return fmt.Errorf("chaos: read outcomes: %w", err)
	}
	ev := &evidence{t0: h.t0, logDir: h.logDir, maxDeliveries: map[string]maxDeliveries{}}
	if ev.steps, ev.badSteps, err = readSteps(rctx, h); err != nil {
		return fmt.Errorf("chaos: read steps: %w", err)
	}
	if ev.leftover, err = leftover(rctx, h); err != nil {
		return fmt.Errorf("chaos: read the episodes queue: %w", err)
	}
	for _, a := range adv.list() {
		if id := h.submitSeqs[a.StreamSeq]; id != "" {
			ev.maxDeliveries[id] = a
		}
	}
	h.rep.SubmitRetries = h.submitRetries.Load()
	h.stopFleet() // the report scans the logs of the stopped fleet
	h.rep.check(out, ev)
	return nil
}

// await waits until the fleet has settled: the chaos window is over and
// long enough ago that any request a kill cut off has timed out, no episode
// is queued or unacknowledged and no step is waiting for the collector, and
// no step or outcome has been stored for a while. It also returns at the
// timeout.
func (h *harness) await(ctx context.Context, out *outcomes, submitDone <-chan error, chaosDone <-chan struct{}) error {
	deadline := h.t0.Add(h.cfg.Duration + h.cfg.Timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var submitted bool
	var chaosEnd, lastReport, lastChange time.Time
	var lastSeqs [3]uint64
	announced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-submitDone:
			if err != nil {
				return fmt.Errorf("chaos: submit: %w", err)
			}
			submitted = true
			h.progress("all %d episodes submitted (%d publish retries)", h.rep.Submitted, h.submitRetries.Load())
			submitDone = nil
		case <-chaosDone:
			chaosEnd = time.Now()
			h.progress("chaos window over; settling for at least %s", h.settle)
			chaosDone = nil
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := out.poll(pctx); err != nil {
			h.progress("reading outcomes: %v (will retry)", err)
		}
		seqs, err := h.lastSeqs(pctx)
		cancel()
		if err == nil && seqs != lastSeqs {
			lastSeqs, lastChange = seqs, time.Now()
		}
		decided := out.decided()
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			h.progress("outcomes %d/%d (submitted %d)", decided, h.rep.Submitted, h.submitted.Load())
		}
		if decided == h.rep.Submitted && !announced {
			announced = true
			h.progress("every episode has an outcome; waiting for the fleet to settle")
		}
		if time.Now().After(deadline) {
			_, why := h.quiescent(ctx)
			h.progress("timeout: %d of %d episodes decided; %s", decided, h.rep.Submitted, why)
			h.rep.TimedOut = true
			h.rep.Notes = append(h.rep.Notes, "timed out waiting for the fleet to settle: "+why)
			return nil
		}
		if !submitted || chaosEnd.IsZero() || time.Since(chaosEnd) < h.settle || time.Since(lastChange) < 30*time.Second {
			continue
		}
		if idle, _ := h.quiescent(ctx); !idle {
			continue
		}
		if decided < h.rep.Submitted {
			h.progress("fleet settled with %d of %d episodes decided: the rest will not come", decided, h.rep.Submitted)
		} else {
			h.progress("fleet settled")
		}
		return nil
	}
}

// lastSeqs returns the last sequences of the steps, trajectories and
// failures streams.
func (h *harness) lastSeqs(ctx context.Context) ([3]uint64, error) {
	var seqs [3]uint64
	for i, name := range []string{h.subj.StreamSteps(), h.subj.StreamTrajectories(), h.subj.StreamFailures()} {
		st, err := h.js.Stream(ctx, name)
		if err != nil {
			return seqs, err
		}
		seqs[i] = st.CachedInfo().State.LastSeq
	}
	return seqs, nil
}

// quiescent reports whether the episodes and steps consumers have nothing
// pending or unacknowledged, and if not, why.
func (h *harness) quiescent(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, c := range []struct{ stream, durable string }{
		{h.subj.StreamEpisodes(), "envworker"}, {h.subj.StreamSteps(), "collector"},
	} {
		cons, err := h.js.Consumer(ctx, c.stream, c.durable)
		if err != nil {
			return false, fmt.Sprintf("consumer %s: %v", c.durable, err)
		}
		info := cons.CachedInfo()
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return false, fmt.Sprintf("consumer %s: %d pending, %d unacknowledged", c.durable, info.NumPending, info.NumAckPending)
		}
	}
	return true, "consumers idle"
}

// requests builds the run's episode requests, reproducible from the seed.
func (h *harness) requests() []*messages.EpisodeRequest {
	now := time.Now().UnixNano()
	reqs := make([]*messages.EpisodeRequest, h.cfg.Episodes)
	for i := range reqs {
		envSeed := mix(h.cfg.Seed, 2*i)
		sampleSeed := int64(mix(h.cfg.Seed, 2*i+1) >> 1)
		reqs[i] = &messages.EpisodeRequest{
			V: messages.Version, EpisodeID: fmt.Sprintf("chaos-%x-%06d", h.cfg.Seed, i),
			GroupID: fmt.Sprintf("chaos-%x-g%06d", h.cfg.Seed, i), GroupSize: 1,
			Env: h.cfg.Env, EnvSeed: &envSeed,
			Sampling:  messages.SamplingParams{Temperature: 1, TopP: 1, MaxTokens: 256, Seed: &sampleSeed},
			MaxLength: 4096, SubmitTime: now,
		}
	}
	return reqs
}

// newRNG is the harness's random source for a seed.
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6368616f73)) }

// mix derives an independent 64-bit value from a seed and an index
// (splitmix64 of their combination).
func mix(seed uint64, i int) uint64 {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// submit publishes the requests at a steady pace over the first nine
// tenths of the chaos window. Each publish is retried until the store
// acknowledges it; the message id makes a repeat a no-op.
func (h *harness) submit(ctx context.Context, reqs []*messages.EpisodeRequest) error {
	window := h.cfg.Duration * 9 / 10
	for i, r := range reqs {
		at := h.t0.Add(window * time.Duration(i) / time.Duration(len(reqs)))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if err := r.Validate(); err != nil {
			return err
		}
		data, err := messages.Marshal(r)
		if err != nil {
			return err
		}
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var ack *jetstream.PubAck
			ack, err = h.js.Publish(pctx, h.subj.Episodes(r.Env), data, jetstream.WithMsgID(r.EpisodeID))
			cancel()
			if err == nil {
				h.submitSeqs[ack.Sequence] = r.EpisodeID
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			h.submitRetries.Add(1)
			t := time.NewTimer(250 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		h.submitted.Add(1)
	}
	return nil
}
