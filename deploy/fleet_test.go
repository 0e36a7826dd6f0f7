package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestComposeFleetRunsLocally runs compose.yaml's services as local
// processes on the loopback interface, with their own command lines,
// environments and healthchecks: only the host names, ports and paths that
// a container would have are mapped to this machine's (each node listens on
// ports of its own, as three containers would on one address each). The
// three NATS nodes form a cluster from nats.conf with the routes' password,
// the init job creates the streams with 3 replicas as the admin, the workers
// log in as their roles, and the demo trainer's 256 episodes all come back
// as trajectories. Then one node stops and a second run still completes on
// the other two.
func TestComposeFleetRunsLocally(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and a fleet of processes")
	}
	bin := binaries(t)
	services, _ := composeServices(t)
	work := t.TempDir()
	conf := readFile(t, natsConf)
	const monitorLine = "http: 0.0.0.0:8222"
	if strings.Count(conf, monitorLine) != 1 {
		t.Fatalf("%s: want one %q line to map", natsConf, monitorLine)
	}

	// Each node gets its own client, route and monitoring port, as each
	// container would its own address.
	ports := freePorts(t, 3*natsClusterLen+1)
	global := map[string]string{}
	local := map[string]map[string]string{}
	dataDirs := map[string]string{}
	for i := 1; i <= natsClusterLen; i++ {
		name := "nats-" + strconv.Itoa(i)
		client, route, monitor := ports[3*(i-1)], ports[3*(i-1)+1], ports[3*(i-1)+2]
		global[name+":4222"] = "127.0.0.1:" + client
		global[name+":6222"] = "127.0.0.1:" + route
		nodeConf := filepath.Join(work, name+".conf")
		if err := os.WriteFile(nodeConf, []byte(strings.Replace(conf, monitorLine, "http: 127.0.0.1:"+monitor, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		local[name] = map[string]string{
			"0.0.0.0:4222":             "127.0.0.1:" + client,
			"0.0.0.0:6222":             "127.0.0.1:" + route,
			"127.0.0.1:8222":           "127.0.0.1:" + monitor,
			"/etc/rollfleet/nats.conf": nodeConf,
		}
		dataDirs[name] = filepath.Join(work, name+"-data")
	}
	toy := ports[len(ports)-1]
	global["toyllm:8000"] = "127.0.0.1:" + toy
	local["toyllm"] = map[string]string{"0.0.0.0:8000": "127.0.0.1:" + toy, "127.0.0.1:8000": "127.0.0.1:" + toy}
	dataDirs["trainer"] = filepath.Join(work, "trainer-data")

	f := &fleet{t: t, bin: bin, logs: filepath.Join(work, "logs"), global: global, local: local, dataDirs: dataDirs, services: services}
	// The image's /data exists (the trainer writes there); the servers
	// create their own.
	for _, dir := range []string{f.logs, dataDirs["trainer"]} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(f.stopAll)

	for i := 1; i <= natsClusterLen; i++ {
		f.start("nats-" + strconv.Itoa(i))
	}
	for i := 1; i <= natsClusterLen; i++ {
		f.waitHealthy("nats-"+strconv.Itoa(i), 90*time.Second)
	}
	f.runOnce("init-streams", nil, 90*time.Second)
	f.start("toyllm")
	f.waitHealthy("toyllm", 30*time.Second)
	for _, name := range []string{"llmworker", "envworker", "collector"} {
		n, _ := strconv.Atoi(str(dig(services[name].raw, "deploy", "replicas")))
		for i := 0; i < max(n, 1); i++ {
			f.start(name)
		}
	}
	for _, name := range []string{"llmworker", "envworker", "collector"} {
		f.waitHealthy(name, 60*time.Second)
	}

	f.runOnce("trainer", nil, 3*time.Minute)
	want, _ := strconv.Atoi(process{argv: services["trainer"].command}.value("--episodes"))
	f.checkOutput(want)

	// One node down: the streams keep a majority, every process reconnects
	// to another node, and a second run completes.
	f.stop("nats-1")
	f.runOnce("trainer", map[string]string{"--episodes": "32"}, 3*time.Minute)
	f.checkOutput(32)
}

type fleet struct {
	t        *testing.T
	bin      string
	logs     string
	global   map[string]string            // host:port in any service → here
	local    map[string]map[string]string // per service: its own addresses and files → here
	dataDirs map[string]string            // per service: its /data
	services map[string]composeService
	procs    []*fleetProc
}

type fleetProc struct {
	service string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
}

// argv maps a service's command line (or healthcheck) to this machine.
func (f *fleet) argv(service string, argv []string, override map[string]string) []string {
	out := make([]string, 0, len(argv))
	for i, a := range argv {
		if i > 0 {
			if v, ok := override[argv[i-1]]; ok {
				a = v
			}
		}
		out = append(out, f.mapValue(service, a))
	}
	out[0] = filepath.Join(f.bin, filepath.Base(out[0]))
	for _, a := range out {
		if strings.Contains(a, "0.0.0.0") {
			f.t.Fatalf("service %s: %q would listen beyond the loopback interface", service, a)
		}
	}
	return out
}

func (f *fleet) mapValue(service, a string) string {
	if dir, ok := f.dataDirs[service]; ok && (a == "/data" || strings.HasPrefix(a, "/data/")) {
		return dir + strings.TrimPrefix(a, "/data")
	}
	for from, to := range f.local[service] {
		a = strings.ReplaceAll(a, from, to)
	}
	for from, to := range f.global {
		a = strings.ReplaceAll(a, from, to)
	}
	return a
}

// env is the service's environment mapped to this machine, without the test
// process's own RF_ variables.
func (f *fleet) env(service string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RF_") {
			env = append(env, kv)
		}
	}
	for k, v := range f.services[service].env {
		env = append(env, k+"="+f.mapValue(service, v))
	}
	return env
}

