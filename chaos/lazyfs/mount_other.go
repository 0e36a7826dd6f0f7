//go:build !linux

package lazyfs

import (
	"errors"
	"fmt"
)

var errNotLinux = fmt.Errorf("lazyfs: FUSE mounts need Linux: %w", errors.ErrUnsupported)

// Available returns why lazyfs cannot mount here: it needs Linux.
func Available() error { return errNotLinux }

// Mount fails: lazyfs needs Linux.
func Mount(backing, mountpoint string, opts Options) (*FS, error) { return nil, errNotLinux }

// conn is the FUSE mount of an FS, which never exists here.
type conn struct{}

func (conn) unmount() error { return nil }
