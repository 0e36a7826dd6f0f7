package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// startFleet starts the NATS server and the model servers (each on a free
// port it then keeps for its restarts), then the workers, and waits for each
// to be ready.
func (h *harness) startFleet(ctx context.Context) error {
	h.nats = h.newProc(KindNATS, "nats", "rollout", "server", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(h.workdir, "nats"))
	h.nats.ready = func(ctx context.Context, p *proc, _ int64) (bool, error) {
		u, ok := p.addressLine(natsListening)
		if !ok {
			return false, errNotYet
		}
		return natsReady(ctx, u)
	}
	var err error
	if h.natsURL, err = h.startPinned(ctx, h.nats, natsListening); err != nil {
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
			"--nats", h.natsURL, "--vllm", strings.Join(modelURLs, ","))
		p.ready = logLine(llmReady)
		h.llms = append(h.llms, p)
	}
	for i := range h.cfg.EnvWorkers {
		args := append([]string{"--nats", h.natsURL, "--concurrency", strconv.Itoa(h.cfg.Concurrency)}, h.envFlags...)
		p := h.newProc(KindEnvWorker, fmt.Sprintf("envworker-%d", i+1), "envworker", args...)
		p.ready = logLine(envReady)
		h.envws = append(h.envws, p)
	}
	h.coll = h.newProc(KindCollector, "collector", "collector", "--nats", h.natsURL)
	h.coll.ready = logLine(collectorReady)
	workers := slices.Concat(h.llms, h.envws, []*proc{h.coll})
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
// parallel, and closes the log files. A process that exits with an error on
// SIGTERM, or does not exit within a grace period, is noted.
func (h *harness) stopFleet() {
	for _, group := range [][]*proc{slices.Concat(h.envws, h.llms, []*proc{h.coll}), slices.Concat(h.models, []*proc{h.nats})} {
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

// event is one planned kill.
type event struct {
	at     time.Duration // after the start of the chaos window
	kind   Kind
	victim int           // index among the kind's processes
	down   time.Duration // pause before the restart
}

// plan draws the kill schedule from the seed: KillsPerKind moments per
// kind, uniform over the window (after its first 2%), a victim and a down
// time for each.
func (h *harness) plan() []event {
	var evs []event
	for _, k := range h.cfg.Kinds {
		for range h.cfg.KillsPerKind {
			ev := event{kind: k}
			ev.at = time.Duration((0.02 + 0.98*h.rng.Float64()) * float64(h.cfg.Duration))
			ev.victim = h.rng.IntN(len(h.ofKind(k)))
			ev.down = time.Duration(h.rng.Float64() * float64(h.cfg.MaxDown))
			evs = append(evs, ev)
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	return evs
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
		return []*proc{h.coll}
	case KindModel:
		return h.models[:1]
	default:
		return []*proc{h.nats}
	}
}

// own is the fleet owner: it carries out the kill schedule and restarts any
// process that exits on its own, until stop is closed or ctx ends. It closes
// chaosDone after the last kill.
func (h *harness) own(ctx context.Context, events []event, chaosDone chan<- struct{}, stop <-chan struct{}) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := 0
	for {
		if next < len(events) {
			timer.Reset(time.Until(h.t0.Add(events[next].at)))
		} else if chaosDone != nil {
			h.rep.ChaosSpan = time.Since(h.t0)
			close(chaosDone)
			chaosDone = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
			h.supervise(ctx)
		case <-timer.C:
			h.execute(ctx, events[next])
			next++
		}
	}
}

// execute kills one victim with SIGKILL, waits the down time and starts it
// again.
func (h *harness) execute(ctx context.Context, ev event) {
	p := h.ofKind(ev.kind)[ev.victim]
	if p.exited() {
		h.supervise(ctx) // it died on its own just now: restart it first
	}
	k := Kill{At: time.Since(h.t0), Kind: ev.kind, Name: p.name, PID: p.pid(), Down: ev.down}
	p.kill()
	t := time.NewTimer(ev.down)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return
	}
	t0 := time.Now()
	if err := h.restart(ctx, p); err != nil {
		k.Err = err.Error()
	}
	k.Ready = time.Since(t0)
	h.rep.Kills = append(h.rep.Kills, k)
	msg := fmt.Sprintf("killed %s (pid %d), down %s, ready %s later", p.name, k.PID, k.Down.Round(time.Millisecond), k.Ready.Round(time.Millisecond))
	if k.Err != "" {
		msg += ": " + k.Err
	}
	h.progress("%s", msg)
}

// restart starts p again and waits until it is ready, trying again while
// it fails to start or exits before it is ready, up to ReadyTimeout.
func (h *harness) restart(ctx context.Context, p *proc) error {
	deadline := time.Now().Add(h.cfg.ReadyTimeout)
	for {
		err := p.start()
		if err == nil {
			err = p.waitReady(ctx, time.Until(deadline))
		}
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) || (p.cmd != nil && !p.exited()) {
			return err
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// supervise restarts every process that exited without being killed, and
// records the exit: a fleet process should never stop on its own.
func (h *harness) supervise(ctx context.Context) {
	for _, p := range h.procs {
		if p.cmd == nil || !p.exited() || p.killed {
			continue
		}
		x := Exit{At: time.Since(h.t0), Kind: p.kind, Name: p.name, Err: fmt.Sprint(p.exitErr), LogTail: p.tail(1500)}
		h.progress("%s exited on its own (%v); restarting it", p.name, p.exitErr)
		if err := h.restart(ctx, p); err != nil {
			x.RestartErr = err.Error()
		}
		h.rep.Exits = append(h.rep.Exits, x)
	}
}
