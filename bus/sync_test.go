package bus_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// TestServerSyncPolicy checks the sync policy a started server's JetStream runs with: sync
// before acknowledging unless told otherwise, by the option or by the configuration file.
func TestServerSyncPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sync     string
		file     string // the jetstream block's contents; no file when empty
		always   bool
		interval time.Duration // checked when not always
	}{
		{name: "default", always: true},
		{name: "always", sync: "always", always: true},
		{name: "always any case", sync: "Always", always: true},
		{name: "interval", sync: "30s", interval: 30 * time.Second},
		{name: "file without sync", file: "max_file_store: 1GB", always: true},
		{name: "file interval", file: "sync_interval: 10s", interval: 10 * time.Second},
		{name: "file always", file: "sync_interval: always", always: true},
		{name: "option over file", sync: "always", file: "sync_interval: 2m", always: true},
		{name: "interval over file", sync: "5s", file: "sync_interval: always", interval: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := bus.ServerOptions{Sync: tc.sync}
			if tc.file != "" {
				opts.ConfigFile = filepath.Join(t.TempDir(), "nats.conf")
				conf := "jetstream {\n  " + tc.file + "\n}\n"
				if err := os.WriteFile(opts.ConfigFile, []byte(conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			opts.DontListen, opts.DataDir = true, t.TempDir()
			s := bustest.RunListeningServer(t, opts)
			cfg := s.JetStreamConfig()
			if cfg == nil {
				t.Fatal("JetStream is off")
			}
			if cfg.SyncAlways != tc.always || !tc.always && cfg.SyncInterval != tc.interval {
				t.Errorf("sync always %v every %s, want always %v every %s", cfg.SyncAlways, cfg.SyncInterval, tc.always, tc.interval)
			}
		})
	}
}

// TestParseSync checks the policies ParseSync reads and refuses.
func TestParseSync(t *testing.T) {
	for _, bad := range []string{"", "never", "0s", "-1m", "10"} {
		if _, _, err := bus.ParseSync(bad); !errors.Is(err, bus.ErrBadSync) {
			t.Errorf("ParseSync(%q): %v, want ErrBadSync", bad, err)
		}
	}
	if always, _, err := bus.ParseSync("ALWAYS"); err != nil || !always {
		t.Errorf("ParseSync(ALWAYS) = %v, %v", always, err)
	}
	if always, d, err := bus.ParseSync("1m30s"); err != nil || always || d != 90*time.Second {
		t.Errorf("ParseSync(1m30s) = %v %s, %v", always, d, err)
	}
}
