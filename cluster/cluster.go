// Package cluster runs a NATS cluster with JetStream inside one process:
// embedded nats-servers (three by default) joined by routes over TCP on
// 127.0.0.1, each with its own store directory. Tests and demos use it to
// run rollfleet on a cluster and to stop and restart nodes under it; a node
// restarts with its name, store and ports, as a real node would.
//
// A Plan lays a cluster out (names, stores, ports, routes) and gives each
// node's rollout server command line, for harnesses that run the nodes as
// processes (rollout server --server-name, --cluster and --routes; see
// docs/cluster.md).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
)

// ErrNotReady means the cluster, a node or a stream is not ready (yet):
// a node is down or not current, a leader is being elected, a replica
// catches up.
var ErrNotReady = errors.New("cluster: not ready")

// ErrOptions means Options that cannot make a cluster.
var ErrOptions = errors.New("cluster: bad options")

// ErrNodeIndex means a node index out of range.
var ErrNodeIndex = errors.New("cluster: no such node")

// Options configures a cluster. Zero values take the defaults noted.
type Options struct {
	// Size is the number of nodes (default 3).
	Size int
	// Dir holds one store directory per node, named after it. Required.
	Dir string
	// Name is the cluster name (default bus.DefaultClusterName).
	Name string
	// NodePrefix names the nodes NodePrefix-1, NodePrefix-2, … (default
	// "n").
	NodePrefix string
	// ReadyTimeout bounds the wait for a node to accept connections
	// (default 10s).
	ReadyTimeout time.Duration
	// Logger receives the servers' log lines, each with its node's name;
	// nil discards them.
	Logger *slog.Logger
	// Sync is every node's sync policy (bus.ServerOptions.Sync); empty
	// means bus.SyncAlways.
	Sync string
}

func (o *Options) setDefaults() {
	if o.Size <= 0 {
		o.Size = 3
	}
	if o.Name == "" {
		o.Name = bus.DefaultClusterName
	}
	if o.NodePrefix == "" {
		o.NodePrefix = "n"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
}

// Plan is a cluster's layout: each node's name, store directory, client
// and route ports, and the routes to every node. Start runs it in this
// process; Args gives the rollout server command line of each node, for a
// harness that runs the nodes as processes.
type Plan struct {
	// Nodes holds the options each node starts with, every time.
	Nodes []bus.ServerOptions
}

// NewPlan lays out a cluster on 127.0.0.1 with ports that are free at the
// moment. Options.Logger goes to each node's options, with the node's name.
func NewPlan(opts Options) (*Plan, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: Dir is required", ErrOptions)
	}
	ports, err := freePorts(2 * opts.Size)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range opts.Size {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[2*i+1]))
	}
	p := &Plan{}
	for i := range opts.Size {
		name := fmt.Sprintf("%s-%d", opts.NodePrefix, i+1)
		n := bus.ServerOptions{
			Name: name, Host: "127.0.0.1", Port: ports[2*i], DataDir: filepath.Join(opts.Dir, name),
			ReadyTimeout: opts.ReadyTimeout, Sync: opts.Sync,
			ClusterName: opts.Name, ClusterHost: "127.0.0.1", ClusterPort: ports[2*i+1], Routes: routes,
		}
		if opts.Logger != nil {
			n.Logger = opts.Logger.With("node", name)
		}
		p.Nodes = append(p.Nodes, n)
	}
	return p, nil
}

// URLs lists every node's client URL, comma-separated, as bus.Connect and
// the --nats flags take them.
func (p *Plan) URLs() string {
	urls := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		urls[i] = fmt.Sprintf("nats://%s:%d", n.Host, n.Port)
	}
	return strings.Join(urls, ",")
}

// Args is the rollout command line (without the program name) that runs
// node i as a process: rollout server with its name, address, store,
// route address, cluster name and routes.
func (p *Plan) Args(i int) []string {
	n := p.Nodes[i]
	args := []string{
		"server", "--server-name", n.Name,
		"--listen", net.JoinHostPort(n.Host, strconv.Itoa(n.Port)),
		"--data-dir", n.DataDir,
		"--cluster", net.JoinHostPort(n.ClusterHost, strconv.Itoa(n.ClusterPort)),
		"--cluster-name", n.ClusterName,
		"--routes", strings.Join(n.Routes, ","),
	}
	if n.Sync != "" {
		args = append(args, "--sync", n.Sync)
	}
	return args
}

