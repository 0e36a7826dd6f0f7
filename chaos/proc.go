package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one fleet process slot: a binary with fixed arguments that the
// harness starts, kills and starts again. Only the harness's fleet owner
// touches a proc's fields; the goroutine that waits for the running process
// publishes its exit through exited and done.
type proc struct {
	name    string // instance name, e.g. "envworker-2"
	kind    Kind
	bin     string
	args    []string
	logPath string
	// ready reports whether the incarnation whose log starts at offset is
	// ready; nil means it is ready as soon as it runs.
	ready func(ctx context.Context, p *proc, offset int64) (bool, error)

	cmd     *exec.Cmd
	log     *os.File
	offset  int64         // log size when the current incarnation started
	done    chan struct{} // closed when the current incarnation has exited
	exitErr error         // set before done is closed
	starts  int
	killed  bool // the harness killed the current incarnation
	// paused is set while the harness holds the current incarnation
	// stopped with SIGSTOP.
	paused bool
	// restarting is set from a kill (or an exit) until the next
	// incarnation is ready or the harness gave up on it.
	restarting bool
}

// start runs a new incarnation of p, its output appended to p's log file.
func (p *proc) start() error {
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s is still running", p.name)
	}
	if p.log == nil {
		f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.log = f
	}
	st, err := p.log.Stat()
	if err != nil {
		return err
	}
	p.offset = st.Size()
	p.starts++
	fmt.Fprintf(p.log, "=== chaos: start #%d of %s at %s: %s %s\n", p.starts, p.name,
		time.Now().Format(time.RFC3339Nano), filepath.Base(p.bin), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.killed, p.paused = cmd, false, false
	done := make(chan struct{})
	p.done = done
	// The waiter is owned by the incarnation: it ends when the process does,
	// and every path that forgets a proc kills it first (see fleet.stop).
	go func() {
		p.exitErr = cmd.Wait()
		close(done)
	}()
	return nil
}

// exited reports whether the current incarnation has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pid is the current incarnation's process id.
func (p *proc) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.cmd == nil || p.exited() {
		return
	}
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.paused = false
}

// stop holds the process with SIGSTOP until resume.
func (p *proc) stop() {
	if p.cmd == nil || p.exited() || sigStop == nil {
		return
	}
	if p.cmd.Process.Signal(sigStop) == nil {
		p.paused = true
	}
}

// resume continues a process held by stop.
func (p *proc) resume() {
	if !p.paused {
		return
	}
	p.paused = false
	if p.cmd != nil && !p.exited() {
		_ = p.cmd.Process.Signal(sigCont)
	}
}

// terminate asks the process to stop with SIGTERM and kills it when it has
// not stopped within grace, which it reports.
func (p *proc) terminate(grace time.Duration) (forced bool) {
	if p.cmd == nil || p.exited() {
		return false
	}
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return true
	}
}

// waitReady polls p's readiness until it holds, the process exits, or the
// deadline passes.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	if p.ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := p.ready(ctx, p, p.offset)
		if ok {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v); log tail:\n%s", p.name, p.exitErr, p.tail(2000))
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("%s not ready after %s: %w", p.name, timeout, err)
		case <-t.C:
		}
	}
}

// output returns what the current incarnation has written to its log.
func (p *proc) output() ([]byte, error) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(p.offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// tail returns at most the last n bytes of p's log.
func (p *proc) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	if len(data) > n {
		data = data[len(data)-n:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}

// logLine is a readiness check: the incarnation has written a line that
// contains marker.
func logLine(marker string) func(context.Context, *proc, int64) (bool, error) {
	return func(_ context.Context, p *proc, _ int64) (bool, error) {
		out, err := p.output()
		if err != nil {
			return false, err
		}
		return bytes.Contains(out, []byte(marker)), nil
	}
}

// addressLine returns the text after prefix on the first line of the
// current incarnation's output that starts with it.
func (p *proc) addressLine(prefix string) (string, bool) {
	out, err := p.output()
	if err != nil {
		return "", false
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// errNotYet marks a readiness probe that has not succeeded yet.
var errNotYet = errors.New("not ready yet")
