package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cmd/internal/cmdutil"
	"github.com/rollfleet/rollfleet/fleetstatus"
	"github.com/rollfleet/rollfleet/messages"
)

// statusCmd prints the fleet at a glance: streams and consumers, workers,
// the policy state, batches and runs.
type statusCmd struct {
	lookFlags
	JSON    bool          `name:"json" help:"Print the snapshot as JSON instead of tables."`
	Timeout time.Duration `default:"30s" help:"Give up after this long."`
}

func (c *statusCmd) Run() error {
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	nc, subj, err := c.connect(ctx, "rollout-status")
	if err != nil {
		return err
	}
	defer nc.Close()
	snap, err := fleetstatus.Collect(ctx, nc, fleetstatus.Options{Subjects: subj})
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(snap)
	} else {
		err = fleetstatus.WriteText(os.Stdout, snap)
	}
	if err != nil {
		return err
	}
	if len(snap.Errors) > 0 {
		return exitWith(1, fmt.Errorf("status: %d part(s) of the fleet's state could not be read", len(snap.Errors)))
	}
	return nil
}

// lookFlags are the flags of the commands that look at a fleet without
// being part of it (status, tail): where it is, how to log in, its prefix.
type lookFlags struct {
	NATS string `default:"nats://127.0.0.1:4222" env:"RF_NATS" help:"NATS server URL(s) of the fleet, comma-separated."`
	cmdutil.NATSAuth
	Prefix string `default:"rf" help:"Subject prefix."`
}

// connectWait bounds how long a look at the fleet waits for its server.
const connectWait = 2 * time.Second

// errUnreachable means no NATS server answered at the URLs given.
var errUnreachable = errors.New("no NATS server reachable")

// connect connects to the fleet's server, failing at once (not retrying
// forever as a fleet process does) when none answers.
func (f *lookFlags) connect(ctx context.Context, name string) (*nats.Conn, messages.Subjects, error) {
	if err := messages.ValidatePrefix(f.Prefix); err != nil {
		return nil, messages.Subjects{}, fmt.Errorf("--prefix: %w", err)
	}
	subj := messages.NewSubjects(f.Prefix)
	co := f.ConnectOptions()
	nc, err := bus.Connect(f.NATS, name, cmdutil.Logger("error"), co)
	if err != nil {
		return nil, subj, f.Explain(err)
	}
	if !nc.IsConnected() {
		connected := nc.StatusChanged(nats.CONNECTED)
		t := time.NewTimer(connectWait)
		defer t.Stop()
		select {
		case <-connected:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if !nc.IsConnected() {
		// nats.go keeps the reason of a failed first connect to itself;
		// bus.Connect returned it already when it was the credentials or
		// TLS, so this is a server that does not answer.
		nc.Close()
		err := co.Explain(f.NATS, fmt.Errorf("%w within %s", errUnreachable, connectWait))
		return nil, subj, fmt.Errorf("%w (is the server up? check --nats)", err)
	}
	return nc, subj, nil
}
