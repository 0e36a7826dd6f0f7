package bustest

import (
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/cluster"
)

// ClusterReadyTimeout bounds RunCluster's wait for the JetStream meta
// leader: an election takes a few seconds, longer under -race.
const ClusterReadyTimeout = 60 * time.Second

// RunCluster starts a NATS cluster with JetStream in the test's process
// (three nodes unless opts.Size says otherwise; stores in t.TempDir() unless
// opts.Dir is set; sync policy bus.TempStoreSync unless opts.Sync is set), waits
// until its JetStream meta leader is elected and
// every node is current, and shuts it down when the test ends. Connect to
// it with bus.Connect(c.URLs(), …).
func RunCluster(t testing.TB, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Sync == "" {
		opts.Sync = bus.TempStoreSync
	}
	c, err := cluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	CheckFor(t, ClusterReadyTimeout, 20*time.Millisecond, c.JetStreamReady)
	return c
}
