package chaos

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/chaos/lazyfs"
)

// prepareStores decides where each NATS server's data lives: in a
// directory beside its data directory, which a lazyfs mount then shows
// there, when power losses are asked for and FUSE is usable; in the data
// directory itself otherwise.
func (h *harness) prepareStores() error {
	h.storeDirs = slices.Clone(h.natsDirs)
	if h.cfg.count(KindPowerLoss) == 0 {
		return nil
	}
	if err := lazyfs.Available(); err != nil {
		h.skipKind(KindPowerLoss, "power losses skipped: %v", err)
		return nil
	}
	for i, dir := range h.natsDirs {
		h.storeDirs[i] = dir + "-store"
		if err := os.MkdirAll(h.storeDirs[i], 0o755); err != nil {
			return fmt.Errorf("chaos: store dir: %w", err)
		}
	}
	return nil
}

// mountLazyFS mounts a lazyfs of each store directory on its NATS data
// directory when power losses are to run. If a mount fails, the kind is
// dropped with a note and the servers use their store directories
// directly.
func (h *harness) mountLazyFS() {
	if h.cfg.count(KindPowerLoss) == 0 {
		return
	}
	for i, dir := range h.natsDirs {
		fs, err := lazyfs.Mount(h.storeDirs[i], dir, lazyfs.Options{})
		if err != nil {
			for _, m := range h.lazy {
				_ = m.Unmount()
			}
			h.lazy = nil
			h.natsDirs = slices.Clone(h.storeDirs)
			h.skipKind(KindPowerLoss, "power losses skipped: %v", err)
			return
		}
		h.lazy = append(h.lazy, fs)
	}
	h.progress("NATS data on lazyfs mounts, for power losses")
}

// powerVictims returns the NATS servers a power loss takes down: one node,
// or every node for the variant that takes the whole cluster.
func (h *harness) powerVictims(ev event) []*proc {
	if ev.variant == 1 {
		return h.natsNodes
	}
	return h.natsNodes[ev.victim : ev.victim+1]
}

// powerLoss cuts the power of its victims: it kills them with SIGKILL,
// drops every write to their data directories that no fsync reached, and
// starts them again after the down time.
func (h *harness) powerLoss(ev event) {
	victims := h.powerVictims(ev)
	var names []string
	for _, p := range victims {
		names = append(names, p.name)
	}
	f := Fault{At: time.Since(h.t0), Kind: KindPowerLoss, Name: strings.Join(names, "+"), Down: ev.down}
	if len(victims) == 1 {
		f.PID = victims[0].pid()
	}
	for _, p := range victims {
		h.freeBeforeRestart(p)
		p.kill()
	}
	// Only once every victim is dead: a live server could still fsync.
	for _, p := range victims {
		f.Dropped += h.lazy[slices.Index(h.natsNodes, p)].DropUnsynced()
	}
	f.Detail = fmt.Sprintf("%d bytes unsynced dropped", f.Dropped)
	var errs []error
	left := len(victims)
	for _, p := range victims {
		h.relaunch(p, ev.down, func(ready time.Duration, err error) {
			f.Ready = max(f.Ready, ready)
			if err != nil {
				errs = append(errs, err)
			}
			if left--; left > 0 {
				return
			}
			msg := fmt.Sprintf("power loss of %s, %d unsynced bytes dropped, down %s, ready %s later",
				f.Name, f.Dropped, f.Down.Round(time.Millisecond), f.Ready.Round(time.Millisecond))
			if err := errors.Join(errs...); err != nil {
				f.Err = err.Error()
				msg += ": " + f.Err
			}
			h.addFault(f)
			h.progress("%s", msg)
		})
	}
}

// storeStats sums the lazyfs counters of every NATS server's data
// directory.
func (h *harness) storeStats() lazyfs.Stats {
	var sum lazyfs.Stats
	for _, fs := range h.lazy {
		st := fs.Stats()
		sum.Fsyncs += st.Fsyncs
		sum.BytesSynced += st.BytesSynced
		sum.BytesDropped += st.BytesDropped
		sum.Drops += st.Drops
	}
	return sum
}
