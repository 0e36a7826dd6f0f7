//go:build linux

package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Available returns nil when this machine can mount a lazyfs: /dev/fuse
// opens, and the process is root (which mounts with mount(2)) or a
// fusermount3 or fusermount binary is installed. Otherwise its error says
// which is missing; tests skip with it.
func Available() error {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: no FUSE: %w", err)
	}
	_ = dev.Close()
	if os.Geteuid() == 0 {
		return nil
	}
	if _, err := fusermount(); err != nil {
		return fmt.Errorf("lazyfs: not root, and %w", err)
	}
	return nil
}

// fusermount finds the setuid helper through which a user who is not root
// mounts and unmounts FUSE.
func fusermount() (string, error) {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", errors.New("neither fusermount3 nor fusermount is installed")
}

// Mount mounts a lazyfs of the directory backing on the directory
// mountpoint and serves it until Unmount. See the package documentation for
// what it passes through and what it keeps in memory.
func Mount(backing, mountpoint string, opts Options) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	if mountpoint, err = filepath.Abs(mountpoint); err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	f := newFS()
	root := &fs.LoopbackRoot{Path: backing, Dev: st.Dev}
	rootNode := &node{LoopbackNode: &fs.LoopbackNode{RootData: root}, fs: f}
	root.RootNode = rootNode
	// Nothing cached in the kernel: every lookup and every size is asked
	// of lazyfs, so a drop shows at once.
	var noCache time.Duration
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		EntryTimeout:    &noCache,
		AttrTimeout:     &noCache,
		NegativeTimeout: &noCache,
		MountOptions: fuse.MountOptions{
			FsName: backing,
			Name:   "lazyfs",
			Debug:  opts.Debug,
			// Root mounts with mount(2); anyone else needs fusermount,
			// which is also the fallback if mount(2) is refused.
			DirectMount: os.Geteuid() == 0,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s on %s: %w", backing, mountpoint, err)
	}
	f.conn = conn{server: server, dir: mountpoint}
	return f, nil
}

// conn is the FUSE mount of an FS.
type conn struct {
	server *fuse.Server
	dir    string
}

// unmount unmounts and waits until the server stopped. Open files make the
// mount busy; then the mount is detached and its FUSE connection aborted
// (MNT_FORCE), so nothing those files do reaches lazyfs any more.
func (c conn) unmount() error {
	err := syscall.Unmount(c.dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(c.dir, syscall.MNT_FORCE|syscall.MNT_DETACH)
	}
	if errors.Is(err, syscall.EPERM) {
		return c.unmountUnprivileged()
	}
	if err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", c.dir, err)
	}
	c.server.Wait()
	return nil
}

// unmountUnprivileged unmounts with fusermount, which cannot abort the
// connection: when files are open it detaches the mount lazily and returns
// while the server goes on answering them (every write and fsync with EIO)
// until they are closed.
func (c conn) unmountUnprivileged() error {
	if c.server.Unmount() == nil {
		return nil
	}
	bin, err := fusermount()
	if err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", c.dir, err)
	}
	if out, err := exec.Command(bin, "-u", "-z", c.dir).CombinedOutput(); err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w: %s", c.dir, err, out)
	}
	return nil
}

// node is a file or directory of a lazyfs: a loopback node whose files'
// data writes are kept in memory until an fsync.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeTmpfiler    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeStatxer     = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)

// WrapChild makes every node the loopback creates a lazyfs node.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// key names the node's backing file in FS.files.
func (n *node) key() fileKey {
	a := n.StableAttr()
	return fileKey{ino: a.Ino, gen: a.Gen}
}

// Lookup finds a backing file, reporting the size readers see.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	child, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, errno
	}
	out.Attr.Size = child.Operations().(*node).size(out.Attr.Size)
	return child, 0
}

// Open opens the backing file, with direct I/O so that every read and
// write reaches lazyfs instead of the kernel's page cache.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.newHandle(fh, flags), fuse.FOPEN_DIRECT_IO, 0
}