// Index is the index of the node named name, or -1.
func (p *Plan) Index(name string) int {
	for i, n := range p.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Cluster is a cluster running in this process. Its methods are safe for
// concurrent use.
type Cluster struct {
	plan *Plan

	mu      sync.Mutex
	servers []*server.Server // nil while a node is stopped
}

// Start lays out a cluster (NewPlan) and starts every node; it returns once
// each accepts connections. The JetStream meta leader is elected shortly
// after: wait for JetStreamReady before creating streams. The caller stops
// the cluster with Shutdown.
func Start(opts Options) (*Cluster, error) {
	p, err := NewPlan(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{plan: p, servers: make([]*server.Server, len(p.Nodes))}
	for i := range p.Nodes {
		if err := c.Restart(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	return c, nil
}

// Plan is the cluster's layout.
func (c *Cluster) Plan() *Plan { return c.plan }

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.plan.Nodes) }

// Name is node i's server name.
func (c *Cluster) Name(i int) string { return c.plan.Nodes[i].Name }

// URLs lists every node's client URL, comma-separated.
func (c *Cluster) URLs() string { return c.plan.URLs() }

// Server is node i's server, nil while the node is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Running lists the servers of the running nodes.
func (c *Cluster) Running() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*server.Server
	for _, s := range c.servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Stop shuts node i down and waits until it is gone. Its clients move to
// the other nodes; stopping a stopped node does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		bus.Shutdown(s)
	}
}

// Restart starts node i again with its name, store and ports, and waits
// until it accepts connections. Restarting a running node does nothing.
func (c *Cluster) Restart(i int) error {
	if i < 0 || i >= len(c.plan.Nodes) {
		return fmt.Errorf("%w: %d of %d", ErrNodeIndex, i, len(c.plan.Nodes))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers[i] != nil {
		return nil
	}
	s, err := bus.StartServer(c.plan.Nodes[i])
	if err != nil {
		return fmt.Errorf("cluster: start %s: %w", c.plan.Nodes[i].Name, err)
	}
	c.servers[i] = s
	return nil
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.servers {
		c.Stop(i)
	}
}

// JetStreamReady reports nil when every node runs, each sees the others
// over routes, one of them is the JetStream meta leader and every one is
// current with it; otherwise an error that says what is missing.
func (c *Cluster) JetStreamReady() error {
	running := c.Running()
	if len(running) < c.Size() {
		return fmt.Errorf("%w: %d of %d nodes running", ErrNotReady, len(running), c.Size())
	}
	leaders := 0
	for _, s := range running {
		if n := s.NumRemotes(); n < c.Size()-1 {
			return fmt.Errorf("%w: %s has routes to %d of %d other nodes", ErrNotReady, s.Name(), n, c.Size()-1)
		}
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("%w: %s not current with the JetStream meta leader", ErrNotReady, s.Name())
		}
		if s.JetStreamIsLeader() {
			leaders++
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%w: %d JetStream meta leaders", ErrNotReady, leaders)
	}
	return nil
}

// StreamReady reports nil when stream has a leader and every replica is
// current; otherwise an error that says what is missing. It also returns
// the index of the leader's node (-1 when unknown).
func (c *Cluster) StreamReady(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	return c.plan.StreamReady(ctx, js, stream)
}

// StreamReady reports nil when stream has a leader and every replica is
// current; otherwise an error that says what is missing. It also returns
// the index of the leader's node (-1 when unknown).
func (p *Plan) StreamReady(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return -1, fmt.Errorf("stream %s: %w", stream, err)
	}
	info := st.CachedInfo()
	ci := info.Cluster
	if ci == nil || ci.Leader == "" {
		return -1, fmt.Errorf("%w: stream %s has no leader", ErrNotReady, stream)
	}
	leader := p.Index(ci.Leader)
	if want := info.Config.Replicas - 1; len(ci.Replicas) != want {
		return leader, fmt.Errorf("%w: stream %s has %d of %d followers", ErrNotReady, stream, len(ci.Replicas), want)
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return leader, fmt.Errorf("%w: stream %s replica %s not current (offline %v, lag %d)", ErrNotReady, stream, r.Name, r.Offline, r.Lag)
		}
	}
	return leader, nil
}
