package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/toyllm"
)

type toyllmCmd struct {
	Listen        string        `default:"127.0.0.1:8000" help:"Address to serve on."`
	Model         string        `default:"rollfleet-toy" help:"Served model name."`
	MaxModelLen   int           `default:"32768" help:"Context window in tokens."`
	Latency       time.Duration `help:"Simulated time per generated token."`
	MaxConcurrent int           `help:"Cap on concurrently generating sequences (0 = none)."`
	LogLevel      string        `default:"info" enum:"debug,info,warn,error" help:"Log level."`
}

func (c *toyllmCmd) Run() error {
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.Logger(c.LogLevel)
	srv := toyllm.New(toyllm.Options{Model: c.Model, MaxModelLen: c.MaxModelLen, TokenLatency: c.Latency, MaxConcurrent: c.MaxConcurrent, Logger: log})
	url, stopSrv, err := srv.Start(ctx, c.Listen)
	if err != nil {
		return err
	}
	// Tests and scripts read this line to learn the URL.
	fmt.Fprintf(os.Stdout, "stand-in model listening on %s\n", url)
	log.Info("stand-in model serving (a test and demo stand-in, not a language model)", "url", url, "model", c.Model)
	<-ctx.Done()
	stopSrv()
	return nil
}

type serverCmd struct {
	Listen   string `default:"127.0.0.1:4222" help:"Address to serve NATS on."`
	DataDir  string `help:"JetStream store directory (required unless --config names one)."`
	Config   string `type:"existingfile" help:"nats-server configuration file: accounts, users and permissions (see examples/nats/auth.conf); --listen and --data-dir override its address and store."`
	Name     string `help:"Server name."`
	LogLevel string `default:"info" enum:"debug,info,warn,error" help:"Log level."`
}

func (c *serverCmd) Run() error {
	host, portStr, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--listen port: %w", err)
	}
	if port == 0 {
		port = -1 // a free port, not NATS's default 4222
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	log := cmdutil.Logger(c.LogLevel)
	s, err := bus.StartServer(bus.ServerOptions{Name: c.Name, Host: host, Port: port, DataDir: c.DataDir, ConfigFile: c.Config, Logger: log})
	if err != nil {
		return err
	}
	// Tests and scripts read this line to learn the URL.
	fmt.Fprintf(os.Stdout, "nats server listening on %s\n", s.ClientURL())
	<-ctx.Done()
	bus.Shutdown(s)
	return nil
}
