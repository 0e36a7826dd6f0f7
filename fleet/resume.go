package fleet

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
)

// bitset is a set of small non-negative integers.
type bitset []uint64

func (b *bitset) add(i int) {
	for len(*b) <= i/64 {
		*b = append(*b, 0)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

func (b bitset) has(i int) bool { return i >= 0 && i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0 }

// Ledger is what a run has written, episode by episode, kept beside its
// output as .<name>.<run>.done so that an interrupted run can be resumed:
// an episode is entered once its outcome was written to the outputs, and
// before it is acknowledged on the stream. Each commit syncs the outputs,
// then the ledger, and only then acknowledges: after a power loss the
// ledger never names an episode the outputs lost, and an outcome
// acknowledged (gone from its stream) is on disk. On resume the ledger and
// the outputs' part files say which episodes and groups were written;
// those are neither played nor written again. An open ledger holds the
// run's lock: one process at a time writes a run's files.
type Ledger struct {
	run      string
	resumed  bool
	finished bool // the run finished: its outputs are being moved
	f        *os.File
	unlock   func()
	w        *bufio.Writer
	episodes bitset
	groups   bitset
	// before counts the lines the interrupted run wrote to its
	// trajectories and failures outputs (Scan).
	before struct{ trajectories, failures int }
}

// ErrRunInUse means another process has the run's files open: the run
// itself, or another --resume of it.
var ErrRunInUse = errors.New("fleet: run in use by another process")

// LedgerPath is where run's ledger is kept for an output path.
func LedgerPath(out, run string) string {
	dir, base := filepath.Split(out)
	return filepath.Join(dir, "."+base+"."+messages.NameToken(run)+".done")
}

// LedgerFiles are a run's outputs, read by a resumed run's ledger; any may
// be nil.
type LedgerFiles struct {
	Trajectories, Failures, Groups *Output
	// GroupSize is the run's n samples per prompt.
	GroupSize int
	// TrajectoriesFromGroups: the trajectories output is written group by
	// group (a run with a filter), so a trajectory there means its group
	// was written.
	TrajectoriesFromGroups bool
}

// OpenLedger creates run's ledger beside out, or with resume reopens it
// and reads its entries, and takes the run's lock: it fails with
// ErrRunInUse while another process has the run open. It is opened before
// the outputs, so that a second process changes none of them; Scan then
// enters what the outputs of a resumed run hold.
func OpenLedger(out, run string, resume bool) (*Ledger, error) {
	path := LedgerPath(out, run)
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if resume {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if resume && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoPartialOutput, path)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: ledger: %w", err)
	}
	unlock, err := bus.TryLock(path)
	if err != nil {
		f.Close()
		if errors.Is(err, bus.ErrLocked) {
			return nil, fmt.Errorf("%w: %s is open in another rollout run (stop it, or wait for it to end)", ErrRunInUse, run)
		}
		return nil, fmt.Errorf("fleet: ledger: %w", err)
	}
	l := &Ledger{run: run, f: f, unlock: unlock, resumed: resume}
	if resume {
		err = l.load()
	} else {
		// The ledger must exist after a power loss once anything is
		// acknowledged.
		if err = f.Sync(); err == nil {
			err = syncDir(filepath.Dir(path))
		}
		if err != nil {
			err = fmt.Errorf("fleet: ledger: %w", err)
		}
	}
	if err != nil {
		l.release()
		return nil, err
	}
	l.w = bufio.NewWriterSize(f, 64<<10)
	return l, nil
}

// release closes the file and drops the run's lock.
func (l *Ledger) release() error {
	err := l.f.Close()
	l.unlock()
	return err
}

// load reads the ledger's entries ("e <n>" an episode, "g <n>" a group,
// "f <n>" the run finished with n episodes), ignoring a last line cut
// short.
func (l *Ledger) load() error {
	data, err := io.ReadAll(l.f)
	if err != nil {
		return fmt.Errorf("fleet: ledger: %w", err)
	}
	end := bytes.LastIndexByte(data, '\n') + 1
	for line := range bytes.SplitSeq(data[:end], []byte("\n")) {
		if len(line) < 3 || line[1] != ' ' {
			continue
		}
		n, err := strconv.Atoi(string(line[2:]))
		if err != nil || n < 0 {
			continue
		}
		switch line[0] {
		case 'e':
			l.episodes.add(n)
		case 'g':
			l.groups.add(n)
		case 'f':
			l.finished = true
		}
	}
	if err := l.f.Truncate(int64(end)); err != nil {
		return fmt.Errorf("fleet: ledger: %w", err)
	}
	_, err = l.f.Seek(int64(end), io.SeekStart)
	return err
}

// Scan enters what a resumed run's part files hold: a line written just
// before an interruption may not have reached the ledger.
func (l *Ledger) Scan(files LedgerFiles) error {
	n := max(files.GroupSize, 1)
	episodes := func(fromGroups bool, lines *int) func([]byte) {
		return func(line []byte) {
			*lines++
			if i, ok := jobs.EpisodeIndex(l.run, firstString(line, "episode_id")); ok {
				l.episodes.add(i)
				if fromGroups {
					l.groups.add(i / n)
				}
			}
		}
	}
	if o := files.Trajectories; o != nil {
		if err := o.Lines(episodes(files.TrajectoriesFromGroups, &l.before.trajectories)); err != nil {
			return err
		}
	}
	if o := files.Failures; o != nil {
		if err := o.Lines(episodes(false, &l.before.failures)); err != nil {
			return err
		}
	} else if files.Trajectories != nil && !files.TrajectoriesFromGroups {
		// Every episode written is a trajectory or a failure.
		l.before.failures = l.Episodes() - l.before.trajectories
	}
	if o := files.Groups; o != nil {
		return o.Lines(func(line []byte) {
			if g, ok := jobs.GroupIndex(l.run, firstString(line, "group_id")); ok {
				l.groups.add(g)
			}
		})
	}
	return nil
}

// firstString returns the string value of the first key in a JSON line,
// which in rollfleet's output comes before any nested record. Ids of
// rollout run's episodes need no escaping, so the raw bytes are the id.
func firstString(line []byte, key string) string {
	pat := []byte(`"` + key + `":"`)
	i := bytes.Index(line, pat)
	if i < 0 {
		return ""
	}
	rest := line[i+len(pat):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// Before returns how many trajectories and failure records the interrupted
// run wrote, as Scan found them (0 before Scan, or for a new run).
func (l *Ledger) Before() (trajectories, failures int) {
	return l.before.trajectories, l.before.failures
}

// Resumed reports whether the ledger continues an interrupted run.
func (l *Ledger) Resumed() bool { return l.resumed }

// Episode reports whether episode number i was written.
func (l *Ledger) Episode(i int) bool { return l.episodes.has(i) }

// Written returns a copy of which episodes were written so far, for a
// reader that runs beside the writer (the submission skipping them).
func (l *Ledger) Written() func(i int) bool {
	written := slices.Clone(l.episodes)
	return written.has
}

// Group reports whether group number g was written.
func (l *Ledger) Group(g int) bool { return l.groups.has(g) }

// Episodes counts the written episodes.
func (l *Ledger) Episodes() int {
	n := 0
	for _, w := range l.episodes {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}

// addEpisode enters episode i; flush makes it durable, after the outputs
// and before the records are acknowledged.
func (l *Ledger) addEpisode(i int) { l.episodes.add(i); l.write('e', i) }

// addGroup enters group g, as addEpisode.
func (l *Ledger) addGroup(g int) { l.groups.add(g); l.write('g', g) }

// write buffers an entry. The buffer holds more than a commit's entries,
// so none reaches the file before the outputs it vouches for.
func (l *Ledger) write(kind byte, n int) {
	l.w.WriteByte(kind)
	l.w.WriteByte(' ')
	l.w.WriteString(strconv.Itoa(n))
	l.w.WriteByte('\n')
}

// flush makes the entries written since the last flush durable.
func (l *Ledger) flush() error {
	if l.w.Buffered() == 0 {
		return nil
	}
	err := l.w.Flush()
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("fleet: ledger: %w", err)
	}
	return nil
}

// MarkFinished enters, durably, that the run finished: its outputs are
// about to replace their destinations. A power loss before the ledger is
// removed leaves a run that --resume knows to have finished (Finished).
func (l *Ledger) MarkFinished() error {
	l.write('f', l.Episodes())
	l.finished = true
	return l.flush()
}

// Finished reports whether the run was marked finished (MarkFinished):
// a resumed ledger's run ended, but whether each output was moved over
// its destination is for the part files to say.
func (l *Ledger) Finished() bool { return l.finished }

// Close closes the ledger and drops the run's lock; with remove (the run
// finished, or a new run never started) it is deleted first, durably.
func (l *Ledger) Close(remove bool) error {
	err := l.w.Flush()
	if remove {
		if rerr := removeSynced(l.f.Name()); err == nil {
			err = rerr
		}
	}
	if cerr := l.release(); err == nil {
		err = cerr
	}
	return err
}

// Manifest is what defines a run's episodes, kept beside its output as
// .<name>.<run>.run.json while the run is unfinished, so that --resume
// makes the same episodes.
type Manifest struct {
	RunID             string `json:"run_id"`
	Env               string `json:"env,omitempty"`
	Episodes          int    `json:"episodes,omitempty"`
	Dataset           string `json:"dataset,omitempty"`
	DatasetSHA256     string `json:"dataset_sha256,omitempty"`
	ObsStyle          string `json:"obs_style,omitempty"`
	ApplyChatTemplate bool   `json:"apply_chat_template,omitempty"`
	ChatTemplate      string `json:"chat_template,omitempty"`
	// Tokenizer is the built-in stand-in's tokenizer directory (rollout run --tokenizer), so
	// that a resumed run speaks the same vocabulary.
	Tokenizer string `json:"tokenizer,omitempty"`
	// ChatTemplateKwargs is a JSON object, or empty.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
	NSamples           int             `json:"n_samples"`
	MaxLength          int             `json:"max_length"`
	MaxTokens          int             `json:"max_tokens"`
	Temperature        float64         `json:"temperature"`
	TopP               float64         `json:"top_p"`
	Seed               uint64          `json:"seed"`
	Filter             []float64       `json:"filter,omitempty"`
	PromptOverflow     string          `json:"prompt_overflow,omitempty"`
	FailuresOut        string          `json:"failures_out,omitempty"`
	GroupsOut          string          `json:"groups_out,omitempty"`
	Format             string          `json:"format,omitempty"`
	MathJudge          string          `json:"math_judge,omitempty"`
	MathStrict         bool            `json:"math_strict,omitempty"`
	// How the run reached its workers, which --resume takes unless told
	// otherwise: an external NATS (its URLs without credentials), whether
	// a fleet did the work, and the embedded server's data dir.
	NATS       string `json:"nats,omitempty"`
	SubmitOnly bool   `json:"submit_only,omitempty"`
	DataDir    string `json:"data_dir,omitempty"`
}

// ManifestPath is where run's manifest is kept for an output path.
func ManifestPath(out, run string) string {
	dir, base := filepath.Split(out)
	return filepath.Join(dir, "."+base+"."+messages.NameToken(run)+".run.json")
}

// SaveManifest writes m beside out, atomically and durably: a power loss
// leaves the manifest whole or absent (a temporary file is written,
// synced and renamed over it, and the directory synced).
func SaveManifest(out string, m Manifest) error {
	if m.Dataset != "" {
		sum, err := fileSHA256(m.Dataset)
		if err != nil {
			return err
		}
		m.DatasetSHA256 = sum
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSynced(ManifestPath(out, m.RunID), append(data, '\n')); err != nil {
		return fmt.Errorf("fleet: run manifest: %w", err)
	}
	return nil
}

// writeSynced replaces path with data atomically and durably.
func writeSynced(path string, data []byte) error {
	// One writer at a time holds the run's lock, so a fixed temporary
	// name serves, and a crash's leftover is overwritten next time.
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeSynced removes path and syncs its directory, so that the removal
// outlasts a power loss.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// LoadManifest reads run's manifest beside out and checks that its dataset
// is unchanged.
func LoadManifest(out, run string) (Manifest, error) {
	var m Manifest
	data, err := os.ReadFile(ManifestPath(out, run))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("%w: run %s has no manifest beside %s (resume with the --out of the interrupted run)", ErrNoPartialOutput, run, out)
	}
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		return m, fmt.Errorf("fleet: run manifest: %w", err)
	}
	if m.Dataset != "" {
		sum, err := fileSHA256(m.Dataset)
		if err != nil {
			return m, err
		}
		if sum != m.DatasetSHA256 {
			return m, fmt.Errorf("fleet: dataset %s changed since run %s started", m.Dataset, run)
		}
	}
	return m, nil
}

// RemoveManifest deletes run's manifest, durably, once the run finished
// (before its ledger, which says that the run finished).
func RemoveManifest(out, run string) error { return removeSynced(ManifestPath(out, run)) }

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("fleet: dataset: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("fleet: dataset: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
