//go:build linux

package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS starts an embedded NATS server with JetStream storing in dir,
// syncing every write when syncAlways is set and every two minutes (the
// default) otherwise. It serves in-process connections only.
func startNATS(t *testing.T, dir string, syncAlways bool) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		DontListen: true,
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: syncAlways,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("NATS server not ready")
	}
	return s
}

func stopNATS(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

func jetStream(t *testing.T, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// syncAll fsyncs every file under dir, as if the kernel had written back
// everything written so far.
func syncAll(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNATSPowerLoss runs a JetStream server on a lazyfs, publishes
// messages until each is acknowledged, and cuts the power: the unsynced
// data is dropped and the lazyfs unmounted under the running server, so
// nothing its shutdown writes reaches the disk. A new server on a new
// lazyfs over the same directory then counts what survived. Syncing every
// write keeps every acknowledged message; the default policy, a sync every
// two minutes, loses them, and the stream itself unless its files were
// written back before the messages came.
func TestNATSPowerLoss(t *testing.T) {
	const published = 200
	tests := []struct {
		name       string
		syncAlways bool
		// syncStream writes back the new stream's files before publishing.
		syncStream bool
	}{
		{name: "sync always", syncAlways: true},
		{name: "sync every two minutes", syncAlways: false},
		{name: "sync every two minutes, stream written back", syncAlways: false, syncStream: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lfs, backing, mnt := mountTemp(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			s := startNATS(t, mnt, tc.syncAlways)
			js := jetStream(t, s)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name:     "POWER",
				Subjects: []string{"power.>"},
				Storage:  jetstream.FileStorage,
			}); err != nil {
				t.Fatal(err)
			}
			if tc.syncStream {
				syncAll(t, mnt)
			}
			for i := range published {
				if _, err := js.Publish(ctx, "power.msg", fmt.Appendf(nil, "message %d", i+1)); err != nil {
					t.Fatal(err)
				}
			}
			dropped := lfs.DropUnsynced()
			if err := lfs.Unmount(); err != nil {
				t.Fatal(err)
			}
			stopNATS(s)

			lfs2, err := Mount(backing, mnt, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := lfs2.Unmount(); err != nil {
					t.Error(err)
				}
			})
			s2 := startNATS(t, mnt, tc.syncAlways)
			t.Cleanup(func() { stopNATS(s2) })
			js2 := jetStream(t, s2)
			kept := uint64(0)
			stream, err := js2.Stream(ctx, "POWER")
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
				// The stream's own metadata was lost with the rest.
			case err != nil:
				t.Fatal(err)
			default:
				info, err := stream.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				kept = info.State.Msgs
			}
			stats := lfs.Stats()
			t.Logf("%d of %d acknowledged messages survived (stream found: %v); the drop forgot %d bytes; %d fsyncs wrote back %d bytes",
				kept, published, stream != nil, dropped, stats.Fsyncs, stats.BytesSynced)

			if !tc.syncAlways {
				if kept >= published {
					t.Errorf("all %d messages survived a power loss without syncs", published)
				}
				if dropped == 0 {
					t.Error("the drop forgot nothing")
				}
				if tc.syncStream && stream == nil {
					t.Error("the stream, written back before the messages, was lost")
				}
				return
			}
			if kept != published {
				t.Fatalf("%d of %d acknowledged messages survived, want all", kept, published)
			}
			last, err := stream.GetMsg(ctx, published)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(last.Data), fmt.Sprintf("message %d", published); got != want {
				t.Errorf("last message %q, want %q", got, want)
			}
		})
	}
}
