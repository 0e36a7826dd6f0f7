package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Lines of a NATS server's log about JetStream's store.
const (
	jsDisabled    = "JetStream out of"                // "… resources, will be DISABLED"
	jsStoreFailed = "JetStream failed to store a msg" // a write error, such as no space left
)

// disk is the tmpfs under a NATS server's data directory, which disk faults
// fill and free. Only the fleet owner touches it.
type disk struct {
	dir     string
	filler  string
	node    int       // index of the NATS server
	filled  time.Time // zero while not full
	busy    bool      // from a fill until its fault is recorded
	logFrom int64     // the server's log size when the fill began
	fault   Fault     // the fault in progress, recorded when it is over
}

func (d *disk) full() bool { return !d.filled.IsZero() }

// prepareDisks mounts a tmpfs on the directory that holds every NATS
// server's data when disk faults are asked for. Where mounting is not
// permitted, the kind is dropped with a note saying why.
func (h *harness) prepareDisks() {
	if h.cfg.count(KindDisk) == 0 {
		return
	}
	for i, dir := range h.storeDirs {
		if err := mountTmpfs(dir, h.cfg.DiskSize); err != nil {
			for _, m := range h.mounted {
				_ = unmount(m)
			}
			h.mounted, h.disks = nil, nil
			h.skipKind(KindDisk, "disk faults skipped: %v", err)
			return
		}
		h.mounted = append(h.mounted, dir)
		h.disks = append(h.disks, &disk{dir: dir, filler: filepath.Join(dir, "chaos-filler"), node: i})
	}
	h.progress("NATS data on tmpfs of %s each, for disk faults", byteSize(h.cfg.DiskSize))
}

// skipKind drops a kind of fault the machine cannot inject, with a note
// saying why.
func (h *harness) skipKind(kind Kind, format string, args ...any) {
	h.note(format, args...)
	h.cfg.Kinds = slices.DeleteFunc(h.cfg.Kinds, func(k Kind) bool { return k == kind })
	h.rep.Kinds = h.cfg.Kinds
}

// fill writes a file on a NATS server's data disk until the file system is
// full and schedules freeing it after the event's hold time.
func (h *harness) fill(ev event) {
	d := h.disks[ev.victim]
	node := h.natsNodes[ev.victim]
	f := Fault{At: time.Since(h.t0), Kind: KindDisk, Name: node.name, PID: node.pid(), Down: ev.down}
	d.busy = true
	if st, err := os.Stat(node.logPath); err == nil {
		d.logFrom = st.Size()
	}
	n, err := fillFile(d.filler)
	d.filled = time.Now()
	f.Detail = byteSize(n) + " written"
	if err != nil {
		f.Err = err.Error()
	}
	d.fault = f
	h.progress("filled the data disk of %s (%s written), holding it for %s", node.name, byteSize(n), ev.down.Round(time.Millisecond))
	h.schedule(d.filled.Add(ev.down), func(context.Context) { h.free(ev.victim, true) })
}

