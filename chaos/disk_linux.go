package chaos

import (
	"fmt"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes on dir; it needs root.
func mountTmpfs(dir string, size int64) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount undoes mountTmpfs, lazily if the file system is still busy.
func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		if err2 := syscall.Unmount(dir, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return nil
}