// Create creates the backing file (a directory entry, so it is not lazy)
// and opens it as Open does.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	child, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return opened(child, fh, flags, errno)
}

// Tmpfile creates an unnamed backing file and opens it as Open does.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	child, fh, _, errno := n.LoopbackNode.Tmpfile(ctx, flags, mode, out)
	return opened(child, fh, flags, errno)
}

// opened wraps the loopback handle of a file just created.
func opened(child *fs.Inode, fh fs.FileHandle, flags uint32, errno syscall.Errno) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n := child.Operations().(*node)
	if flags&syscall.O_TRUNC != 0 {
		// The name existed after all (a create raced with another), and
		// O_TRUNC emptied the backing file; empty the pending data too.
		n.truncatePending(0)
	}
	return child, n.newHandle(fh, flags), fuse.FOPEN_DIRECT_IO, 0
}

// Getattr reports the backing file's attributes with the size readers
// see, pending data included.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, unwrap(f), out); errno != 0 {
		return errno
	}
	out.Size = n.size(out.Size)
	return 0
}

// Statx is Getattr for statx(2).
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, unwrap(f), flags, mask, out); errno != 0 {
		return errno
	}
	out.Size = n.size(out.Size)
	return 0
}

// Setattr passes attribute changes through to the backing file. A
// truncate is metadata: it applies to the backing file at once, and cuts
// the pending data at the new size.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	key := n.key()
	size, truncate := in.GetSize()
	var fl *file
	if truncate {
		// Held across both truncates, so no write lands between them.
		fl = n.fs.lockFile(key, false)
	}
	errno := n.LoopbackNode.Setattr(ctx, unwrap(f), in, out)
	if fl != nil {
		if errno == 0 {
			fl.pending = fl.pending.truncate(int64(size))
		}
		n.fs.unlockFile(key, fl)
	}
	if errno != 0 {
		return errno
	}
	out.Size = n.size(out.Size)
	return 0
}

// OnForget drops the pending data of a file nothing names any more once
// the kernel forgot it: nobody can open it again. A file that still has
// a name keeps its data; it can be looked up again.
func (n *node) OnForget() {
	key := n.key()
	fl := n.fs.lockFile(key, false)
	if fl == nil {
		return
	}
	if fl.w != nil { // nil only while a write is creating the state
		if st, err := fl.w.Stat(); err == nil && st.Sys().(*syscall.Stat_t).Nlink == 0 {
			fl.pending = nil
		}
	}
	n.fs.unlockFile(key, fl)
}

// size is the size of a file whose backing file has size backing: further
// if pending data goes further.
func (n *node) size(backing uint64) uint64 {
	key := n.key()
	fl := n.fs.lockFile(key, false)
	if fl == nil {
		return backing
	}
	defer n.fs.unlockFile(key, fl)
	return max(backing, uint64(fl.pending.size()))
}

// truncatePending cuts the node's pending data at size.
func (n *node) truncatePending(size int64) {
	key := n.key()
	if fl := n.fs.lockFile(key, false); fl != nil {
		fl.pending = fl.pending.truncate(size)
		n.fs.unlockFile(key, fl)
	}
}

