package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/gateway"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

type gatewayCmd struct {
	Listen string `default:"127.0.0.1:8080" help:"Address to serve the OpenAI-compatible API on."`
	NATS   string `placeholder:"URLS" help:"NATS server URL(s) of a fleet, comma-separated. Empty: an embedded server, with an LLM worker in this process."`
	cmdutil.NATSAuth
	VLLM             []string      `sep:"," help:"Model server URL(s) for an LLM worker in this process (default without --nats: the built-in stand-in model)."`
	Model            string        `help:"Model name to serve (default: the LLM workers'); also the in-process worker's model."`
	MaxModelLen      int           `help:"With --model: the context window to report and enforce (default: ask the LLM workers)."`
	Env              string        `default:"gateway" help:"Env of the trajectories published when a finish names none."`
	SessionTTL       time.Duration `default:"30m" help:"Expire sessions idle for longer than this (published as failures)."`
	MaxSessions      int           `default:"4096" help:"Most open sessions."`
	MaxSessionTokens int           `default:"262144" help:"Most tokens one session holds."`
	RequestTimeout   time.Duration `default:"5m" help:"Bound on each request to the LLM workers (then 504)."`
	NoIdlessSessions bool          `help:"Serve calls without a session id unrecorded, instead of attaching them to a session by their tokens."`
	ToolCallParser   string        `default:"hermes" enum:"hermes,none" help:"Read tool calls out of chat replies when a request offers tools (as vLLM's --tool-call-parser)."`
	ReasoningParser  string        `default:"none" enum:"qwen3,none" help:"Split <think> reasoning out of chat replies (as vLLM's --reasoning-parser)."`
	NoContinueTrace  bool          `help:"Render every chat call's messages as vLLM does, even when the template rewrites a session's history (Qwen3 dropping earlier reasoning): the session then starts a new segment instead of continuing its tokens."`
	Prefix           string        `default:"rf" help:"Subject prefix."`
	Replicas         int           `default:"1" help:"Stream replicas (3 on a JetStream cluster)."`
	DataDir          string        `help:"Embedded server data dir (default: a temp dir, removed afterwards)."`
	Out              string        `help:"Embedded server: write published trajectories as JSONL to this file ('-' for stdout)."`
	FailuresOut      string        `help:"Embedded server: write published failure records as JSONL to this file."`
	LogLevel         string        `default:"info" enum:"debug,info,warn,error" help:"Log level (logs go to stderr)."`
	LogFormat        string        `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
	OTLP             string        `placeholder:"URL" help:"Send the in-process LLM worker's OpenTelemetry spans to this OTLP/HTTP collector (http://host:4318); off when empty."`
	Metrics          string        `placeholder:"ADDR" help:"Serve Prometheus metrics (/metrics), liveness (/healthz) and readiness (/readyz) over HTTP on this address (host:port)."`
	cmdutil.GC
}

func (c *gatewayCmd) Run() error {
	if err := c.Tune(); err != nil {
		return err
	}
	if c.NATS != "" && (c.DataDir != "" || c.Out != "" || c.FailuresOut != "") {
		return errors.New("--data-dir, --out and --failures-out are for the embedded server; with --nats, read the streams directly")
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat).With("process", "gateway")
	exp, stopTracing, err := cmdutil.StartTracing(ctx, c.OTLP, "rollout-gateway", log)
	if err != nil {
		return fmt.Errorf("--otlp: %w", err)
	}
	defer stopTracing()

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	m, stopMetrics, err := cmdutil.ServeMetrics(c.Metrics, log)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, stopMetrics)
	nc, subj, connect, err := c.connect(ctx, log, &cleanups)
	if err != nil {
		return err
	}
	if err := watchNATS(m, nc, subj); err != nil {
		return err
	}

	// The goroutines below are owned here: the signal stops the gateway
	// first, so that the calls it is serving still reach the LLM worker,
	// then the worker; whichever fails stops the other. wg waits for them
	// before the connections close.
	gwCtx, stopGateway := context.WithCancel(ctx)
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	goRun := func(name string, ctx context.Context, run func(context.Context) error) {
		wg.Go(func() {
			defer stopGateway()
			defer stopWorker()
			if err := run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	defer func() {
		stopGateway()
		stopWorker()
		wg.Wait()
	}()

	endpoints := c.VLLM
	if len(endpoints) == 0 && c.NATS == "" {
		url, stopModel, err := toyllm.New(toyllm.Options{Logger: log}).Start(workerCtx, "127.0.0.1:0")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, stopModel)
		log.Info("stand-in model serving (a test and demo stand-in, not a language model)", "url", url)
		endpoints = []string{url}
	}
	if len(endpoints) > 0 {
		wc, err := connect("llmworker")
		if err != nil {
			return err
		}
		w, err := llm.New(wc, llm.Options{Endpoints: endpoints, Model: c.Model, Subjects: subj, Logger: log, Metrics: m.LLM(), Tracer: exp.Tracer("rollfleet/gateway")})
		if err != nil {
			return err
		}
		if err := m.WatchLLM(w); err != nil {
			return err
		}
		goRun("llm worker", workerCtx, w.Run)
	}
	if c.NATS == "" {
		if err := c.writeOutputs(ctx, nc, subj, &cleanups); err != nil {
			return err
		}
	}

	gw, err := gateway.New(nc, gateway.Options{
		Subjects: subj, Env: c.Env, Model: c.Model, MaxModelLen: c.MaxModelLen, RequestTimeout: c.RequestTimeout,
		SessionTTL: c.SessionTTL, MaxSessions: c.MaxSessions, MaxSessionTokens: c.MaxSessionTokens,
		ToolCallParser: c.ToolCallParser, ReasoningParser: c.ReasoningParser, NoIdlessSessions: c.NoIdlessSessions,
		NoContinueTrace: c.NoContinueTrace,
		Streams:         bus.StreamOptions{Replicas: c.Replicas}, Logger: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	// Tests and scripts read this line to learn the URL.
	announce := os.Stdout
	if c.Out == "-" {
		announce = os.Stderr
	}
	fmt.Fprintf(announce, "gateway listening on http://%s\n", ln.Addr())
	goRun("gateway", gwCtx, func(ctx context.Context) error { return gw.Serve(ctx, ln) })
	wg.Wait()
	return errors.Join(errs...)
}

// connect connects to the fleet's NATS, or starts an embedded server. It returns the
// gateway's connection and a function opening more connections, all closed by cleanups.
func (c *gatewayCmd) connect(ctx context.Context, log *slog.Logger, cleanups *[]func()) (*nats.Conn, messages.Subjects, func(string) (*nats.Conn, error), error) {
	dial, err := c.dialer(ctx, log, cleanups)
	if err != nil {
		return nil, messages.Subjects{}, nil, err
	}
	// Every connection is drained when the command ends.
	connect := func(name string) (*nats.Conn, error) {
		nc, err := dial(name)
		if err != nil {
			return nil, err
		}
		*cleanups = append(*cleanups, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = bus.Drain(dctx, nc)
		})
		return nc, nil
	}
	nc, err := connect("gateway")
	if err != nil {
		return nil, messages.Subjects{}, nil, err
	}
	return nc, messages.NewSubjects(c.Prefix), connect, nil
}

// dialer returns a function opening a named connection to the fleet's NATS, or, without
// --nats, starts an embedded server (stopped by cleanups) and returns one opening in-process
// connections to it.
func (c *gatewayCmd) dialer(ctx context.Context, log *slog.Logger, cleanups *[]func()) (func(string) (*nats.Conn, error), error) {
	if c.NATS != "" {
		fleet := cmdutil.Fleet{NATS: c.NATS, NATSAuth: c.NATSAuth, Prefix: c.Prefix, Replicas: c.Replicas, LogLevel: c.LogLevel, LogFormat: c.LogFormat}
		return func(name string) (*nats.Conn, error) {
			nc, _, _, err := fleet.Connect(ctx, name, log)
			return nc, err
		}, nil
	}
	if err := messages.ValidatePrefix(c.Prefix); err != nil {
		return nil, fmt.Errorf("--prefix: %w", err)
	}
	dir, syncPolicy := c.DataDir, ""
	if dir == "" {
		syncPolicy = bus.TempStoreSync
		tmp, err := os.MkdirTemp("", "rollfleet-gateway-")
		if err != nil {
			return nil, err
		}
		*cleanups = append(*cleanups, func() { _ = os.RemoveAll(tmp) })
		dir = tmp
	}
	srv, err := bus.StartServer(bus.ServerOptions{DontListen: true, DataDir: dir, Sync: syncPolicy})
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, func() { bus.Shutdown(srv) })
	return func(name string) (*nats.Conn, error) { return bus.ConnectInProcess(srv, name) }, nil
}

// writeOutputs writes every trajectory and failure record published on the embedded server
// to --out and --failures-out as JSON lines.
func (c *gatewayCmd) writeOutputs(ctx context.Context, nc *nats.Conn, subj messages.Subjects, cleanups *[]func()) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{Replicas: c.Replicas}); err != nil {
		return err
	}
	open := func(path string) (io.Writer, error) {
		if path == "-" {
			return os.Stdout, nil
		}
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		*cleanups = append(*cleanups, func() { _ = f.Close() })
		return f, nil
	}
	for _, out := range []struct {
		path, stream, filter, name string
		decode                     func([]byte) (any, error)
	}{
		{c.Out, subj.StreamTrajectories(), subj.TrajectoriesOfRun(gateway.DefaultRun), "gateway-trajectories",
			func(b []byte) (any, error) { return messages.Decode[messages.Trajectory](b) }},
		{c.FailuresOut, subj.StreamFailures(), subj.FailuresOfRun(gateway.DefaultRun), "gateway-failures",
			func(b []byte) (any, error) { return messages.Decode[messages.Failure](b) }},
	} {
		if out.path == "" {
			continue
		}
		w, err := open(out.path)
		if err != nil {
			return err
		}
		// Records published while the gateway stops are written too: the
		// consumer lives until its cleanup, not until the signal. The
		// streams are work queues: a record is acknowledged, and so freed,
		// once written.
		cons, err := js.CreateOrUpdateConsumer(context.WithoutCancel(ctx), out.stream, jetstream.ConsumerConfig{
			Durable: out.name, FilterSubject: out.filter, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			return fmt.Errorf("watch %s: %w", out.stream, err)
		}
		enc := json.NewEncoder(w)
		decode := out.decode
		cc, err := cons.Consume(func(m jetstream.Msg) {
			v, err := decode(m.Data())
			if err == nil {
				err = enc.Encode(v)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "writing %s: %v\n", out.path, err)
			}
			_ = m.Ack()
		})
		if err != nil {
			return fmt.Errorf("watch %s: %w", out.stream, err)
		}
		// Registered after the file, so it stops before the file closes.
		*cleanups = append(*cleanups, cc.Stop)
	}
	return nil
}
