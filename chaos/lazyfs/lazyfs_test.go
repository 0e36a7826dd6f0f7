//go:build linux

package lazyfs

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mountTemp mounts a lazyfs of a fresh backing directory on a fresh
// mount point, unmounted when the test ends. It skips the test where FUSE
// cannot be mounted.
func mountTemp(t *testing.T) (f *FS, backing, mnt string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	backing, mnt = t.TempDir(), t.TempDir()
	f, err := Mount(backing, mnt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return f, backing, mnt
}

// files returns the content of every file in dir, by name.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// sizes returns what stat says of every file's size in dir, by name.
func sizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = st.Size()
	}
	return out
}

func checkFiles(t *testing.T, what, dir string, want map[string]string) {
	t.Helper()
	if got := files(t, dir); !maps.Equal(got, want) {
		t.Errorf("%s: files %q, want %q", what, got, want)
	}
	wantSizes := make(map[string]int64)
	for name, content := range want {
		wantSizes[name] = int64(len(content))
	}
	if got := sizes(t, dir); !maps.Equal(got, wantSizes) {
		t.Errorf("%s: sizes %v, want %v", what, got, wantSizes)
	}
}

// The steps the cases write with. Each fails the test on an error.

func create(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func open(t *testing.T, path string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, f *os.File, s string) {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, f *os.File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func fsync(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func closeFile(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeSynced creates the file path with content s and fsyncs it.
func writeSynced(t *testing.T, path, s string) {
	t.Helper()
	f := create(t, path)
	write(t, f, s)
	fsync(t, f)
	closeFile(t, f)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDropUnsynced writes through a lazyfs in various ways, checks what
// reads see before a drop (everything written) and what the backing
// directory holds (only what was synced), then drops and checks that the
// mount shows just the synced data.
func TestDropUnsynced(t *testing.T) {
	tests := []struct {
		name    string
		write   func(t *testing.T, dir string)
		before  map[string]string // read through the mount before the drop
		after   map[string]string // on the backing directory before, and on both after
		dropped int64
	}{
		{
			name:   "write and fsync survive",
			write:  func(t *testing.T, dir string) { writeSynced(t, filepath.Join(dir, "a"), "hello") },
			before: map[string]string{"a": "hello"},
			after:  map[string]string{"a": "hello"},
		},
		{
			name:    "write without fsync is lost, the file stays",
			write:   func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a"), "hello") },
			before:  map[string]string{"a": "hello"},
			after:   map[string]string{"a": ""},
			dropped: 5,
		},
		{
			name: "the synced prefix stays",
			write: func(t *testing.T, dir string) {
				f := create(t, filepath.Join(dir, "a"))
				write(t, f, "hello")
				fsync(t, f)
				write(t, f, " world")
				closeFile(t, f)
			},
			before:  map[string]string{"a": "hello world"},
			after:   map[string]string{"a": "hello"},
			dropped: 6,
		},
		{
			name: "overlapping pwrites and one past the end",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a"), "aaaaaaaaaa")
				f := open(t, filepath.Join(dir, "a"), os.O_WRONLY)
				writeAt(t, f, "bbbb", 2)
				writeAt(t, f, "cc", 4)
				writeAt(t, f, "zz", 12)
				closeFile(t, f)
			},
			before:  map[string]string{"a": "aabbccaaaa\x00\x00zz"},
			after:   map[string]string{"a": "aaaaaaaaaa"},
			dropped: 6,
		},
		{
			name: "O_APPEND writes",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a"), "ab")
				f := open(t, filepath.Join(dir, "a"), os.O_WRONLY|os.O_APPEND)
				write(t, f, "cd")
				write(t, f, "ef")
				closeFile(t, f)
			},
			before:  map[string]string{"a": "abcdef"},
			after:   map[string]string{"a": "ab"},
			dropped: 4,
		},
		{
			name: "seek and write",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a"), "hello")
				f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
				if _, err := f.Seek(3, io.SeekStart); err != nil {
					t.Fatal(err)
				}
				write(t, f, "X")
				closeFile(t, f)
			},
			before:  map[string]string{"a": "helXo"},
			after:   map[string]string{"a": "hello"},
			dropped: 1,
		},
		{
			name: "fsync through another, read-only descriptor after the writer closed",
			write: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "a"), "hello")
				f := open(t, filepath.Join(dir, "a"), os.O_RDONLY)
				fsync(t, f)
				closeFile(t, f)
			},
			before: map[string]string{"a": "hello"},
			after:  map[string]string{"a": "hello"},
		},
		{
			name: "O_SYNC writes are durable",
			write: func(t *testing.T, dir string) {
				f := open(t, filepath.Join(dir, "a"), os.O_WRONLY|os.O_CREATE|os.O_SYNC)
				write(t, f, "durable")
				closeFile(t, f)
			},
			before: map[string]string{"a": "durable"},
			after:  map[string]string{"a": "durable"},
		},
		{
			name: "rename of an fsynced file keeps its content",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a.tmp"), "data")
				if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
			},
			before: map[string]string{"a": "data"},
			after:  map[string]string{"a": "data"},
		},
		{
			name: "rename is not lazy, the unsynced data is",
			write: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "a.tmp"), "data")
				if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
			},
			before:  map[string]string{"a": "data"},
			after:   map[string]string{"a": ""},
			dropped: 4,
		},
		{
			name: "two files, one synced",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a"), "one")
				writeFile(t, filepath.Join(dir, "b"), "two")
			},
			before:  map[string]string{"a": "one", "b": "two"},
			after:   map[string]string{"a": "one", "b": ""},
			dropped: 3,
		},
		{
			name: "truncate cuts the pending data and persists the size",
			write: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "a"), "hello world")
				if err := os.Truncate(filepath.Join(dir, "a"), 5); err != nil {
					t.Fatal(err)
				}
			},
			before:  map[string]string{"a": "hello"},
			after:   map[string]string{"a": "\x00\x00\x00\x00\x00"},
			dropped: 5,
		},
		{
			name: "rewriting a synced file with O_TRUNC",
			write: func(t *testing.T, dir string) {
				writeSynced(t, filepath.Join(dir, "a"), "old content")
				writeFile(t, filepath.Join(dir, "a"), "new")
			},
			before:  map[string]string{"a": "new"},
			after:   map[string]string{"a": ""},
			dropped: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, backing, mnt := mountTemp(t)
			tc.write(t, mnt)
			checkFiles(t, "mount before the drop", mnt, tc.before)
			checkFiles(t, "backing directory before the drop", backing, tc.after)
			if got := f.Unsynced(); got != tc.dropped {
				t.Errorf("Unsynced() = %d before the drop, want %d", got, tc.dropped)
			}
			if got := f.DropUnsynced(); got != tc.dropped {
				t.Errorf("DropUnsynced() = %d, want %d", got, tc.dropped)
			}
			checkFiles(t, "mount after the drop", mnt, tc.after)
			checkFiles(t, "backing directory after the drop", backing, tc.after)
			if got := f.Unsynced(); got != 0 {
				t.Errorf("Unsynced() = %d after the drop, want 0", got)
			}
		})
	}
}

