// Package chaos is rollfleet's chaos harness. It runs a fleet as separate OS
// processes — a NATS server (or a three-node cluster), env workers, LLM
// workers, stand-in model servers and two collectors (one active, one hot
// standby) — submits episodes of several games at a steady pace, and
// meanwhile injects seeded faults: SIGKILLs of every kind of process with a
// restart (a NATS server on the same data directory and port), SIGSTOP and
// SIGCONT of workers and collectors for longer than the env workers' ack
// wait, a NATS data disk that fills and frees, power losses of NATS servers
// (a SIGKILL that also loses what they had not fsynced), forged step
// messages and episodes submitted a second time. It reads every outcome as a trainer
// does, with consumers that acknowledge each record (the output streams are
// work queues, and a groups stream nobody reads would fill), and a msgpack
// decoder of its own; when the fleet has settled it checks the promise
// "nothing lost": each submitted episode has exactly one trajectory or
// failure record, on its run's subjects, every trajectory keeps the
// trajectory invariants, was assembled from one run's honest steps and
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/chaos/lazyfs"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
)

// Kind names a kind of fault: the SIGKILL of a kind of fleet process, or one
// of the other faults the harness injects.
type Kind string

// The kinds of fault, in the order reports list them.
const (
	// KindEnvWorker, KindLLMWorker, KindCollector, KindModel and KindNATS
	// are SIGKILLs of that kind of process, each followed by a restart.
	// KindNATS kills a node of the cluster in cluster mode.
	KindEnvWorker Kind = "envworker"
	KindLLMWorker Kind = "llmworker"
	KindCollector Kind = "collector"
	KindModel     Kind = "model"
	KindNATS      Kind = "nats"
	// KindPause stops an env worker, an LLM worker or a collector with
	// SIGSTOP for longer than the env workers' ack wait, then continues it
	// with SIGCONT.
	KindPause Kind = "pause"
	// KindDisk fills the file system of a NATS server's data directory (a
	// tmpfs the harness mounts), holds it full for a while and frees it.
	KindDisk Kind = "disk"
	// KindPowerLoss cuts the power of a NATS server, or in cluster mode
	// alternately of one node and of all three at once: each server's data
	// directory is a lazyfs mount, and a power loss SIGKILLs the servers,
	// drops the data they wrote but had not fsynced, and starts them again.
	KindPowerLoss Kind = "power-loss"
	// KindForge publishes forged step events of a live episode on its
	// steps subject, as an authorised process could.
	KindForge Kind = "forge"
	// KindResubmit submits an episode again under its id, without a
	// message id, while its first run is in flight or after it finished.
	KindResubmit Kind = "resubmit"
)

// ProcessKinds lists the kinds of fleet process the harness kills, in
// report order.
var ProcessKinds = []Kind{KindEnvWorker, KindLLMWorker, KindCollector, KindModel, KindNATS}

// defaultDiskSize is Config.DiskSize's default.
const defaultDiskSize = 3584 << 20

// Kinds lists every kind of fault in report order.
var Kinds = []Kind{KindEnvWorker, KindLLMWorker, KindCollector, KindModel, KindNATS, KindPause, KindDisk, KindPowerLoss, KindForge, KindResubmit}

// Binaries are the commands the harness runs; Build puts them in one directory.
var Binaries = []string{"rollout", "envworker", "llmworker", "collector"}

// DefaultEnvs are the games the episodes play by default, in turn.
var DefaultEnvs = []string{"game:GuessTheNumber-v0", "game:Sudoku-v0-easy", "game:Game2048-v0-easy"}

