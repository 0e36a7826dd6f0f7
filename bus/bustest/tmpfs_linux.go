package bustest

import (
	"os"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of the given size ("4m", "64m") on a fresh
// directory until the test ends, so a test can fill a store's file system
// and free it again. It skips the test where mounting is not permitted
// (not root, or no mount permission). Call it before starting anything
// that uses the directory: its cleanup then runs after theirs.
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs as the store's file system")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): needs root with mount permitted", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
