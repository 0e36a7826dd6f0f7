package main

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/toyllm"
)

type toyllmCmd struct {
	Listen        string        `default:"127.0.0.1:8000" help:"Address to serve on."`
	Model         string        `default:"rollfleet-toy" help:"Served model name."`
	MaxModelLen   int           `default:"32768" help:"Context window in tokens."`
	Latency       time.Duration `help:"Simulated time per generated token (decode time)."`
	MaxConcurrent int           `help:"Cap on concurrently generating sequences (0 = none)."`
	Cache         toyCacheFlags `embed:""`
	Skill         float64       `help:"Starting policy's logit for the planned token, in (0, 30]; higher makes fewer slips (0 = the default, 14). POST /update_weights changes it."`
	WeightVersion string        `help:"Starting weight version reported by GET /weight_info (default \"default\")."`
	Tokenizer     string        `type:"existingdir" placeholder:"DIR" help:"Speak a real model's vocabulary and chat template: a model directory with tokenizer.json and tokenizer_config.json (default: the byte-level toy vocabulary)."`
	ChatTemplate  string        `type:"existingfile" placeholder:"FILE" help:"Chat template (Jinja) for --tokenizer, in place of the tokenizer's own, as vLLM's --chat-template."`
	Reasoning     bool          `help:"With --tokenizer: the stand-in opens a <think> block itself where the chat template leaves thinking to the model, as Qwen3 does with enable_thinking on."`
	LogLevel      string        `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat     string        `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
}

// toyCacheFlags are the stand-in model's prefix cache and prefill flags,
// shared by rollout toyllm and, prefixed toy-, rollout run.
type toyCacheFlags struct {
	KVCacheTokens  int           `name:"kv-cache-tokens" help:"Stand-in model's KV cache capacity in tokens, with vLLM's automatic prefix caching: full blocks cached by their whole prefix, least recently used evicted, hits counted on /metrics (0 = no cache)."`
	BlockSize      int           `default:"16" help:"Stand-in model's prefix cache block size in tokens."`
	PrefillLatency time.Duration `help:"Stand-in model's simulated time per prompt token its prefix cache does not hold, waited before the generated tokens' (0 = none)."`
}

// apply checks the flags and sets their options in opts.
func (f toyCacheFlags) apply(opts *toyllm.Options) error {
	switch {
	case f.BlockSize < 1:
		return fmt.Errorf("prefix cache block size %d: must be at least 1", f.BlockSize)
	case f.KVCacheTokens < 0 || f.KVCacheTokens > 0 && f.KVCacheTokens < f.BlockSize:
		return fmt.Errorf("KV cache of %d tokens: must be 0 (none) or at least one block of %d", f.KVCacheTokens, f.BlockSize)
	case f.PrefillLatency < 0:
		return fmt.Errorf("prefill latency %v: must not be negative", f.PrefillLatency)
	}
	opts.KVCacheTokens, opts.BlockSize, opts.PrefillLatency = f.KVCacheTokens, f.BlockSize, f.PrefillLatency
	return nil
}

// options turns the flags into the server's options.
func (c *toyllmCmd) options() (toyllm.Options, error) {
	if c.Skill < 0 || c.Skill > toyllm.MaxSkill || math.IsNaN(c.Skill) {
		return toyllm.Options{}, fmt.Errorf("--skill %g: must be in (0, %g], or 0 for the default", c.Skill, toyllm.MaxSkill)
	}
	opts := toyllm.Options{
		Model: c.Model, MaxModelLen: c.MaxModelLen, TokenLatency: c.Latency, MaxConcurrent: c.MaxConcurrent,
		Skill: c.Skill, WeightVersion: c.WeightVersion,
	}
	if err := c.Cache.apply(&opts); err != nil {
		return toyllm.Options{}, err
	}
	switch {
	case c.Tokenizer != "":
		mt, err := toyllm.LoadModelTokenizer(c.Tokenizer, c.ChatTemplate)
		if err != nil {
			return toyllm.Options{}, fmt.Errorf("--tokenizer %s: %w", c.Tokenizer, err)
		}
		opts.Tokenizer, opts.Reasoning = mt, c.Reasoning
	case c.ChatTemplate != "":
		return toyllm.Options{}, fmt.Errorf("--chat-template needs --tokenizer: the toy vocabulary has its own template")
	case c.Reasoning:
		return toyllm.Options{}, fmt.Errorf("--reasoning needs --tokenizer: the toy vocabulary's template opens no thinking to the model")
	}
	return opts, nil
}