// Config describes one chaos run. Zero values take the defaults noted; a
// negative count means none of that fault.
type Config struct {
	// Bin is the directory holding the rollout, envworker, llmworker and
	// collector binaries (see Build). Required.
	Bin string
	// Workdir receives the NATS data directories, one log file per process
	// and the report. Empty makes a temporary directory. It is removed at
	// the end unless Keep is set or the run found a problem.
	Workdir string
	// Keep leaves the workdir in place.
	Keep bool
	// Episodes is the number of episodes submitted (default 2000).
	Episodes int
	// KillsPerKind is how many times each kind of process is killed
	// (default 20).
	KillsPerKind int
	// Pauses is the number of SIGSTOP/SIGCONT pauses (default 10), each
	// lasting a time drawn from [PauseMin, PauseMax] (default 1.5 and 2.5
	// times AckWait).
	Pauses             int
	PauseMin, PauseMax time.Duration
	// DiskFills is the number of times a NATS data disk fills (default 4).
	// Each NATS server's data directory is a tmpfs of DiskSize bytes
	// (default 3.5 GiB: JetStream reserves the streams' size limits, 2.25
	// GiB by default, within 75% of the free space, and the data dir holds
	// a lock file besides); a fill writes a file until the
	// file system is full, keeps it for a time drawn from [DiskHold/2,
	// DiskHold] (default 15s) and deletes it. Mounting needs root on Linux;
	// elsewhere the kind is skipped with a note.
	DiskFills int
	DiskSize  int64
	DiskHold  time.Duration
	// PowerLosses is the number of power losses of NATS servers (default
	// 4); in cluster mode every second one takes all three nodes at once.
	// Each NATS server's data directory is then a lazyfs mount (see package
	// lazyfs) over a directory beside it, which needs FUSE; where it is not
	// available the kind is skipped with a note.
	PowerLosses int
	// Sync is the NATS servers' JetStream sync policy, passed as rollout
	// server --sync: "always" or an interval such as "2m" (nats-server's
	// own default, which a power loss shows losing acknowledged writes).
	// Empty leaves the server's default, always.
	Sync string
	// RecoverWait is how long after a disk is freed the harness waits for
	// the NATS server to serve JetStream again by itself before it restarts
	// it and counts the fault as unrecovered (default 30s).
	RecoverWait time.Duration
	// Forgeries is the number of forged step events (default 20), each on
	// its own live episode, cycling through the variants (see Forgeries).
	Forgeries int
	// Resubmits is the number of episodes submitted a second time (default
	// 20), alternately while in flight and after they finished.
	Resubmits int
	// Kinds limits the faults to these kinds (default: all of Kinds).
	Kinds []Kind
	// Seed drives the fault schedule, the choice of victims, the down times
	// and the episodes' seeds.
	Seed uint64
	// Duration is the chaos window (default 5m): episodes are submitted at
	// a steady pace over its first nine tenths and the faults fall at
	// uniformly random moments inside it.
	Duration time.Duration
	// Timeout bounds the wait for outcomes and for the fleet to settle
	// after the window (default 20m).
	Timeout time.Duration
	// Envs are the env ids the episodes play, in turn (default
	// DefaultEnvs): games played from their own instructions.
	Envs []string
	// EnvWorkers, LLMWorkers, ModelServers and Collectors are the fleet's
	// size (defaults 3, 2, 2 and 2). Collectors beyond the first of each
	// shard are hot standbys on the shard's durable, the documented setup.
	EnvWorkers, LLMWorkers, ModelServers, Collectors int
	// CollectorShards splits the steps stream among this many shards
	// (collector --shard i/N; 1, 2, 4, 8 or 16, default 1): collector k
	// takes shard k mod CollectorShards, so Collectors must be at least as
	// many.
	CollectorShards int
	// Cluster runs three NATS servers joined in a cluster instead of one;
	// the workers get all three URLs and make streams of three replicas.
	Cluster bool
	// Concurrency is each env worker's episode limit (default 128).
	Concurrency int
	// ModelLatency is the stand-in model's simulated time per generated
	// token (default 40ms), so episodes last seconds and faults find
	// them in flight. Negative means none.
	ModelLatency time.Duration
	// MaxDown is the longest pause between a kill and the restart; each
	// pause is drawn uniformly from [0, MaxDown] (default 2s).
	MaxDown time.Duration
	// ReadyTimeout bounds the wait for a started process to be ready
	// (default 60s).
	ReadyTimeout time.Duration
	// RequestTimeout and AckWait are passed to the env workers as
	// --request-timeout and --ack-wait (defaults 30s and 10s), if their
	// --help lists those flags; otherwise the workers keep their own
	// defaults (180s and 1m).
	RequestTimeout, AckWait time.Duration
	// Settle is how long after the last fault the harness waits at least
	// before it judges the outcomes: a request that a kill cut off leaves
	// its episode silent until the env worker's request timeout, and an
	// episode of a killed worker comes back after the ack wait. Default: the
	// longer of the two as the env workers have them, plus 30s.
	Settle time.Duration
	// Progress receives one line per notable event; nil discards them.
	Progress io.Writer
}