// handle is an open file of a lazyfs. It deliberately does not implement
// fs.FilePassthroughFder: go-fuse would hand the backing file to the
// kernel, whose reads and writes would then bypass lazyfs.
type handle struct {
	lf     *fs.LoopbackFile // owns the backing descriptor
	fd     int              // lf's descriptor, open until Release
	sync   bool             // opened with O_SYNC or O_DSYNC
	append bool             // opened with O_APPEND
	node   *node
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (n *node) newHandle(fh fs.FileHandle, flags uint32) *handle {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	return &handle{
		lf:     lf,
		fd:     fd,
		sync:   flags&syscall.O_DSYNC != 0, // O_SYNC includes the O_DSYNC bit
		append: flags&syscall.O_APPEND != 0,
		node:   n,
	}
}

// unwrap returns the loopback handle under f, for the loopback's methods.
func unwrap(f fs.FileHandle) fs.FileHandle {
	if h, ok := f.(*handle); ok {
		return h.lf
	}
	return f
}

// Read reads the backing file with the pending data laid over it.
func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fsys, key := h.node.fs, h.node.key()
	fl := fsys.lockFile(key, false)
	if fl == nil {
		return h.lf.Read(ctx, buf, off)
	}
	defer fsys.unlockFile(key, fl)
	size, errno := h.end(fl)
	if errno != 0 {
		return nil, errno
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	buf = buf[:min(int64(len(buf)), size-off)]
	n, err := preadFull(h.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	clear(buf[n:]) // a hole up to pending data beyond the backing file's end
	fl.pending.overlay(buf, off)
	return fuse.ReadResultData(buf), 0
}

// preadFull reads len(buf) bytes at off, fewer only at the end of file.
func preadFull(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// Write keeps data in memory until an fsync, except on a descriptor opened
// with O_SYNC or O_DSYNC, whose writes must be durable when they return.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.sync {
		return h.writeThrough(ctx, data, off)
	}
	fsys, key := h.node.fs, h.node.key()
	fl := fsys.lockFile(key, true)
	defer fsys.unlockFile(key, fl)
	if fsys.unmounted.Load() {
		return 0, syscall.EIO
	}
	if h.append {
		var errno syscall.Errno
		if off, errno = h.end(fl); errno != 0 {
			return 0, errno
		}
	}
	if fl.w == nil {
		fd, err := unix.FcntlInt(uintptr(h.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0, fs.ToErrno(err)
		}
		fl.w = os.NewFile(uintptr(fd), "")
		inode := h.node.EmbeddedInode()
		fl.invalidate = func() { _ = inode.NotifyContent(0, 0) }
	}
	fl.pending = fl.pending.write(off, data)
	return uint32(len(data)), 0
}

// writeThrough writes data to the backing file, which was opened with the
// same O_SYNC or O_DSYNC flag, so the write is durable when it returns. It
// replaces whatever was pending in its range.
func (h *handle) writeThrough(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	fsys, key := h.node.fs, h.node.key()
	fl := fsys.lockFile(key, false)
	if fl != nil {
		defer fsys.unlockFile(key, fl)
	}
	if fsys.unmounted.Load() {
		return 0, syscall.EIO
	}
	if h.append {
		var errno syscall.Errno
		if off, errno = h.end(fl); errno != 0 {
			return 0, errno
		}
	}
	n, errno := h.lf.Write(ctx, data, off)
	if fl != nil {
		fl.pending = fl.pending.punch(off, off+int64(n))
	}
	fsys.bytesSynced.Add(int64(n))
	return n, errno
}

// end is the end of the file as lazyfs sees it, where reads stop and
// O_APPEND writes go: for those the offset the kernel sends is the size it
// last heard of, which a drop may have shrunk since. fl is the file's
// state, locked, or nil.
func (h *handle) end(fl *file) (int64, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	if fl == nil {
		return st.Size, 0
	}
	return max(st.Size, fl.pending.size()), 0
}

// Fsync writes the file's pending data back, whichever of the file's
// descriptors it came through, and syncs the backing file.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	fsys, key := h.node.fs, h.node.key()
	if fsys.unmounted.Load() {
		return syscall.EIO
	}
	fsys.fsyncs.Add(1)
	if fl := fsys.lockFile(key, false); fl != nil {
		written, err := fl.writeBack()
		fsys.unlockFile(key, fl)
		fsys.bytesSynced.Add(written)
		if err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) {
				errno = syscall.EIO
			}
			return errno
		}
	}
	// Syncing any descriptor syncs the file, a read-only one included.
	return h.lf.Fsync(ctx, flags)
}

// Flush is close(2) on one of the file's descriptors. It persists nothing:
// closing a file does not write it back.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

// Release closes the backing descriptor. Pending data outlives it, as the
// page cache outlives a close.
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
