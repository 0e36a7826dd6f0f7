package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
	"github.com/rollfleet/rollfleet/trainer/api"
)

type apiCmd struct {
	Listen string `default:"127.0.0.1:8090" help:"Address to serve the trainer API on (port 0: any free port; the URL is printed)."`
	NATS   string `placeholder:"URLS" help:"NATS server URL(s) of a fleet, comma-separated. Empty: an embedded server with an LLM worker, an env worker and a collector in this process."`
	cmdutil.NATSAuth
	VLLM         []string      `sep:"," help:"Embedded fleet: model server URL(s) (default: the built-in stand-in model)."`
	Model        string        `help:"Embedded fleet: the served model name (default: the server's first)."`
	Concurrency  int           `default:"256" help:"Embedded fleet: the env worker's episode limit."`
	DataDir      string        `help:"Embedded fleet: the NATS store (default: a temp dir, removed afterwards)."`
	AckWait      time.Duration `default:"60s" help:"How long a delivered result waits for its acknowledgement before it is delivered again."`
	MaxBodyBytes int64         `default:"16777216" help:"Largest request body accepted."`
	LogLevel     string        `default:"info" enum:"debug,info,warn,error" help:"Log level (logs go to stderr)."`
	LogFormat    string        `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
	OTLP         string        `placeholder:"URL" help:"Embedded fleet: send its workers' OpenTelemetry spans to this OTLP/HTTP collector (http://host:4318); off when empty."`
	Metrics      string        `placeholder:"ADDR" help:"Serve Prometheus metrics (/metrics), liveness (/healthz) and readiness (/readyz) over HTTP on this address (host:port)."`
}

func (c *apiCmd) Run() error {
	if c.NATS != "" && (c.DataDir != "" || len(c.VLLM) > 0 || c.Model != "") {
		return errors.New("--data-dir, --vllm and --model are for the embedded fleet; with --nats the fleet's own workers play the episodes")
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat).With("process", "api")
	exp, stopTracing, err := cmdutil.StartTracing(ctx, c.OTLP, "rollout-api", log)
	if err != nil {
		return fmt.Errorf("--otlp: %w", err)
	}
	defer stopTracing()
	m, stopMetrics, err := cmdutil.ServeMetrics(c.Metrics, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	var nc *nats.Conn
	if c.NATS != "" {
		var err error
		if nc, err = bus.Connect(c.NATS, "trainer-api", log, c.ConnectOptions()); err != nil {
			return c.Explain(err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = bus.Drain(dctx, nc)
		}()
	} else {
		f, err := fleet.StartStanding(ctx, fleet.Options{VLLM: c.VLLM, Model: c.Model, Concurrency: c.Concurrency, DataDir: c.DataDir, Logger: log, Metrics: m, Tracer: exp.Tracer("rollfleet/api")})
		if err != nil {
			return err
		}
		defer f.Close()
		if len(c.VLLM) == 0 {
			log.Info("embedded fleet with the stand-in model (a test and demo stand-in, not a language model)")
		}
		if nc, err = f.Connect("trainer-api"); err != nil {
			return err
		}
	}
	if err := watchNATS(m, nc, messages.NewSubjects("")); err != nil {
		return err
	}
	client, err := trainer.New(nc, trainer.Options{AckWait: c.AckWait, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           api.New(client, api.Options{MaxBodyBytes: c.MaxBodyBytes, Connected: nc.IsConnected, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	fmt.Fprintf(os.Stdout, "rollout api listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Result streams end with the signal's context; the rest finish.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	<-served
	return nil
}