func (c *Config) setDefaults() {
	count := func(n *int, def int) {
		if *n == 0 {
			*n = def
		}
		*n = max(*n, 0)
	}
	count(&c.Episodes, 2000)
	count(&c.KillsPerKind, 20)
	count(&c.Pauses, 10)
	count(&c.DiskFills, 4)
	count(&c.PowerLosses, 4)
	count(&c.Forgeries, 20)
	count(&c.Resubmits, 20)
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Minute
	}
	if len(c.Envs) == 0 {
		c.Envs = DefaultEnvs
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
	if c.Collectors <= 0 {
		c.Collectors = 2
	}
	if c.CollectorShards <= 0 {
		c.CollectorShards = 1
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
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.AckWait <= 0 {
		c.AckWait = 10 * time.Second
	}
	if c.PauseMin <= 0 {
		c.PauseMin = c.AckWait * 3 / 2
	}
	if c.PauseMax < c.PauseMin {
		c.PauseMax = max(c.AckWait*5/2, c.PauseMin)
	}
	if c.DiskSize <= 0 {
		c.DiskSize = defaultDiskSize
	}
	if c.DiskHold <= 0 {
		c.DiskHold = 15 * time.Second
	}
	if c.RecoverWait <= 0 {
		c.RecoverWait = 30 * time.Second
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
	if err := (collector.Shard{Count: c.CollectorShards}).Validate(); err != nil {
		return fmt.Errorf("chaos: CollectorShards: %w", err)
	}
	if c.Collectors < c.CollectorShards {
		return fmt.Errorf("chaos: %d collectors for %d shards: each shard needs one", c.Collectors, c.CollectorShards)
	}
	for _, k := range c.Kinds {
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("chaos: unknown kind %q (want one of %v)", k, Kinds)
		}
	}
	if c.Sync != "" {
		if _, _, err := bus.ParseSync(c.Sync); err != nil {
			return fmt.Errorf("chaos: Sync: %w", err)
		}
	}
	for _, id := range c.Envs {
		spec, err := envs.Lookup(id)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		if !strings.HasPrefix(spec.ID, "game:") {
			return fmt.Errorf("chaos: env %s: only games are replayed", id)
		}
	}
	return nil
}

// count is how many faults of a kind the config asks for.
func (c *Config) count(k Kind) int {
	if !slices.Contains(c.Kinds, k) {
		return 0
	}
	switch k {
	case KindPause:
		return c.Pauses
	case KindDisk:
		return c.DiskFills
	case KindPowerLoss:
		return c.PowerLosses
	case KindForge:
		return c.Forgeries
	case KindResubmit:
		return c.Resubmits
	}
	return c.KillsPerKind
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

	natsURL   string // every node's client URL, comma-separated
	natsURLs  []string
	natsNodes []*proc
	natsDirs  []string // each node's data directory
	// storeDirs are the directories that hold each node's data: the
	// backing directories of the lazyfs mounts when power losses run, else
	// the data directories themselves. Disk faults fill them.
	storeDirs  []string
	lazy       []*lazyfs.FS // by NATS node, when power losses run
	mounted    []string     // tmpfs mounts to undo
	models     []*proc
	llms       []*proc
	envws      []*proc
	colls      []*proc
	procs      []*proc
	envFlags   []string
	fleetFlags []string // flags every worker and collector gets
	disks      []*disk  // by NATS node, when disk faults run
	pending    []action // the fleet owner's queue

	nc         *nats.Conn
	js         jetstream.JetStream
	subj       messages.Subjects
	harnessLog *os.File
	// runID is the run id of every episode submitted (RunID): the fleet
	// publishes their steps and outcomes on its subjects.
	runID string

	rep      *Report
	finished bool          // Run got to the end; set last
	settle   time.Duration // see Config.Settle
	// reqs are the submitted requests by episode id; read-only once built.
	reqs map[string]*messages.EpisodeRequest
	// submitSeqs maps the episodes stream's sequences to episode ids and
	// submitTimes the episodes to the time they were stored; the submitter
	// writes them, Run reads them once the submitter has returned.
	submitSeqs    map[uint64]string
	submitTimes   map[string]time.Time
	submitRetries atomic.Int64
	submitted     atomic.Int64
	// faultsMu guards rep.Faults, which the fleet owner and the injector
	// both append to while the run goes on.
	faultsMu sync.Mutex
}

// addFault records a fault in the report.
func (h *harness) addFault(f Fault) {
	h.faultsMu.Lock()
	h.rep.Faults = append(h.rep.Faults, f)
	h.faultsMu.Unlock()
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
	cfg.Kinds = slices.Clone(cfg.Kinds)
	h := &harness{cfg: cfg, rng: newRNG(cfg.Seed), subj: messages.NewSubjects(""), runID: RunID(cfg.Seed),
		submitSeqs: map[uint64]string{}, submitTimes: map[string]time.Time{}}
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

// note records an observation in the report and shows it as progress.
func (h *harness) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	h.rep.Notes = append(h.rep.Notes, s)
	h.progress("%s", s)
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
		if old, _ := filepath.Glob(filepath.Join(dir, "nats*")); len(old) > 0 {
			return fmt.Errorf("chaos: workdir %s holds an earlier run's data; give an empty or new directory", dir)
		}
	}
	h.workdir = dir
	h.logDir = filepath.Join(dir, "logs")
	return os.MkdirAll(h.logDir, 0o755)
}

