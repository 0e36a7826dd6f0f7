package bus_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// TestDataDirLock: a second server on a data dir in use fails, naming the
// holder; the dir is free again once the first has shut down, whether by
// bus.Shutdown or by the server's own Shutdown.
func TestDataDirLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	opts := bus.ServerOptions{DontListen: true, DataDir: dir}
	first, err := bus.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bus.StartServer(opts)
	if !errors.Is(err, bus.ErrDataDirInUse) {
		bus.Shutdown(first)
		t.Fatalf("second server on %s: want ErrDataDirInUse, got %v", dir, err)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid()), filepath.Base(os.Args[0]), "this process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, bus.LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	var h bus.DataDirHolder
	if err := json.Unmarshal(data, &h); err != nil || h.PID != os.Getpid() || h.Since.IsZero() {
		t.Errorf("lock file records %q (%v)", data, err)
	}

	bus.Shutdown(first)
	second, err := bus.StartServer(opts)
	if err != nil {
		t.Fatalf("after Shutdown: %v", err)
	}
	// Stopped without bus.Shutdown: the lock follows soon after.
	second.Shutdown()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		s, err := bus.StartServer(opts)
		if err == nil {
			bus.Shutdown(s)
		}
		return err
	})
}

// TestDataDirStaleLockFile: a lock file left by a process that is gone (no
// lock held) does not block, and is taken over.
func TestDataDirStaleLockFile(t *testing.T) {
	dir := t.TempDir()
	stale := `{"pid": 999999999, "command": "rollout run", "since": "2001-01-01T00:00:00Z"}` + "\n" + strings.Repeat(" ", 200)
	if err := os.WriteFile(filepath.Join(dir, bus.LockFileName), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	bustest.RunListeningServer(t, bus.ServerOptions{DontListen: true, DataDir: dir})
	data, err := os.ReadFile(filepath.Join(dir, bus.LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	var h bus.DataDirHolder
	if err := json.Unmarshal(data, &h); err != nil || h.PID != os.Getpid() {
		t.Fatalf("lock file not taken over: %q (%v)", data, err)
	}
}
