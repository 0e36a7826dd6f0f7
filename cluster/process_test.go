package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/cluster"
	"github.com/rollfleet/rollfleet/messages"
)

// node is a rollout server process of the test's cluster.
type node struct {
	args []string
	cmd  *exec.Cmd
	logs *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs the node and waits (bounded) until it prints its URL.
func (n *node) start(t *testing.T, bin string) {
	t.Helper()
	n.cmd = exec.Command(filepath.Join(bin, "rollout"), n.args...)
	n.logs = &syncBuffer{}
	n.cmd.Stderr = n.logs
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "nats server listening on ") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("rollout %v did not start:\n%s", n.args, n.logs.String())
	}
}

// kill ends the process with SIGKILL, as a crash would, and reaps it.
func (n *node) kill() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		_ = n.cmd.Wait()
	}
}

// processes are the nodes of a cluster run as rollout server processes,
// killed with SIGKILL.
type processes struct {
	plan  *cluster.Plan
	bin   string
	nodes []*node
}

// startProcesses builds rollout and starts a 3-node cluster of rollout
// server processes, killed when the test ends.
func startProcesses(t *testing.T) *processes {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../cmd/rollout")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	plan, err := cluster.NewPlan(cluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p := &processes{plan: plan, bin: bin, nodes: make([]*node, len(plan.Nodes))}
	for i := range p.nodes {
		p.nodes[i] = &node{args: append(plan.Args(i), "--log-level", "warn")}
		p.nodes[i].start(t, bin)
	}
	t.Cleanup(func() {
		for _, n := range p.nodes {
			n.kill()
			if t.Failed() {
				t.Logf("rollout %v:\n%s", n.args, n.logs.String())
			}
		}
	})
	return p
}

func (p *processes) Size() int                   { return len(p.nodes) }
func (p *processes) Name(i int) string           { return p.plan.Nodes[i].Name }
func (p *processes) URLs() string                { return p.plan.URLs() }
func (p *processes) Stop(_ *testing.T, i int)    { p.nodes[i].kill() }
func (p *processes) Restart(t *testing.T, i int) { p.nodes[i].start(t, p.bin) }

// Ready asks for the account's JetStream information, which takes a meta
// leader; StreamReady then shows whether the restarted node caught up.
func (p *processes) Ready(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.AccountInfo(ctx)
	return err
}

func (p *processes) StreamReady(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	return p.plan.StreamReady(ctx, js, stream)
}

// TestFleetSurvivesNodeCrashes is TestFleetSurvivesNodeRestarts with the
// nodes as rollout server processes and each stop a SIGKILL: a crashed
// leader is replaced only after a raft election timeout (seconds), while
// a cleanly stopped one hands over within about a second.
func TestFleetSurvivesNodeCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rollout and crashes a cluster of processes for a minute")
	}
	runFleet(t, startProcesses(t), []string{victimEpisodes, victimSteps, victimRandom, victimRandom})
}

// TestPublishRidesOutLeaderCrash runs three rollout server processes as a
// cluster (the command lines of cluster.Plan), publishes steps without a
// pause to the steps stream at three replicas, and SIGKILLs the stream's
// leader twice: a crashed leader is replaced only after a raft election
// timeout (seconds), and bus.Publish must ride that out with no failed
// publish and no message stored twice.
func TestPublishRidesOutLeaderCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rollout and runs a cluster of processes")
	}
	procs := startProcesses(t)
	plan, nodes := procs.plan, procs.nodes
	nc, err := bus.Connect(plan.URLs(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := messages.NewSubjects("")
	stream := subj.StreamSteps()
	ctx := context.Background()
	bustest.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return bus.EnsureStreams(cctx, js, subj, bus.StreamOptions{Replicas: 3})
	})
	ready := func() int {
		leader := -1
		bustest.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
			var err error
			leader, err = plan.StreamReady(ctx, js, stream)
			return err
		})
		return leader
	}
	ready()

	// The publisher: one step after another, each retried by bus.Publish.
	stop := make(chan struct{})
	var published, failed atomic.Int64
	var slowest atomic.Int64
	var errOnce sync.Once
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			err := bus.Publish(ctx, js, subj.Steps("", "crash", "crash"), []byte(fmt.Sprint(i)), fmt.Sprintf("crash/%d", i))
			if d := int64(time.Since(t0)); d > slowest.Load() {
				slowest.Store(d)
			}
			if err != nil {
				failed.Add(1)
				errOnce.Do(func() { firstErr = err })
				continue
			}
			published.Add(1)
		}
	}()

	for k := range 2 {
		before := published.Load()
		bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if published.Load() < before+50 {
				return fmt.Errorf("%d published", published.Load())
			}
			return nil
		})
		leader := ready()
		crashed := time.Now()
		nodes[leader].kill()
		var elected time.Duration
		bustest.CheckFor(t, time.Minute, 20*time.Millisecond, func() error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			st, err := js.Stream(cctx, stream)
			if err != nil {
				return err
			}
			if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader == "" || ci.Leader == plan.Nodes[leader].Name {
				return fmt.Errorf("no new leader")
			}
			elected = time.Since(crashed)
			return nil
		})
		procs.Restart(t, leader)
		ready()
		t.Logf("crash %d: SIGKILLed the leader %s; new leader after %s", k+1, plan.Nodes[leader].Name, elected.Round(time.Millisecond))
	}
	close(stop)
	<-done

	if n := failed.Load(); n > 0 {
		t.Errorf("%d publishes failed, the first with: %v", n, firstErr)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := st.CachedInfo().State.Msgs; msgs != uint64(published.Load()) {
		t.Errorf("%d messages stored for %d publishes", msgs, published.Load())
	}
	t.Logf("%d publishes, %d failed; the slowest took %s", published.Load(), failed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
}