// teardown stops the fleet, undoes the lazyfs and tmpfs mounts and removes the workdir
// of a finished run that is not to be kept. It runs on every return from
// Run, panics included.
func (h *harness) teardown() {
	if h.nc != nil {
		h.nc.Close()
	}
	if h.harnessLog != nil {
		_ = h.harnessLog.Close()
	}
	h.stopFleet()
	// The lazyfs mounts sit on the tmpfs mounts, if both are there.
	for i, fs := range h.lazy {
		if err := fs.Unmount(); err != nil {
			h.rep.Notes = append(h.rep.Notes, fmt.Sprintf("unmount the lazyfs of %s: %v", h.natsDirs[i], err))
		}
	}
	for _, dir := range h.mounted {
		if err := unmount(dir); err != nil {
			h.rep.Notes = append(h.rep.Notes, fmt.Sprintf("unmount %s: %v", dir, err))
		}
	}
	// A run that ended early (an error, a panic) keeps its logs.
	if h.finished && !h.rep.Kept {
		_ = os.RemoveAll(h.workdir)
	}
}

// connect opens the harness's own connection with plain nats.go: it
// submits episodes, injects messages and reads outcomes, and rides out
// server restarts like any fleet process. The streams are the fleet's to
// create; the harness waits for them.
func (h *harness) connect(ctx context.Context) error {
	f, err := os.OpenFile(filepath.Join(h.logDir, "harness.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	h.harnessLog = f // closed by teardown, after the connection
	log := slog.New(slog.NewTextHandler(f, nil)).With("process", "chaos")
	nc, err := nats.Connect(h.natsURL, nats.Name("chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectBufSize(64<<20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats disconnected", "err", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }))
	if err != nil {
		return fmt.Errorf("chaos: connect: %w", err)
	}
	h.nc = nc
	if h.js, err = jetstream.New(nc); err != nil {
		return err
	}
	deadline := time.Now().Add(h.cfg.ReadyTimeout)
	streams := []string{h.subj.StreamEpisodes(), h.subj.StreamSteps(), h.subj.StreamTrajectories(), h.subj.StreamFailures(), h.subj.StreamGroups()}
	for {
		missing := ""
		for _, name := range streams {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = h.js.Stream(sctx, name)
			cancel()
			if err != nil {
				missing = name
				break
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: stream %s: %w", missing, err)
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
	h.reqs = make(map[string]*messages.EpisodeRequest, len(reqs))
	for _, r := range reqs {
		h.reqs[r.EpisodeID] = r
	}
	fleetEvents, msgEvents := h.plan()
	h.rep.Submitted = len(reqs)
	nats := "nats " + h.natsURL
	if h.cfg.Cluster {
		nats = "a 3-node NATS cluster " + h.natsURL
	}
	h.progress("fleet up: %s, %d env workers, %d LLM workers, %d model servers, %d collectors; %d episodes of %s over %s; %d faults",
		nats, len(h.envws), len(h.llms), len(h.models), len(h.colls), len(reqs), strings.Join(h.cfg.Envs, ", "), h.cfg.Duration,
		len(fleetEvents)+len(msgEvents))
	var adv advisories
	sub, err := adv.subscribe(h)
	if err != nil {
		return fmt.Errorf("chaos: advisories: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	tr := newTracker(h)
	if err := tr.start(ctx); err != nil {
		return fmt.Errorf("chaos: follow the steps stream: %w", err)
	}
	defer tr.stop()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	chaosDone := make(chan struct{})
	injectDone := make(chan struct{})
	stopOwner := make(chan struct{})
	ownerStopped := false
	stop := func() {
		if !ownerStopped {
			ownerStopped = true
			close(stopOwner)
			cancel()
			wg.Wait()
		}
	}
	defer stop()
	wg.Go(func() { h.own(runCtx, fleetEvents, chaosDone, stopOwner) })
	wg.Go(func() {
		defer close(injectDone)
		h.inject(runCtx, tr, msgEvents)
	})
	submitDone := make(chan error, 1)
	wg.Go(func() { submitDone <- h.submit(runCtx, reqs) })

	out := newOutcomes(h, reqs)
	err = h.await(ctx, out, submitDone, chaosDone, injectDone)
	stop()
	if err != nil {
		return err
	}
	// Everything the fleet will ever do is done: read the rest and check.
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer rcancel()
	if err := out.drain(rctx); err != nil {
		return fmt.Errorf("chaos: read outcomes: %w", err)
	}
	// Read and acknowledged, every record is freed from its work queue.
	if left, err := out.unread(rctx); err != nil {
		h.note("counting the records left in the output streams: %v", err)
	} else {
		for stream, n := range left {
			h.note("%s still holds %d records after the harness acknowledged all it read", stream, n)
		}
	}
	ev := &evidence{t0: h.t0, logDir: h.logDir, maxDeliveries: map[string]maxDeliveries{}, submitted: h.submitTimes}
	if err := tr.caughtUp(rctx); err != nil {
		h.note("%v", err)
	}
	tr.stop()
	tr.evidence(ev)
	if ev.decisions, err = decisions(rctx, h); err != nil {
		return fmt.Errorf("chaos: read the decisions: %w", err)
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
	h.rep.Store = h.storeStats()
	h.rep.check(out, ev)
	return nil
}

// await waits until the fleet has settled: the chaos window is over and
// long enough ago that any request a kill cut off has timed out, no episode
// is queued or unacknowledged and no step is waiting for the collector, and
// no step or outcome has been stored for a while. It also returns at the
// timeout.
func (h *harness) await(ctx context.Context, out *outcomes, submitDone <-chan error, chaosDone, injectDone <-chan struct{}) error {
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
			chaosDone = nil
		case <-injectDone:
			injectDone = nil
		case <-tick.C:
		}
		if chaosEnd.IsZero() && chaosDone == nil && injectDone == nil {
			chaosEnd = time.Now()
			h.rep.ChaosSpan = time.Since(h.t0)
			h.progress("chaos window over; settling for at least %s", h.settle)
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
	type consumer struct{ stream, durable string }
	consumers := []consumer{{h.subj.StreamEpisodes(), "envworker"}}
	for i := range h.cfg.CollectorShards {
		shard := collector.Shard{Index: i, Count: h.cfg.CollectorShards}
		consumers = append(consumers, consumer{h.subj.StreamSteps(), shard.Consumer("collector")})
	}
	for _, c := range consumers {
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

// requests builds the run's episode requests, reproducible from the seed;
// the envs take turns.
func (h *harness) requests() []*messages.EpisodeRequest {
	now := time.Now().UnixNano()
	reqs := make([]*messages.EpisodeRequest, h.cfg.Episodes)
	for i := range reqs {
		envSeed := mix(h.cfg.Seed, 2*i)
		sampleSeed := int64(mix(h.cfg.Seed, 2*i+1) >> 1)
		reqs[i] = &messages.EpisodeRequest{
			V: messages.Version, RunID: h.runID, EpisodeID: fmt.Sprintf("chaos-%x-%06d", h.cfg.Seed, i),
			GroupID: fmt.Sprintf("chaos-%x-g%06d", h.cfg.Seed, i), GroupSize: 1,
			Env: h.cfg.Envs[i%len(h.cfg.Envs)], EnvSeed: &envSeed,
			Sampling:  messages.SamplingParams{Temperature: 1, TopP: 1, MaxTokens: 256, Seed: &sampleSeed},
			MaxLength: 4096, SubmitTime: now,
		}
	}
	return reqs
}

// RunID is the run id of a chaos run's episodes: "chaos-<seed in hex>".
func RunID(seed uint64) string { return fmt.Sprintf("chaos-%x", seed) }

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
// acknowledges it; the message id makes a repeat a no-op. The requests are
// encoded with the messages package: they are the fleet's input, not what
// the checks judge.
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
		data, err := messages.Marshal(r)
		if err != nil {
			return err
		}
		seq, err := h.publish(ctx, &nats.Msg{Subject: h.subj.Episodes(r.RunID, r.Env), Data: data}, messages.EpisodeMsgID(r.RunID, r.EpisodeID), &h.submitRetries)
		if err != nil {
			return err
		}
		h.submitSeqs[seq] = r.EpisodeID
		h.submitTimes[r.EpisodeID] = time.Now()
		h.submitted.Add(1)
	}
	return nil
}

// publish stores m, retrying until the store acknowledges it or ctx ends,
// and returns its stream sequence. msgID, if set, makes a repeat a no-op;
// retries counts the repeats.
func (h *harness) publish(ctx context.Context, m *nats.Msg, msgID string, retries *atomic.Int64) (uint64, error) {
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := h.js.PublishMsg(pctx, m, opts...)
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		retries.Add(1)
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
}