// fillFile writes zeros to path until the file system is full and returns
// how much it wrote; running out of space is the expected end.
func fillFile(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// free deletes the filler of a NATS server's disk. With watch it then
// follows whether the server serves JetStream again by itself within
// RecoverWait, and restarts it if not; without (the server is about to be
// restarted anyway) the fault ends there.
func (h *harness) free(i int, watch bool) {
	d := h.disks[i]
	if !d.full() {
		return
	}
	f := d.fault
	f.Down = time.Since(d.filled)
	if err := os.Remove(d.filler); err != nil && f.Err == "" {
		f.Err = err.Error()
	}
	d.filled = time.Time{}
	if n := h.countLog(i, d.logFrom, jsStoreFailed); n > 0 {
		f.Detail += fmt.Sprintf("; %d failed stores logged while full", n)
	}
	done := func(f Fault) {
		d.busy = false
		h.addFault(f)
	}
	if !watch {
		f.Detail += "; freed early: the server is being restarted"
		done(f)
		return
	}
	freed := time.Now()
	p := h.natsNodes[i]
	// The server has recovered when every stream that failed to store
	// while the disk was full has stored a message again, with no failed
	// store logged meanwhile: its writers retry, so a stream that works
	// grows.
	var mark int64 // log offset from which failures count
	var base map[string]uint64
	var check func(ctx context.Context)
	check = func(ctx context.Context) {
		failed, size := h.storeFailures(i, d.logFrom)
		f.Disabled = f.Disabled || failed[jsDisabled]
		delete(failed, jsDisabled)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		now, err := h.streamSeqs(sctx, slices.Collect(maps.Keys(failed)))
		cancel()
		again, _ := h.storeFailures(i, max(mark, d.logFrom))
		switch {
		case mark == 0 || len(again) > 0 || err != nil:
			mark, base = size, now // start (again) from here
		case grewAll(base, now):
			f.Recovered = time.Since(freed)
			done(f)
			h.progress("freed the data disk of %s; its streams store again %s later", p.name, f.Recovered.Round(time.Millisecond))
			return
		}
		switch {
		case time.Since(freed) < h.cfg.RecoverWait || p.restarting: // a kill may have got there first
			h.schedule(time.Now().Add(time.Second), check)
		default:
			// Not storing by itself: restart it, as an operator would.
			f.Unrecovered = true
			f.Detail += fmt.Sprintf("; %s still failing %s after the disk was freed", strings.Join(slices.Sorted(maps.Keys(failed)), ", "), h.cfg.RecoverWait)
			h.progress("freed the data disk of %s, but %s still failed to store %s later: restarting it",
				p.name, strings.Join(slices.Sorted(maps.Keys(failed)), ", "), h.cfg.RecoverWait)
			p.kill()
			h.relaunch(p, 0, func(_ time.Duration, err error) {
				if err != nil {
					f.Err = "restart: " + err.Error()
				}
				done(f)
			})
		}
	}
	h.schedule(freed.Add(2*time.Second), check)
}

// grewAll reports whether every stream's sequence in now is past base.
func grewAll(base, now map[string]uint64) bool {
	for name, seq := range now {
		if seq <= base[name] {
			return false
		}
	}
	return true
}

// streamSeqs returns the last sequences of the named streams.
func (h *harness) streamSeqs(ctx context.Context, names []string) (map[string]uint64, error) {
	seqs := map[string]uint64{}
	for _, name := range names {
		st, err := h.js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		seqs[name] = st.CachedInfo().State.LastSeq
	}
	return seqs, nil
}

// storeFailurePattern finds the stream of a failed store in a NATS
// server's log line.
var storeFailurePattern = regexp.MustCompile(regexp.QuoteMeta(jsStoreFailed) + ` on stream '[^']* > ([^']*)'`)

// storeFailures returns the streams a NATS server's log names in failed
// stores from offset on (with jsDisabled among them if JetStream disabled
// itself), and the log's size.
func (h *harness) storeFailures(i int, offset int64) (map[string]bool, int64) {
	failed := map[string]bool{}
	fh, err := os.Open(h.natsNodes[i].logPath)
	if err != nil {
		return failed, offset
	}
	defer fh.Close()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return failed, offset
	}
	data, err := io.ReadAll(fh)
	if err != nil {
		return failed, offset
	}
	for _, m := range storeFailurePattern.FindAllSubmatch(data, -1) {
		failed[string(m[1])] = true
	}
	if bytes.Contains(data, []byte(jsDisabled)) {
		failed[jsDisabled] = true
	}
	return failed, offset + int64(len(data))
}

// countLog counts the lines of a NATS server's log from offset on that
// contain s.
func (h *harness) countLog(i int, offset int64, s string) int {
	fh, err := os.Open(h.natsNodes[i].logPath)
	if err != nil {
		return 0
	}
	defer fh.Close()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return 0
	}
	data, _ := io.ReadAll(fh)
	return bytes.Count(data, []byte(s))
}

// byteSize renders a size in MiB or GiB.
func byteSize(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
