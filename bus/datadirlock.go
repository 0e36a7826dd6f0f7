package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrDataDirInUse means another embedded server, in this process or
// another, holds the data dir's lock: two servers on one JetStream store
// would corrupt it. The error names the holder as its lock file records it.
var ErrDataDirInUse = errors.New("bus: data dir in use")

// LockFileName is the file in a data dir whose lock a server holds while it
// uses the dir. It records the holder (DataDirHolder as JSON); the lock, not
// the file, decides, so a file left by a process that died blocks nothing.
const LockFileName = "rollfleet.lock"

// DataDirHolder describes the process holding a data dir, as recorded in
// its lock file.
type DataDirHolder struct {
	PID int `json:"pid"`
	// Command is the program's name and its subcommand (never its flags,
	// which may hold secrets).
	Command string `json:"command"`
	Host    string `json:"host,omitempty"`
	// Since is when the holder took the lock.
	Since time.Time `json:"since"`
}

func (h DataDirHolder) String() string {
	s := fmt.Sprintf("pid %d (%s", h.PID, h.Command)
	if h.Host != "" {
		s += " on " + h.Host
	}
	if !h.Since.IsZero() {
		s += ", since " + h.Since.Format(time.RFC3339)
	}
	return s + ")"
}

// thisProcess describes the current process as a lock holder.
func thisProcess() DataDirHolder {
	cmd := "unknown"
	if len(os.Args) > 0 {
		cmd = filepath.Base(os.Args[0])
		if len(os.Args) > 1 && os.Args[1] != "" && !strings.HasPrefix(os.Args[1], "-") {
			cmd += " " + os.Args[1]
		}
	}
	host, _ := os.Hostname()
	return DataDirHolder{PID: os.Getpid(), Command: cmd, Host: host, Since: time.Now().UTC().Truncate(time.Second)}
}

// dataDirLock is a held lock on a data dir.
type dataDirLock struct {
	once    sync.Once
	release func()
}

func (l *dataDirLock) unlock() { l.once.Do(l.release) }

// lockDataDir takes dir's lock without waiting and records this process as
// its holder. If another holds it, the error wraps ErrDataDirInUse and names
// the holder. A holder that cannot be recorded (a full disk, say) is only
// logged: the lock is what keeps a second server out.
func lockDataDir(dir string, log *slog.Logger) (*dataDirLock, error) {
	path := filepath.Join(dir, LockFileName)
	release, err := TryLock(path)
	if errors.Is(err, ErrLocked) {
		return nil, fmt.Errorf("%w: %s is held by %s; stop that process or use another data dir",
			ErrDataDirInUse, dir, describeHolder(path))
	}
	if err != nil {
		return nil, fmt.Errorf("bus: lock data dir %s: %w", dir, err)
	}
	if err := recordHolder(path, thisProcess()); err != nil && log != nil {
		log.Warn("data dir locked, but its holder not recorded", "file", path, "err", err)
	}
	return &dataDirLock{release: release}, nil
}

// ErrLocked is TryLock's answer for a lock another process holds.
var ErrLocked = errors.New("bus: locked by another process")

// recordHolder writes h into the lock file in place: the lock belongs to the
// file's inode, so the file is never replaced.
func recordHolder(path string, h DataDirHolder) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	// Opened for writing only while writing: a file held open for writing
	// keeps its file system from being remounted read-only.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// describeHolder reads who holds a lock file, as well as it can.
func describeHolder(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("another process (%s unreadable: %v)", path, err)
	}
	var h DataDirHolder
	if err := json.Unmarshal(data, &h); err != nil || h.PID == 0 {
		// The holder may be writing it this very moment.
		return fmt.Sprintf("another process (%s records no holder yet)", path)
	}
	if h.PID == os.Getpid() {
		return h.String() + ", this process"
	}
	return h.String()
}

// Locks of the running embedded servers, released by Shutdown (or when a
// server shut down otherwise is seen to be done).
var (
	locksMu sync.Mutex
	locks   = map[*server.Server]*dataDirLock{}
)

// holdLock keeps l until s has shut down.
func holdLock(s *server.Server, l *dataDirLock) {
	locksMu.Lock()
	locks[s] = l
	locksMu.Unlock()
	go func() {
		s.WaitForShutdown()
		releaseLock(s)
	}()
}

// releaseLock releases the lock s holds, if any.
func releaseLock(s *server.Server) {
	locksMu.Lock()
	l := locks[s]
	delete(locks, s)
	locksMu.Unlock()
	if l != nil {
		l.unlock()
	}
}
