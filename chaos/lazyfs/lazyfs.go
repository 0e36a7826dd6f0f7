package lazyfs

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Options configures Mount. The zero value is ready to use.
type Options struct {
	// Debug logs every FUSE request and reply (go-fuse's debug output) to
	// the standard logger. Off by default: it is one line per request.
	Debug bool
}

// Stats counts what a mounted FS did to file data.
type Stats struct {
	// Fsyncs is how many fsync and fdatasync requests on files were
	// served (on directories they pass straight through and are not
	// counted).
	Fsyncs int64
	// BytesSynced is how many pending bytes reached the backing directory:
	// written back by an fsync, or written through a descriptor opened
	// with O_SYNC or O_DSYNC.
	BytesSynced int64
	// BytesDropped is how many pending bytes DropUnsynced forgot.
	BytesDropped int64
	// Drops is how many times DropUnsynced was called.
	Drops int64
}

// FS is a mounted lazyfs. Its methods are safe for concurrent use.
type FS struct {
	conn conn // the FUSE mount, per operating system

	// unmounted is set when Unmount begins. It and the counters are
	// atomic because requests use them under a file's lock, where mu may
	// not be taken.
	unmounted                                atomic.Bool
	fsyncs, bytesSynced, bytesDropped, drops atomic.Int64

	// mu guards files. It is taken before a file's own lock, never after.
	mu    sync.Mutex
	files map[fileKey]*file
}

// fileKey names a backing file for as long as it exists: its inode number
// and its generation (birth time), so a reused inode number is another key.
type fileKey struct{ ino, gen uint64 }

// file is the unsynced state of one backing file. It is in FS.files while
// it holds pending data or a request is about to add some.
type file struct {
	mu      sync.Mutex
	pending extents
	// w is a writable descriptor of the backing file, held while data is
	// pending, so that an fsync through a read-only descriptor, or after
	// every writer closed or the file was renamed, can still write it back.
	w *os.File
	// gone is set once the file left FS.files; a request that got it
	// before then must look it up again.
	gone bool
	// invalidate, when set, tells the kernel to forget what it cached of
	// the file (attributes, pages of a private mmap) once pending data was
	// dropped.
	invalidate func()
}

func newFS() *FS { return &FS{files: make(map[fileKey]*file)} }

// lockFile returns key's file, locked, creating it when create is set;
// nil when there is none and create is not set.
func (f *FS) lockFile(key fileKey, create bool) *file {
	for {
		f.mu.Lock()
		fl := f.files[key]
		if fl == nil && create {
			fl = &file{}
			f.files[key] = fl
		}
		f.mu.Unlock()
		if fl == nil {
			return nil
		}
		fl.mu.Lock()
		if !fl.gone {
			return fl
		}
		fl.mu.Unlock()
	}
}

// unlockFile unlocks fl and removes it from f.files if it holds nothing.
func (f *FS) unlockFile(key fileKey, fl *file) {
	empty := len(fl.pending) == 0
	fl.mu.Unlock()
	if !empty {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.pending) == 0 && !fl.gone && f.files[key] == fl {
		fl.forget()
		delete(f.files, key)
	}
}

// forget discards fl's pending data and returns how many bytes it held.
// fl.mu must be held.
func (fl *file) forget() int64 {
	n := fl.pending.bytes()
	fl.pending = nil
	if fl.w != nil {
		_ = fl.w.Close() // a close neither writes nor syncs anything
		fl.w = nil
	}
	fl.gone = true
	return n
}

// writeBack writes fl's pending data to the backing file; the caller then
// syncs it. fl.mu must be held. It returns how many bytes it wrote, also
// when it fails part way; what it did not write stays pending.
func (fl *file) writeBack() (written int64, err error) {
	for len(fl.pending) > 0 {
		e := fl.pending[0]
		n, err := fl.w.WriteAt(e.data, e.off)
		written += int64(n)
		if err != nil {
			fl.pending[0] = extent{off: e.off + int64(n), data: e.data[n:]}
			return written, fmt.Errorf("lazyfs: write back: %w", err)
		}
		fl.pending = fl.pending[1:]
	}
	return written, nil
}

// DropUnsynced forgets every write no fsync has reached, as a power loss
// forgets what the kernel had not written back, and returns how many bytes
// it forgot. Files keep the content and size their last fsync (or O_SYNC
// write, or truncate) gave them. The FS goes on serving.
func (f *FS) DropUnsynced() (bytes int64) {
	f.mu.Lock()
	var invalidate []func()
	for key, fl := range f.files {
		fl.mu.Lock()
		bytes += fl.forget()
		if fl.invalidate != nil {
			invalidate = append(invalidate, fl.invalidate)
		}
		fl.mu.Unlock()
		delete(f.files, key)
	}
	f.mu.Unlock()
	f.bytesDropped.Add(bytes)
	f.drops.Add(1)
	// Outside the locks: the kernel may send requests of its own while it
	// handles these.
	for _, inval := range invalidate {
		inval()
	}
	return bytes
}

// Unsynced returns how many written bytes no fsync has reached yet.
func (f *FS) Unsynced() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, fl := range f.files {
		fl.mu.Lock()
		n += fl.pending.bytes()
		fl.mu.Unlock()
	}
	return n
}

// Stats returns the counters so far.
func (f *FS) Stats() Stats {
	return Stats{
		Fsyncs:       f.fsyncs.Load(),
		BytesSynced:  f.bytesSynced.Load(),
		BytesDropped: f.bytesDropped.Load(),
		Drops:        f.drops.Load(),
	}
}

// Unmount cuts the power: from the moment it is called no write or fsync
// reaches the backing directory, and whatever is still pending is lost, as
// a power loss loses it (it is not counted in Stats). It then unmounts
// and stops serving. When files are still open it does not wait for them.
// As root, the mount is detached and its FUSE connection aborted, so the
// processes holding them get errors (ENOTCONN) from then on; without root,
// fusermount detaches it lazily and lazyfs answers their writes and fsyncs
// with EIO until they close them. Calling it again does nothing.
func (f *FS) Unmount() error {
	if f.unmounted.Swap(true) {
		return nil
	}
	f.mu.Lock()
	for key, fl := range f.files {
		fl.mu.Lock()
		fl.forget()
		fl.mu.Unlock()
		delete(f.files, key)
	}
	f.mu.Unlock()
	return f.conn.unmount()
}
