package fleet

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// Output is an output file written beside its destination and moved over it
// only when the run is kept, so a run that never started (a bad flag, an
// unknown env, no model server, a data dir in use) leaves an earlier file
// at the destination untouched. It is an io.Writer; Close ends it.
type Output struct {
	path string // the destination, symlinks resolved
	f    *os.File
}

// CreateOutput starts an output for path: a new hidden file in path's
// directory (so that the final rename stays on one file system), with the
// mode of the file it will replace, if any. Failing here, before the run,
// is how a path that cannot be written is caught early.
func CreateOutput(path string) (*Output, error) {
	dest := path
	perm, exists := fs.FileMode(0o666), false // before the umask, as os.Create
	if st, err := os.Stat(path); err == nil {
		exists = true
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("fleet: output %s: not a regular file", path)
		}
		perm = st.Mode().Perm()
		if dest, err = filepath.EvalSymlinks(path); err != nil {
			return nil, fmt.Errorf("fleet: output %s: %w", path, err)
		}
	}
	dir, base := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	for range 100 {
		tmp := filepath.Join(dir, "."+base+"."+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64()%1e9, 10)+".tmp")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fleet: output %s: %w", path, err)
		}
		if exists {
			// An existing file's mode, exactly (the umask applied at create).
			_ = f.Chmod(perm)
		}
		return &Output{path: dest, f: f}, nil
	}
	return nil, fmt.Errorf("fleet: output %s: no free temporary name in %s", path, dir)
}

// Write writes to the temporary file.
func (o *Output) Write(p []byte) (int, error) { return o.f.Write(p) }

// Path is the destination.
func (o *Output) Path() string { return o.path }

// Close ends the output. With keep it moves the file written over the
// destination (after syncing it); without, it removes it and the
// destination stays as it was.
func (o *Output) Close(keep bool) error {
	tmp := o.f.Name()
	if !keep {
		o.f.Close()
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("fleet: output %s: %w", o.path, err)
		}
		return nil
	}
	err := o.f.Sync()
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, o.path)
	}
	if err != nil {
		return fmt.Errorf("fleet: output %s (what was written is in %s): %w", o.path, tmp, err)
	}
	return nil
}
