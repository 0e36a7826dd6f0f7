package bustest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// OldServerEnv names an environment variable holding the path of a
// nats-server binary older than bus.MinServerVersion, for RunOldServer;
// unset, RunOldServer looks for Debian's (apt-get install nats-server).
const OldServerEnv = "ROLLFLEET_OLD_NATS_SERVER"

// RunOldServer starts an external nats-server binary, older than the fleet
// supports, with JetStream on a free loopback port and a store in
// t.TempDir(), and stops it when the test ends. It returns the server's URL
// and the version the binary reports. It skips the test, saying how to get
// one, when no such binary is installed.
func RunOldServer(t testing.TB) (url, version string) {
	t.Helper()
	bin := os.Getenv(OldServerEnv)
	if bin == "" {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
			if _, err := os.Stat(p); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Skipf("no old nats-server binary: apt-get install nats-server (Debian's 2.9), or set %s", OldServerEnv)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	version = strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server:")), "v")
	if version == "" {
		t.Fatalf("%s --version printed no version: %q", bin, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", filepath.Join(t.TempDir(), "store"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-done:
			t.Fatalf("%s exited at start", bin)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	return "nats://" + addr, version
}
