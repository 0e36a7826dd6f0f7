package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/dashboard"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
)

// dashboardCmd serves the live dashboard of a fleet: it only watches (core
// NATS subscriptions, status requests and stream info), taking nothing from
// the streams.
type dashboardCmd struct {
	NATS   string `default:"nats://127.0.0.1:4222" env:"RF_NATS" placeholder:"URLS" help:"NATS server URL(s) of the fleet, comma-separated."`
	Listen string `default:"127.0.0.1:8070" help:"Address to serve the dashboard on (port 0: any free port; the URL is printed)."`
	Prefix string `default:"rf" help:"Subject prefix."`
	RunID  string `name:"run" placeholder:"RUN_ID" help:"Count only this run's outcomes (default: every run's)."`
	cmdutil.NATSAuth
	LogLevel  string `default:"info" enum:"debug,info,warn,error" help:"Log level (logs go to stderr)."`
	LogFormat string `default:"text" enum:"text,json" help:"Log format: text (key=value) or json (one object per line)."`
}

// Run serves the dashboard until interrupted.
func (c *dashboardCmd) Run() error {
	if err := messages.ValidatePrefix(c.Prefix); err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.NewLogger(c.LogLevel, c.LogFormat).With("process", "dashboard")
	nc, err := bus.Connect(c.NATS, "dashboard", log, c.ConnectOptions())
	if err != nil {
		return c.Explain(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = bus.Drain(dctx, nc)
	}()
	d := dashboard.New(dashboard.Options{Subjects: messages.NewSubjects(c.Prefix), Run: c.RunID, Logger: log})
	stopWatch, err := d.Watch(nc)
	if err != nil {
		return err
	}
	defer stopWatch()
	srv, err := dashboard.Listen(d, c.Listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "rollout dashboard on %s\n", srv.URL())
	<-ctx.Done()
	return srv.Close()
}

// startRunDashboard serves the dashboard of rollout run's own run on addr
// and hooks it to the run's NATS server through opts.Attach. close shuts
// the server down once the run has returned.
func startRunDashboard(addr string, opts *fleet.Options, log *slog.Logger) (close func(), err error) {
	d := dashboard.New(dashboard.Options{Run: opts.RunID, Logger: log})
	srv, err := dashboard.Listen(d, addr)
	if err != nil {
		return nil, fmt.Errorf("--dashboard: %w", err)
	}
	fmt.Fprintf(os.Stderr, "rollout run: dashboard on %s\n", srv.URL())
	opts.Attach = func(connect func(string) (*nats.Conn, error)) (func(), error) {
		nc, err := connect("dashboard")
		if err != nil {
			return nil, err
		}
		return d.Watch(nc)
	}
	return func() {
		if err := srv.Close(); err != nil {
			log.Warn("dashboard", "err", err)
		}
	}, nil
}
