//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package bus

import (
	"errors"
	"os"
	"syscall"
)

// TryLock takes an exclusive flock on path, creating the file, without
// waiting; ErrLocked means another open file holds it. It locks data dirs
// and the files of an unfinished rollout run. The kernel drops the
// lock when the holder exits, however it exits, so a stale file blocks
// nothing. The file is open read-only: flock needs no more, and a file held
// open for writing would keep the store's file system from being remounted
// read-only.
func TryLock(path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