func (c *toyllmCmd) Run() error {
	opts, err := c.options()
	if err != nil {
		return err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat)
	opts.Logger = log
	srv := toyllm.New(opts)
	url, stopSrv, err := srv.Start(ctx, c.Listen)
	if err != nil {
		return err
	}
	// Tests and scripts read this line to learn the URL.
	fmt.Fprintf(os.Stdout, "stand-in model listening on %s\n", url)
	log.Info("stand-in model serving (a test and demo stand-in, not a language model)", "url", url, "model", c.Model,
		"tokenizer", cmp.Or(c.Tokenizer, "toy bytes"))
	<-ctx.Done()
	stopSrv()
	return nil
}

type serverCmd struct {
	Listen      string   `placeholder:"HOST:PORT" help:"Address to serve NATS on (default 127.0.0.1:4222, or the --config file's listen; port 0 picks a free one)."`
	DataDir     string   `help:"JetStream store directory (required unless --config names one)."`
	Sync        string   `placeholder:"always|DURATION" help:"When JetStream syncs its store to disk: always (before acknowledging each write) or an interval such as 2m (nats-server's default), which loses the writes acknowledged in the last interval on a power loss or OS crash. Default: the --config file's jetstream sync_interval, else always."`
	Config      string   `type:"existingfile" help:"nats-server configuration file: accounts, users and permissions (see examples/nats/auth.conf); the flags given override its settings."`
	ServerName  string   `name:"server-name" aliases:"name" help:"Server name; on a cluster unique per node and the same across restarts."`
	Cluster     string   `placeholder:"HOST:PORT" help:"Join a JetStream cluster: the address to accept routes from the other nodes on (see docs/cluster.md)."`
	Routes      []string `placeholder:"nats-route://HOST:PORT" help:"Route URLs of the cluster's nodes, comma-separated (this node's own may be listed)."`
	ClusterName string   `help:"Cluster name, the same on every node (default rollfleet)."`
	LogLevel    string   `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat   string   `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
}

// defaultListen is where the server listens when neither --listen nor the
// configuration file says.
const defaultListen = "127.0.0.1:4222"

// options turns the flags into the server's options. --listen and
// --cluster take HOST:PORT, port 0 picking a free port.
func (c *serverCmd) options() (bus.ServerOptions, error) {
	opts := bus.ServerOptions{
		Name: c.ServerName, DataDir: c.DataDir, ConfigFile: c.Config, Sync: c.Sync,
		ClusterName: c.ClusterName, Routes: c.Routes,
	}
	listen := c.Listen
	if listen == "" && c.Config == "" {
		listen = defaultListen
	}
	if listen != "" {
		var err error
		if opts.Host, opts.Port, err = hostPort(listen); err != nil {
			return opts, fmt.Errorf("--listen: %w", err)
		}
	}
	if c.Cluster != "" {
		var err error
		if opts.ClusterHost, opts.ClusterPort, err = hostPort(c.Cluster); err != nil {
			return opts, fmt.Errorf("--cluster: %w", err)
		}
	}
	return opts, nil
}

// hostPort splits HOST:PORT; port 0 becomes -1, a free port (not NATS's
// default).
func hostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("port: %w", err)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}

func (c *serverCmd) Run() error {
	opts, err := c.options()
	if err != nil {
		return err
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat)
	opts.Logger = log
	s, err := bus.StartServer(opts)
	if err != nil {
		return err
	}
	// Tests and scripts read this line to learn the URL.
	fmt.Fprintf(os.Stdout, "nats server listening on %s\n", s.ClientURL())
	if addr := s.ClusterAddr(); addr != nil {
		log.Info("joining the cluster", "server_name", s.Name(), "cluster", s.ClusterName(), "routes_on", addr.String())
	}
	// The store watchdog restarts JetStream after a full or read-only disk.
	var watch sync.WaitGroup
	watch.Go(func() {
		if err := bus.WatchStore(ctx, s, opts, bus.StoreWatchOptions{Logger: log}); err != nil {
			log.Error("store watchdog", "err", err)
		}
	})
	<-ctx.Done()
	watch.Wait()
	bus.Shutdown(s)
	return nil
}
