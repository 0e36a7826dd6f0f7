package fleet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rollfleet/rollfleet/messages"
)

// ErrNoPartialOutput means --resume found no partial output of the run
// beside the output path.
var ErrNoPartialOutput = errors.New("fleet: no partial output of this run")

// Output is an output file of a run, written beside its destination as
// .<name>.<run>.part and moved over the destination only when the run
// finishes. A run that never started removes it, so a typo never destroys
// an earlier file; a run that started but did not finish leaves it, and
// --resume appends to it. It is an io.Writer.
type Output struct {
	path  string // the destination, symlinks resolved
	f     *os.File
	dirty bool // written since the last Sync
}

// PartPath is where the output of run for path is written until the run
// finishes.
func PartPath(path, run string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+"."+messages.NameToken(run)+".part")
}

// CreateOutput starts the output of run for path: a new part file in
// path's directory (so that the final rename stays on one file system),
// with the mode of the file it will replace, if any. Failing here, before
// the run, is how a path that cannot be written is caught early. With
// resume it opens the run's existing part file instead, dropping a last
// line cut short by the interruption.
func CreateOutput(path, run string, resume bool) (*Output, error) {
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
	part := PartPath(dest, run)
	if resume {
		f, err := os.OpenFile(part, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (for %s)", ErrNoPartialOutput, part, path)
		}
		if err != nil {
			return nil, fmt.Errorf("fleet: output %s: %w", path, err)
		}
		o := &Output{path: dest, f: f}
		if err := o.dropTornLine(); err != nil {
			f.Close()
			return nil, err
		}
		return o, nil
	}
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, fmt.Errorf("fleet: output %s: %w", path, err)
	}
	if exists {
		// An existing file's mode, exactly (the umask applied at create).
		_ = f.Chmod(perm)
	}
	// The part file must outlast a power loss before the run acknowledges
	// anything written to it: its entry is durable once its directory is.
	err = f.Sync()
	if err == nil {
		err = syncDir(filepath.Dir(part))
	}
	if err != nil {
		f.Close()
		os.Remove(part)
		return nil, fmt.Errorf("fleet: output %s: %w", path, err)
	}
	return &Output{path: dest, f: f}, nil
}

// syncDir makes dir's entries durable: a file created, renamed or removed
// in it survives a power loss only once its directory is synced too.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropTornLine truncates the part file after its last complete line and
// positions writes at its end.
func (o *Output) dropTornLine() error {
	st, err := o.f.Stat()
	if err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	size := st.Size()
	buf := make([]byte, 64<<10)
	end := int64(0)
	for pos := size; pos > 0 && end == 0; {
		n := min(int64(len(buf)), pos)
		pos -= n
		if _, err := o.f.ReadAt(buf[:n], pos); err != nil {
			return fmt.Errorf("fleet: output %s: %w", o.path, err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = pos + int64(i) + 1
		}
	}
	if err := o.f.Truncate(end); err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	if _, err := o.f.Seek(end, io.SeekStart); err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	return nil
}

// Lines calls fn with every line written so far (without its newline).
func (o *Output) Lines(fn func(line []byte)) error {
	r := bufio.NewReaderSize(io.NewSectionReader(o.f, 0, 1<<62), 1<<20)
	for {
		line, err := r.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			long := append([]byte(nil), line...)
			line, err = r.ReadSlice('\n')
			line = append(long, line...)
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			fn(line[:len(line)-1])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fleet: output %s: %w", o.path, err)
		}
	}
}

// Write writes to the part file.
func (o *Output) Write(p []byte) (int, error) {
	o.dirty = true
	return o.f.Write(p)
}

// Sync makes what was written to the part file durable, if anything was
// written since the last Sync.
func (o *Output) Sync() error {
	if !o.dirty {
		return nil
	}
	if err := o.f.Sync(); err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	o.dirty = false
	return nil
}

// Path is the destination.
func (o *Output) Path() string { return o.path }

// Discard removes the part file: the destination stays as it was.
func (o *Output) Discard() error {
	o.f.Close()
	if err := os.Remove(o.f.Name()); err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	return nil
}

// Suspend closes the part file and leaves it for a resumed run.
func (o *Output) Suspend() error {
	err := o.f.Sync()
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fleet: output %s (what was written is in %s): %w", o.path, o.f.Name(), err)
	}
	return nil
}

// Finish moves the part file over the destination, after syncing it, and
// syncs the directory, so that the move outlasts a power loss.
func (o *Output) Finish() error {
	err := o.Suspend()
	if err == nil {
		err = os.Rename(o.f.Name(), o.path)
	}
	if err != nil {
		return fmt.Errorf("fleet: output %s (what was written is in %s): %w", o.path, o.f.Name(), err)
	}
	if err := syncDir(filepath.Dir(o.path)); err != nil {
		return fmt.Errorf("fleet: output %s: %w", o.path, err)
	}
	return nil
}
