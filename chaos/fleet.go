package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
)

// Readiness markers the fleet's processes print.
const (
	natsListening  = "nats server listening on "
	modelListening = "stand-in model listening on "
	envReady       = "env worker ready"
	llmReady       = "llm worker ready"
	collectorReady = "collector ready"
)

func (h *harness) newProc(kind Kind, name, bin string, args ...string) *proc {
	p := &proc{name: name, kind: kind, bin: filepath.Join(h.cfg.Bin, bin), args: args,
		logPath: filepath.Join(h.logDir, name+".log")}
	h.procs = append(h.procs, p)
	return p
}

// natsReadyCheck is the readiness check of a NATS server: it printed its
// address and answers a JetStream request there.
func natsReadyCheck(ctx context.Context, p *proc, _ int64) (bool, error) {
	u, ok := p.addressLine(natsListening)
	if !ok {
		return false, errNotYet
	}
	return natsReady(ctx, u)
}

// startFleet starts the NATS server or cluster and the model servers (each
// on a port it then keeps for its restarts), then the workers and
// collectors, and waits for each to be ready.
func (h *harness) startFleet(ctx context.Context) error {
	if err := h.startNATS(ctx); err != nil {
		return err
	}
	var modelURLs []string
	for i := range h.cfg.ModelServers {
		args := []string{"toyllm", "--listen", "127.0.0.1:0"}
		if h.cfg.ModelLatency > 0 {
			args = append(args, "--latency", h.cfg.ModelLatency.String())
		}
		m := h.newProc(KindModel, fmt.Sprintf("model-%d", i+1), "rollout", args...)
		m.ready = func(ctx context.Context, p *proc, _ int64) (bool, error) {
			u, ok := p.addressLine(modelListening)
			if !ok {
				return false, errNotYet
			}
			return httpReady(ctx, u+"/health")
		}
		u, err := h.startPinned(ctx, m, modelListening)
		if err != nil {
			return err
		}
		h.models = append(h.models, m)
		modelURLs = append(modelURLs, u)
	}

	h.fleetFlags = []string{"--nats", h.natsURL}
	if h.cfg.Cluster {
		h.fleetFlags = append(h.fleetFlags, "--replicas", "3")
	}
	h.envFlags = h.envWorkerFlags(ctx)
	h.settle = h.cfg.Settle
	if h.settle <= 0 {
		// The env worker's own defaults unless the flags were taken.
		requestTimeout, ackWait := 180*time.Second, time.Minute
		for i := 0; i+1 < len(h.envFlags); i += 2 {
			d, _ := time.ParseDuration(h.envFlags[i+1])
			switch h.envFlags[i] {
			case "--request-timeout":
				requestTimeout = d
			case "--ack-wait":
				ackWait = d
			}
		}
		h.settle = max(requestTimeout, ackWait) + 30*time.Second
	}
	for i := range h.cfg.LLMWorkers {
		p := h.newProc(KindLLMWorker, fmt.Sprintf("llmworker-%d", i+1), "llmworker",
			append(slices.Clone(h.fleetFlags), "--vllm", strings.Join(modelURLs, ","))...)
		p.ready = logLine(llmReady)
		h.llms = append(h.llms, p)
	}
	for i := range h.cfg.EnvWorkers {
		args := slices.Concat(h.fleetFlags, []string{"--concurrency", strconv.Itoa(h.cfg.Concurrency)}, h.envFlags)
		p := h.newProc(KindEnvWorker, fmt.Sprintf("envworker-%d", i+1), "envworker", args...)
		p.ready = logLine(envReady)
		h.envws = append(h.envws, p)
	}
	for i := range h.cfg.Collectors {
		shard := collector.Shard{Index: i % h.cfg.CollectorShards, Count: h.cfg.CollectorShards}
		p := h.newProc(KindCollector, fmt.Sprintf("collector-%d", i+1), "collector", append(slices.Clone(h.fleetFlags), "--shard", shard.String())...)
		p.ready = logLine(collectorReady)
		h.colls = append(h.colls, p)
	}
	workers := slices.Concat(h.llms, h.envws, h.colls)
	for _, p := range workers {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range workers {
		if err := p.waitReady(ctx, h.cfg.ReadyTimeout); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}

// startNATS starts one NATS server, or three joined in a cluster, each on
// its own data directory, which is a lazyfs mount when power losses are to
// run, over a tmpfs when disk faults are to run.
func (h *harness) startNATS(ctx context.Context) error {
	n := 1
	if h.cfg.Cluster {
		n = 3
	}
	for i := range n {
		dir := filepath.Join(h.workdir, "nats")
		if h.cfg.Cluster {
			dir = fmt.Sprintf("%s-%d", dir, i+1)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("chaos: data dir: %w", err)
		}
		h.natsDirs = append(h.natsDirs, dir)
	}
	if err := h.prepareStores(); err != nil {
		return err
	}
	h.prepareDisks()
	h.mountLazyFS()
	var syncFlags []string
	if h.cfg.Sync != "" {
		syncFlags = []string{"--sync", h.cfg.Sync}
	}
	if !h.cfg.Cluster {
		p := h.newProc(KindNATS, "nats", "rollout", append([]string{"server", "--listen", "127.0.0.1:0", "--data-dir", h.natsDirs[0]}, syncFlags...)...)
		p.ready = natsReadyCheck
		u, err := h.startPinned(ctx, p, natsListening)
		if err != nil {
			return err
		}
		h.natsNodes, h.natsURLs, h.natsURL = []*proc{p}, []string{u}, u
		return nil
	}
	help, _ := exec.CommandContext(ctx, filepath.Join(h.cfg.Bin, "rollout"), "server", "--help").CombinedOutput()
	for _, flag := range []string{"--server-name", "--cluster", "--routes"} {
		if !strings.Contains(string(help), flag) {
			return fmt.Errorf("chaos: cluster mode: rollout server has no %s flag", flag)
		}
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return fmt.Errorf("chaos: cluster ports: %w", err)
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		args := []string{"server", "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--data-dir", h.natsDirs[i], "--server-name", name, "--cluster", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			"--routes", strings.Join(routes, ",")}
		p := h.newProc(KindNATS, name, "rollout", append(args, syncFlags...)...)
		p.ready = natsReadyCheck
		h.natsNodes = append(h.natsNodes, p)
		h.natsURLs = append(h.natsURLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	h.natsURL = strings.Join(h.natsURLs, ",")
	// The nodes elect a JetStream leader only together: start all, then wait.
	for _, p := range h.natsNodes {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range h.natsNodes {
		if err := p.waitReady(ctx, h.cfg.ReadyTimeout); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}

// freePorts returns n distinct free TCP ports on the loopback interface.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startPinned starts a server that was given port 0, waits until it is ready
// and then fixes its arguments to the address it got, so that every restart
// listens where its clients reconnect.
func (h *harness) startPinned(ctx context.Context, p *proc, prefix string) (string, error) {
	if err := p.start(); err != nil {
		return "", err
	}
	if err := p.waitReady(ctx, h.cfg.ReadyTimeout); err != nil {
		return "", fmt.Errorf("chaos: %w", err)
	}
	addr, _ := p.addressLine(prefix)
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("chaos: %s printed an address %q that does not parse", p.name, addr)
	}
	i := slices.Index(p.args, "--listen")
	p.args[i+1] = u.Host
	return addr, nil
}

// envWorkerFlags returns the optional env worker flags of the config that
// the env worker binary takes.
func (h *harness) envWorkerFlags(ctx context.Context) []string {
	out, _ := exec.CommandContext(ctx, filepath.Join(h.cfg.Bin, "envworker"), "--help").CombinedOutput()
	var flags []string
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--request-timeout", h.cfg.RequestTimeout}, {"--ack-wait", h.cfg.AckWait}} {
		if f.d <= 0 {
			continue
		}
		if strings.Contains(string(out), f.name) {
			flags = append(flags, f.name, f.d.String())
		} else {
			h.rep.Notes = append(h.rep.Notes, fmt.Sprintf("envworker has no %s flag: its own default applies", f.name))
		}
	}
	return flags
}

// natsReady reports whether the server at u accepts a connection and
// answers a JetStream request.
func natsReady(ctx context.Context, u string) (bool, error) {
	nc, err := nats.Connect(u, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(actx); err != nil {
		return false, err
	}
	return true, nil
}

// httpReady reports whether GET u answers 200.
func httpReady(ctx context.Context, u string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", u, resp.Status)
	}
	return true, nil
}

// stopFleet stops every process, the workers first, each group in
// parallel, and closes the log files. A paused process is continued first.
// A process that exits with an error on SIGTERM, or does not exit within a
// grace period, is noted.
func (h *harness) stopFleet() {
	for _, p := range h.procs {
		p.resume()
	}
	for _, group := range [][]*proc{slices.Concat(h.envws, h.llms, h.colls), slices.Concat(h.models, h.natsNodes)} {
		notes := make([]string, len(group))
		var wg sync.WaitGroup
		for i, p := range group {
			if p == nil || p.cmd == nil || p.exited() {
				continue
			}
			wg.Go(func() {
				if forced := p.terminate(15 * time.Second); forced {
					notes[i] = fmt.Sprintf("%s did not stop within 15s of SIGTERM and was killed", p.name)
				} else if p.exitErr != nil {
					notes[i] = fmt.Sprintf("%s exited with %v on SIGTERM", p.name, p.exitErr)
				}
			})
		}
		wg.Wait()
		for _, n := range notes {
			if n != "" {
				h.rep.Notes = append(h.rep.Notes, n)
			}
		}
	}
	for _, p := range h.procs {
		p.kill() // anything started but not in a group (a half-built fleet)
		if p.log != nil {
			_ = p.log.Close()
			p.log = nil
		}
	}
}

// event is one planned fault.
type event struct {
	at      time.Duration // after the start of the chaos window
	kind    Kind
	victim  int           // index among the kind's targets
	down    time.Duration // pause before a restart; a pause's or a full disk's length
	variant int           // forgery variant; resubmission: 0 in flight, 1 finished; power loss: 1 all nodes
	pick    uint64        // draws the episode a message fault targets
}

// plan draws the fault schedule from the seed: for each kind its count of
// moments, uniform over the window, with a victim and a length for each.
// Kills, pauses and disk fills fall in the whole window (after its first
// 2%), message faults between a tenth and nine tenths of it, when episodes
// are in flight. The fleet owner carries out the first list, the injector
// the second.
func (h *harness) plan() (fleet, msgs []event) {
	for _, k := range Kinds {
		for i := range h.cfg.count(k) {
			ev := event{kind: k, variant: i}
			lo, hi := 0.02, 1.0
			switch k {
			case KindForge, KindResubmit:
				lo, hi = 0.1, 0.9
				ev.variant = i % map[Kind]int{KindForge: len(forgeries), KindResubmit: 2}[k]
			case KindPowerLoss:
				ev.variant = 0 // one node
				if len(h.natsNodes) > 1 {
					ev.variant = i % 2 // every second one: all nodes at once
				}
			}
			ev.at = time.Duration((lo + (hi-lo)*h.rng.Float64()) * float64(h.cfg.Duration))
			if n := h.targets(k); n > 0 {
				ev.victim = h.rng.IntN(n)
			}
			switch k {
			case KindPause:
				ev.down = h.cfg.PauseMin + time.Duration(h.rng.Float64()*float64(h.cfg.PauseMax-h.cfg.PauseMin))
			case KindDisk:
				ev.down = h.cfg.DiskHold/2 + time.Duration(h.rng.Float64()*float64(h.cfg.DiskHold/2))
			case KindForge, KindResubmit:
				ev.pick = h.rng.Uint64()
			default:
				ev.down = time.Duration(h.rng.Float64() * float64(h.cfg.MaxDown))
			}
			if k == KindForge || k == KindResubmit {
				msgs = append(msgs, ev)
			} else {
				fleet = append(fleet, ev)
			}
		}
	}
	byTime := func(a, b event) int { return int(a.at - b.at) }
	slices.SortStableFunc(fleet, byTime)
	slices.SortStableFunc(msgs, byTime)
	return fleet, msgs
}

// targets is the number of possible victims of a kind of fault.
func (h *harness) targets(k Kind) int {
	switch k {
	case KindPause:
		return len(h.pausable())
	case KindDisk, KindPowerLoss:
		return len(h.natsNodes)
	case KindForge, KindResubmit:
		return 0
	}
	return len(h.ofKind(k))
}

// ofKind returns the processes of a kind that the harness may kill: of the
// model servers only the first, so the LLM workers always have one left.
func (h *harness) ofKind(k Kind) []*proc {
	switch k {
	case KindEnvWorker:
		return h.envws
	case KindLLMWorker:
		return h.llms
	case KindCollector:
		return h.colls
	case KindModel:
		return h.models[:1]
	default:
		return h.natsNodes
	}
}

// pausable returns the processes a pause may stop.
func (h *harness) pausable() []*proc { return slices.Concat(h.envws, h.llms, h.colls) }

// action is a step the fleet owner takes at a given time: a planned fault,
// or what follows one (a restart and the checks for its readiness, a
// SIGCONT, freeing a disk).
type action struct {
	at time.Time
	do func(ctx context.Context)
}

// schedule queues an action; only the fleet owner calls it.
func (h *harness) schedule(at time.Time, do func(ctx context.Context)) {
	a := action{at: at, do: do}
	i, _ := slices.BinarySearchFunc(h.pending, at, func(x action, t time.Time) int {
		if x.at.After(t) {
			return 1
		}
		return -1 // after every action due at the same time
	})
	h.pending = slices.Insert(h.pending, i, a)
}

// own is the fleet owner: it carries out the fault schedule and what
// follows from it, and restarts any process that exits on its own, until
// stop is closed or ctx ends. No step blocks for long, so that a restart
// that takes a while (a worker waiting for a full disk to be freed, say)
// holds up no other fault. It closes chaosDone when nothing is left to do.
func (h *harness) own(ctx context.Context, events []event, chaosDone chan<- struct{}, stop <-chan struct{}) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for _, ev := range events {
		h.schedule(h.t0.Add(ev.at), func(ctx context.Context) { h.execute(ctx, ev) })
	}
	for {
		if len(h.pending) > 0 {
			timer.Reset(time.Until(h.pending[0].at))
		} else if chaosDone != nil {
			close(chaosDone)
			chaosDone = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
			h.supervise()
		case <-timer.C:
			if len(h.pending) > 0 && !time.Now().Before(h.pending[0].at) {
				a := h.pending[0]
				h.pending = h.pending[1:]
				a.do(ctx)
			}
		}
	}
}

// execute carries out one planned fault. A victim that is being restarted
// (or exited on its own just now), paused (for a pause) or still full or
// recovering (for a disk fill) is left alone until it is ready: the fault is
// put off by a second, so every planned fault happens on its own.
func (h *harness) execute(ctx context.Context, ev event) {
	var p *proc
	switch ev.kind {
	case KindPause:
		p = h.pausable()[ev.victim]
	case KindDisk:
		p = h.natsNodes[ev.victim]
	case KindPowerLoss:
		p = h.powerVictims(ev)[0]
	default:
		p = h.ofKind(ev.kind)[ev.victim]
	}
	busy := p.restarting || p.cmd != nil && p.exited() ||
		ev.kind == KindPause && p.paused || ev.kind == KindDisk && h.disks[ev.victim].busy
	if ev.kind == KindPowerLoss {
		busy = slices.ContainsFunc(h.powerVictims(ev), func(p *proc) bool { return p.restarting || p.cmd != nil && p.exited() })
	}
	if busy {
		h.schedule(time.Now().Add(time.Second), func(ctx context.Context) { h.execute(ctx, ev) })
		return
	}
	switch ev.kind {
	case KindPause:
		h.pause(p, ev)
	case KindDisk:
		h.fill(ev)
	case KindPowerLoss:
		h.powerLoss(ev)
	default:
		h.kill(p, ev)
	}
}

// kill kills one victim with SIGKILL and starts it again after the down
// time.
func (h *harness) kill(p *proc, ev event) {
	h.freeBeforeRestart(p)
	f := Fault{At: time.Since(h.t0), Kind: ev.kind, Name: p.name, PID: p.pid(), Down: ev.down}
	if p.paused {
		f.Detail = "it was paused"
	}
	p.kill()
	h.relaunch(p, ev.down, func(ready time.Duration, err error) {
		f.Ready = ready
		msg := fmt.Sprintf("killed %s (pid %d), down %s, ready %s later", p.name, f.PID, f.Down.Round(time.Millisecond), f.Ready.Round(time.Millisecond))
		if err != nil {
			f.Err = err.Error()
			msg += ": " + f.Err
		}
		h.addFault(f)
		h.progress("%s", msg)
	})
}

// freeBeforeRestart frees the data disk of a NATS server that is to be
// restarted if it is full: a server does not start on a full disk.
func (h *harness) freeBeforeRestart(p *proc) {
	if i := slices.Index(h.natsNodes, p); i >= 0 && h.disks != nil && h.disks[i].full() {
		h.free(i, false)
	}
}

// pause stops a worker or collector with SIGSTOP and schedules the SIGCONT.
// A kill in between ends the pause with the process.
func (h *harness) pause(p *proc, ev event) {
	f := Fault{At: time.Since(h.t0), Kind: KindPause, Name: p.name, PID: p.pid(), Down: ev.down}
	until := time.Now().Add(ev.down)
	p.stop()
	start := p.starts
	h.addFault(f)
	h.progress("paused %s (pid %d) for %s", p.name, f.PID, ev.down.Round(time.Millisecond))
	h.schedule(until, func(context.Context) {
		if p.starts != start || !p.paused {
			return // killed and restarted meanwhile
		}
		p.resume()
		h.progress("continued %s after %s", p.name, time.Since(until.Add(-ev.down)).Round(time.Millisecond))
	})
}

// relaunch starts p again after down and follows its readiness with
// actions, trying again while it fails to start or exits before it is
// ready, up to ReadyTimeout; done gets the time from the first start to
// readiness, or the error.
func (h *harness) relaunch(p *proc, down time.Duration, done func(ready time.Duration, err error)) {
	p.restarting = true
	var begin, deadline time.Time
	finish := func(err error) {
		p.restarting = false
		if err != nil && p.exited() {
			p.killed = false // down for good: supervise tries again, as for an exit
		}
		done(time.Since(begin), err)
	}
	var try, poll func(ctx context.Context)
	try = func(ctx context.Context) {
		if begin.IsZero() {
			begin, deadline = time.Now(), time.Now().Add(h.cfg.ReadyTimeout)
		}
		if err := p.start(); err != nil {
			if time.Now().After(deadline) {
				finish(err)
				return
			}
			h.schedule(time.Now().Add(250*time.Millisecond), try)
			return
		}
		poll(ctx)
	}
	poll = func(ctx context.Context) {
		ok, err := true, error(nil)
		if p.ready != nil {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			ok, err = p.ready(pctx, p, p.offset)
			cancel()
		}
		switch {
		case ok:
			finish(nil)
		case p.exited() && time.Now().After(deadline):
			finish(fmt.Errorf("%s exited before it was ready (%v); log tail:\n%s", p.name, p.exitErr, p.tail(2000)))
		case p.exited():
			h.schedule(time.Now().Add(250*time.Millisecond), try)
		case time.Now().After(deadline):
			if err == nil {
				err = errNotYet
			}
			finish(fmt.Errorf("%s not ready after %s: %w", p.name, h.cfg.ReadyTimeout, err))
		default:
			h.schedule(time.Now().Add(50*time.Millisecond), poll)
		}
	}
	h.schedule(time.Now().Add(down), try)
}

// supervise restarts every process that exited without being killed, and
// records the exit: a fleet process should never stop on its own.
func (h *harness) supervise() {
	for _, p := range h.procs {
		if p.cmd == nil || p.restarting || !p.exited() || p.killed {
			continue
		}
		x := Exit{At: time.Since(h.t0), Kind: p.kind, Name: p.name, Err: fmt.Sprint(p.exitErr), LogTail: p.tail(1500)}
		h.progress("%s exited on its own (%v); restarting it", p.name, p.exitErr)
		h.freeBeforeRestart(p)
		h.relaunch(p, 0, func(_ time.Duration, err error) {
			if err != nil {
				x.RestartErr = err.Error()
			}
			h.rep.Exits = append(h.rep.Exits, x)
		})
	}
}
