//go:build !linux

package chaos

import (
	"errors"
	"fmt"
)

// mountTmpfs is not available: disk faults need Linux.
func mountTmpfs(dir string, _ int64) error {
	return fmt.Errorf("mount a tmpfs on %s: %w (disk faults need Linux)", dir, errors.ErrUnsupported)
}

func unmount(string) error { return nil }