func (f *fleet) command(ctx context.Context, service string, argv []string, logName string) (*exec.Cmd, string) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = f.env(service)
	cmd.WaitDelay = 5 * time.Second
	logPath := filepath.Join(f.logs, logName)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	f.t.Cleanup(func() { logFile.Close() })
	return cmd, logPath
}

// start starts one replica of a long-running service.
func (f *fleet) start(service string) {
	f.t.Helper()
	s := f.services[service]
	argv := f.argv(service, s.command, nil)
	cmd, logPath := f.command(context.Background(), service, argv, fmt.Sprintf("%s-%d.log", service, len(f.procs)))
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start %s: %v", service, err)
	}
	p := &fleetProc{service: service, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	f.procs = append(f.procs, p)
}

// runOnce runs a one-shot service to completion and wants exit status 0.
func (f *fleet) runOnce(service string, override map[string]string, timeout time.Duration) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := f.argv(service, f.services[service].command, override)
	cmd, logPath := f.command(ctx, service, argv, service+".log")
	if err := cmd.Run(); err != nil {
		f.fail("%s %v: %v", service, argv[1:], err, logPath)
	}
}

// waitHealthy runs the service's healthcheck until it passes.
func (f *fleet) waitHealthy(service string, timeout time.Duration) {
	f.t.Helper()
	health := f.services[service].health
	if len(health) == 0 {
		f.t.Fatalf("service %s has no healthcheck", service)
	}
	argv := f.argv(service, health, nil)
	deadline := time.Now().Add(timeout)
	for {
		f.checkRunning()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd, logPath := f.command(ctx, service, argv, service+"-healthcheck.log")
		err := cmd.Run()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.fail("service %s never became healthy: %v", service, err, logPath)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkRunning fails if a long-running process has exited.
func (f *fleet) checkRunning() {
	f.t.Helper()
	for _, p := range f.procs {
		select {
		case <-p.done:
			f.fail("service %s exited: %v", p.service, p.cmd.ProcessState, p.log)
		default:
		}
	}
}

// stop stops every replica of a service with SIGTERM.
func (f *fleet) stop(service string) {
	f.t.Helper()
	var kept []*fleetProc
	for _, p := range f.procs {
		if p.service != service {
			kept = append(kept, p)
			continue
		}
		p.terminate()
	}
	f.procs = kept
}

func (p *fleetProc) terminate() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (f *fleet) stopAll() {
	// Workers first, the servers last, as "docker compose down" would.
	for i := len(f.procs) - 1; i >= 0; i-- {
		f.procs[i].terminate()
	}
	f.procs = nil
}

// checkOutput wants n distinct trajectories in the trainer's output and
// no failure records.
func (f *fleet) checkOutput(n int) {
	f.t.Helper()
	p := process{argv: f.services["trainer"].command}
	out := f.mapValue("trainer", p.value("--out"))
	ids := map[string]bool{}
	file, err := os.Open(out)
	if err != nil {
		f.t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var tr struct {
			EpisodeID string `json:"episode_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil || tr.EpisodeID == "" {
			f.t.Fatalf("%s: a line that is no trajectory (%v): %.200s", out, err, sc.Text())
		}
		ids[tr.EpisodeID] = true
	}
	if err := sc.Err(); err != nil {
		f.t.Fatal(err)
	}
	if len(ids) != n {
		f.t.Errorf("%s: %d distinct trajectories, want %d", out, len(ids), n)
	}
	if failures := f.mapValue("trainer", p.value("--failures-out")); failures != "" {
		if data, err := os.ReadFile(failures); err != nil || len(strings.TrimSpace(string(data))) > 0 {
			f.t.Errorf("%s: failure records (%v): %.500s", failures, err, data)
		}
	}
}

// fail reports a failure with the end of a log, and of every process's.
func (f *fleet) fail(format string, args ...any) {
	f.t.Helper()
	logPath := args[len(args)-1].(string)
	msg := fmt.Sprintf(format, args[:len(args)-1]...)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n--- %s:\n%s", msg, filepath.Base(logPath), tail(logPath, 20))
	for _, p := range f.procs {
		fmt.Fprintf(&b, "\n--- %s:\n%s", filepath.Base(p.log), tail(p.log, 5))
	}
	f.t.Fatal(b.String())
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(data), n)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