// TestStats checks the counters over fsyncs, an O_SYNC write and drops.
func TestStats(t *testing.T) {
	f, _, mnt := mountTemp(t)
	a := create(t, filepath.Join(mnt, "a"))
	write(t, a, "0123456789")
	fsync(t, a)
	fsync(t, a) // nothing pending: counted, writes nothing back
	write(t, a, "abcde")
	closeFile(t, a)
	b := open(t, filepath.Join(mnt, "b"), os.O_WRONLY|os.O_CREATE|syscall.O_DSYNC)
	write(t, b, "xyz")
	closeFile(t, b)
	f.DropUnsynced()
	f.DropUnsynced()
	want := Stats{Fsyncs: 2, BytesSynced: 13, BytesDropped: 5, Drops: 2}
	if got := f.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

// TestConcurrentWriters writes many files at once, half of them synced,
// in chunks that are not page aligned, and checks each file before and
// after a drop.
func TestConcurrentWriters(t *testing.T) {
	f, backing, mnt := mountTemp(t)
	const files, size, chunk = 8, 300_000, 4099
	content := func(i int) []byte {
		b := make([]byte, size)
		for k := range b {
			b[k] = byte(i*31 + k%251)
		}
		return b
	}
	name := func(i int) string { return fmt.Sprintf("f%d", i) }
	var wg sync.WaitGroup
	errs := make([]error, files)
	for i := range files {
		wg.Go(func() {
			errs[i] = func() error {
				w, err := os.Create(filepath.Join(mnt, name(i)))
				if err != nil {
					return err
				}
				defer w.Close()
				data := content(i)
				for off := 0; off < len(data); off += chunk {
					if _, err := w.Write(data[off:min(off+chunk, len(data))]); err != nil {
						return err
					}
				}
				if i%2 == 0 {
					return w.Sync()
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	for i := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name(i)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content(i)) {
			t.Errorf("%s before the drop: %d bytes, not what was written", name(i), len(got))
		}
	}
	if got, want := f.DropUnsynced(), int64(files/2*size); got != want {
		t.Errorf("DropUnsynced() = %d, want %d", got, want)
	}
	for _, dir := range []string{mnt, backing} {
		for i := range files {
			got, err := os.ReadFile(filepath.Join(dir, name(i)))
			if err != nil {
				t.Fatal(err)
			}
			want := content(i)
			if i%2 == 1 {
				want = nil
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s after the drop: %d bytes, want %d", filepath.Join(dir, name(i)), len(got), len(want))
			}
		}
	}
	if got := slices.Sorted(maps.Keys(sizes(t, mnt))); len(got) != files {
		t.Errorf("files after the drop: %v", got)
	}
}

// TestUnmountWithOpenFile unmounts while a file is open and being written:
// the unsynced data is lost, the descriptor fails from then on, and a new
// lazyfs over the same directory shows what was synced.
func TestUnmountWithOpenFile(t *testing.T) {
	f, backing, mnt := mountTemp(t)
	w := create(t, filepath.Join(mnt, "a"))
	defer w.Close()
	write(t, w, "synced")
	fsync(t, w)
	write(t, w, " lost")
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("after"); err == nil {
		t.Error("a write on a descriptor of the unmounted lazyfs succeeded")
	}
	checkFiles(t, "backing directory", backing, map[string]string{"a": "synced"})
	f2, err := Mount(backing, mnt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Unmount()
	checkFiles(t, "new mount", mnt, map[string]string{"a": "synced"})
}

// TestOpenFileAcrossDrop keeps a file open across a drop: reads through it
// must not be served from a kernel cache filled before the drop, and an
// O_APPEND write after the drop must land at the synced end, not at the
// end the file had before.
func TestOpenFileAcrossDrop(t *testing.T) {
	f, _, mnt := mountTemp(t)
	path := filepath.Join(mnt, "a")
	writeSynced(t, path, "ab")
	w := open(t, path, os.O_RDWR|os.O_APPEND)
	defer w.Close()
	write(t, w, "cdef")
	buf := make([]byte, 16)
	n, err := w.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "abcdef" {
		t.Fatalf("before the drop: read %q, want %q", got, "abcdef")
	}
	f.DropUnsynced()
	n, err = w.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "ab" {
		t.Errorf("after the drop: read %q through the open file, want %q", got, "ab")
	}
	write(t, w, "X")
	checkFiles(t, "mount after an append", mnt, map[string]string{"a": "abX"})
}

// TestRemovedFileFreesPending checks that the unsynced data of a file
// removed while unsynced is freed once the kernel forgets the file, and is
// not counted as dropped.
func TestRemovedFileFreesPending(t *testing.T) {
	f, _, mnt := mountTemp(t)
	writeFile(t, filepath.Join(mnt, "kept"), "kept")
	writeFile(t, filepath.Join(mnt, "removed"), "removed")
	if err := os.Remove(filepath.Join(mnt, "removed")); err != nil {
		t.Fatal(err)
	}
	// The kernel forgets the file on its own time.
	for deadline := time.Now().Add(10 * time.Second); f.Unsynced() != 4; {
		if time.Now().After(deadline) {
			t.Fatalf("Unsynced() = %d after the removal, want 4 (the file kept)", f.Unsynced())
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.DropUnsynced(); got != 4 {
		t.Errorf("DropUnsynced() = %d, want 4", got)
	}
}
