package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// A server older than the fleet supports is refused at connect, with both
// versions named, instead of failing later on the first feature it lacks.
func TestConnectRefusesOldServer(t *testing.T) {
	url, version := bustest.RunOldServer(t)
	nc, err := bus.Connect(url, "test", nil)
	if err == nil {
		nc.Close()
		t.Fatalf("connected to nats-server %s", version)
	}
	if !errors.Is(err, bus.ErrServerTooOld) {
		t.Fatalf("err = %v, want ErrServerTooOld", err)
	}
	for _, want := range []string{version, bus.MinServerVersion} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// The embedded server is new enough.
func TestCheckServerVersionEmbedded(t *testing.T) {
	nc := bustest.Connect(t, bustest.RunServer(t), "test")
	if err := bus.CheckServerVersion(nc); err != nil {
		t.Fatal(err)
	}
}
