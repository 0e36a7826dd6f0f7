// Package lazyfs is a FUSE filesystem that loses what was not fsynced, to
// test that a program's data survives a power loss. It is modelled on
// Jepsen's LazyFS.
//
// Mounted over a backing directory, a lazyfs passes every operation
// straight through to it except writes of file data, which it keeps in
// memory, per file, like a page cache that is never written back on its
// own. Reads see that data laid over the backing file, and a file's size is
// the larger of the backing file's and the end of its pending data. Only
// an fsync or fdatasync of the file, through any of its descriptors,
// writes its pending data back (and syncs it); so does a write through a
// descriptor opened with O_SYNC or O_DSYNC, which must be durable when it
// returns. Closing a file (its flush) persists nothing. DropUnsynced then
// does what a power loss does to data the kernel had not written: it
// forgets all of it, and each file is left with what its last fsync gave
// it. Unmount is the power going off for good: nothing reaches the backing
// directory after it, and what was pending is lost.
//
// What it models is lost file data, and only that:
//
//   - Directory entries and other metadata are not lazy. Create, mkdir,
//     rename, link, unlink, rmdir, chmod and truncate reach the backing
//     directory at once, as they do in LazyFS, so after a drop a file a
//     program created exists, with the content of its last fsync (empty if
//     there was none). A real filesystem may also lose a new name or a
//     rename that no directory fsync covered; lazyfs does not show that.
//   - A truncate applies to the backing file at once and cuts the pending
//     data at the new size; it persists none of that data. So truncating
//     a file whose written data is unsynced leaves, after a drop, a file
//     of the new size whose unsynced part reads as zeros.
//   - A drop loses all unsynced writes of a file, never some of them:
//     writes are not reordered, torn, or written back partly, as a real
//     disk may do.
//
// The pending data lives in the lazyfs process's memory until an fsync or
// a drop: a program that writes much and never syncs grows it without
// bound. Writes that touch are merged into one run, so a file written
// sequentially costs about its unsynced bytes. The pending data of a file
// that no name links any more is freed once the kernel forgets the file.
//
// Every open file uses direct I/O and the kernel caches no attributes or
// names, so every read, write and size goes through lazyfs and nothing
// stale is served after a drop. That costs speed, and a shared mmap of a
// file is refused. fallocate and copy_file_range on files are
// not supported (callers fall back to writes), and file locks are the
// kernel's own, as FUSE does by default.
//
// Mounting needs Linux, /dev/fuse, and root or a fusermount binary;
// Available says whether this machine has them.
package lazyfs
