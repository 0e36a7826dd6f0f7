package envs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newTestEnv builds id with opts, resets it with a fixed seed and restores
// state (if any) over the drawn hidden values.
func newTestEnv(t testing.TB, id, opts, state string) Env {
	t.Helper()
	var raw json.RawMessage
	if opts != "" {
		raw = json.RawMessage(opts)
	}
	env, err := New(id, raw)
	if err != nil {
		t.Fatalf("New(%q, %s): %v", id, opts, err)
	}
	env.Reset(NewRNG(1))
	if state != "" {
		mustRestore(t, env, state)
	}
	return env
}

// decodeFixtureLine decodes strictly so that a field the test does not check cannot slip by.
func decodeFixtureLine(t *testing.T, line []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("fixture line %s: %v", line, err)
	}
}

func sameResult(a, b StepResult) bool {
	return a.Observation == b.Observation && a.Reward == b.Reward && a.Terminated == b.Terminated &&
		a.Truncated == b.Truncated && maps.Equal(a.Info, b.Info)
}

// fixtureReset is the reset line of a GEM transcript.
type fixtureReset struct {
	Observation string `json:"observation"`
	Info        Info   `json:"info"`
}

// replayFixtures replays every GEM transcript in testdata/dir, after checking
// that the files are exactly the keys of cases. For each file, start builds
// the env for its case and checks the reset info against the transcript's
// reset line, whose observation the env's instructions must then match; the
// remaining lines are steps, replayed in order and compared field by field.
func replayFixtures[C any](t *testing.T, dir string, cases map[string]C, start func(t *testing.T, fc C, reset fixtureReset) Env) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if want := slices.Sorted(maps.Keys(cases)); !slices.Equal(names, want) {
		t.Fatalf("fixture files %v, want %v", names, want)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", dir, name))
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, 1<<20)
			if !sc.Scan() {
				t.Fatal("empty fixture")
			}
			var reset struct {
				Reset fixtureReset `json:"reset"`
			}
			decodeFixtureLine(t, sc.Bytes(), &reset)
			env := start(t, cases[name], reset.Reset)
			if got := env.Instructions(); got != reset.Reset.Observation {
				t.Errorf("instructions:\n got %q\nwant %q", got, reset.Reset.Observation)
			}

			steps := 0
			for sc.Scan() {
				var want struct {
					Step        int     `json:"step"`
					Action      string  `json:"action"`
					Observation string  `json:"observation"`
					Reward      float64 `json:"reward"`
					Terminated  bool    `json:"terminated"`
					Truncated   bool    `json:"truncated"`
					Info        Info    `json:"info"`
				}
				decodeFixtureLine(t, sc.Bytes(), &want)
				got := env.Step(want.Action)
				if env.Turn() != want.Step {
					t.Errorf("step %d: Turn() = %d", want.Step, env.Turn())
				}
				wantResult := StepResult{Observation: want.Observation, Reward: want.Reward, Terminated: want.Terminated, Truncated: want.Truncated, Info: want.Info}
				if !sameResult(got, wantResult) {
					t.Errorf("step %d (%q):\n got %+v\nwant %+v", want.Step, want.Action, got, wantResult)
				}
				// Every game announces its win with this word, and only its win.
				if won := strings.HasPrefix(want.Observation, "Congratulations"); got.Won != won {
					t.Errorf("step %d (%q): Won = %v, want %v", want.Step, want.Action, got.Won, won)
				}
				steps++
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if steps == 0 {
				t.Error("fixture has no steps")
			}
		})
	}
}

// stepWithin steps env with action in the background and fails the test when
// Step takes longer than limit: a huge action must not make parsing blow up.
func stepWithin(t *testing.T, env Env, action string, limit time.Duration) StepResult {
	t.Helper()
	done := make(chan StepResult, 1)
	go func() { done <- env.Step(action) }()
	select {
	case r := <-done:
		return r
	case <-time.After(limit):
		t.Fatalf("Step on a %d-byte action (%.30q...) did not finish within %v", len(action), action, limit)
		return StepResult{}
	}
}

// restoreCopy restores a's snapshot into b and checks that b then looks the
// same as a from the outside.
func restoreCopy(t *testing.T, a, b Env) {
	t.Helper()
	snap := a.Snapshot()
	if err := b.Restore(snap); err != nil {
		t.Fatalf("Restore(%s): %v", snap, err)
	}
	if !bytes.Equal(b.Snapshot(), snap) || b.Instructions() != a.Instructions() ||
		b.Turn() != a.Turn() || b.MaxTurns() != a.MaxTurns() {
		t.Fatalf("restored env differs:\n%s\n%s", b.Snapshot(), snap)
	}
}

// stepBoth applies act to a and b, which must answer alike, and returns a's result.
func stepBoth(t *testing.T, a, b Env, act string) StepResult {
	t.Helper()
	ra, rb := a.Step(act), b.Step(act)
	if !sameResult(ra, rb) {
		t.Fatalf("%q: %+v vs %+v", act, ra, rb)
	}
	return ra
}

// resetBoth resets a and b with the same seed and checks that they start the
// same episode: Reset keeps a restored configuration.
func resetBoth(t *testing.T, a, b Env, seed uint64) {
	t.Helper()
	oa, _ := a.Reset(NewRNG(seed))
	ob, _ := b.Reset(NewRNG(seed))
	if oa != ob || !bytes.Equal(a.Snapshot(), b.Snapshot()) {
		t.Fatalf("reset after restore differs:\n%s\n%s", a.Snapshot(), b.Snapshot())
	}
}

// fuzzEnv builds one of ids, picked by which, and resets it with seed.
func fuzzEnv(t *testing.T, ids []string, which uint8, seed uint64) Env {
	t.Helper()
	env := mustNew(t, ids[int(which)%len(ids)])
	env.Reset(NewRNG(seed))
	return env
}

// checkFormatOrLimit checks the results every game shapes alike: truncation
// implies termination; formatError (the unparsable-action line) is a -0.1
// penalty that ends the episode, truncated only exactly at the turn limit;
// limit (the turn-limit line, "" for none) truncates with a reward in [0, 1].
// It reports whether r was one of those two lines.
func checkFormatOrLimit(t *testing.T, r StepResult, turn, maxTurns int, formatError, limit string) bool {
	t.Helper()
	if r.Truncated && !r.Terminated {
		t.Fatalf("truncated without terminated: %+v", r)
	}
	switch {
	case r.Observation == formatError:
		if r.Reward != -0.1 || !r.Terminated || r.Truncated != (turn == maxTurns) {
			t.Fatalf("format error result %+v", r)
		}
	case limit != "" && r.Observation == limit:
		if r.Reward < 0 || r.Reward > 1 || !r.Truncated || turn < maxTurns {
			t.Fatalf("turn limit result %+v at turn %d", r, turn)
		}
	default:
		return false
	}
	return true
}

// wantSnapshot checks env's snapshot text; when says at which point.
func wantSnapshot(t *testing.T, env Env, when, want string) {
	t.Helper()
	if got := string(env.Snapshot()); got != want {
		t.Errorf("snapshot %s = %s, want %s", when, got, want)
	}
}

// wantRandomFlag checks that the drawn variant id marks its snapshot random.
func wantRandomFlag(t *testing.T, id string) {
	t.Helper()
	if random := newTestEnv(t, id, "", ""); !strings.Contains(string(random.Snapshot()), `"random":true`) {
		t.Errorf("random variant snapshot %s lacks random:true", random.Snapshot())
	}
}

// badOption is a constructor override New must refuse; key is what the
// error has to name.
type badOption struct{ name, id, opts, key string }

// wantBadOptions checks, one subtest per case, that New refuses the override
// with ErrBadOption and an error naming both the key and the id.
func wantBadOptions(t *testing.T, tests []badOption) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := New(tt.id, json.RawMessage(tt.opts))
			if !errors.Is(err, ErrBadOption) {
				t.Fatalf("New(%s) = %v, %v; want ErrBadOption", tt.opts, env, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.key) || !strings.Contains(msg, tt.id) {
				t.Errorf("error %q should name %q and the id", msg, tt.key)
			}
		})
	}
}

// wantRestore restores state into env. With wantErr "" the restore must
// succeed, and wantRestore reports true; otherwise it must fail with an error
// naming wantErr and leave the state as it was.
func wantRestore(t *testing.T, env Env, state, wantErr string) bool {
	t.Helper()
	before := env.Snapshot()
	err := env.Restore(json.RawMessage(state))
	if wantErr == "" {
		if err != nil {
			t.Fatalf("Restore(%s): %v", state, err)
		}
		return true
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("Restore(%s) error = %v, want one naming %q", state, err, wantErr)
	}
	if after := env.Snapshot(); !bytes.Equal(after, before) {
		t.Errorf("failed restore changed the state:\n%s\n%s", before, after)
	}
	return false
}

// step is one action and the result GEM gives for it.
type step struct {
	action      string
	obs         string
	reward      float64
	term, trunc bool
}

// play applies each action and compares the whole StepResult; info gives the
// info the env must return after the step.
func play(t *testing.T, env Env, info func() Info, steps []step) {
	t.Helper()
	for i, s := range steps {
		got := env.Step(s.action)
		want := StepResult{Observation: s.obs, Reward: s.reward, Terminated: s.term, Truncated: s.trunc, Info: info()}
		if !sameResult(got, want) {
			t.Fatalf("step %d (%.60q):\n got %+v\nwant %+v", i+1, s.action, got, want)
		}
		if got.Done() != (s.term || s.trunc) {
			t.Fatalf("step %d: Done() = %v", i+1, got.Done())
		}
	}
}

// suffixInfo is the info of a game whose suffix never changes.
func suffixInfo(suffix string) func() Info {
	return func() Info { return Info{"suffix": suffix} }
}

// resetPair builds two envs for id and resets both with seed; they must
// start the same episode.
func resetPair(t *testing.T, id string, seed uint64) (a, b Env) {
	t.Helper()
	a, b = newTestEnv(t, id, "", ""), newTestEnv(t, id, "", "")
	obsA, infoA := a.Reset(NewRNG(seed))
	obsB, infoB := b.Reset(NewRNG(seed))
	if obsA != obsB || !maps.Equal(infoA, infoB) || !bytes.Equal(a.Snapshot(), b.Snapshot()) {
		t.Fatalf("seed %d: resets differ:\n%s\n%s", seed, a.Snapshot(), b.Snapshot())
	}
	return a, b
}

// stepBothUntilDone applies actions to a and b with stepBoth until a's
// episode ends.
func stepBothUntilDone(t *testing.T, a, b Env, actions []string) {
	t.Helper()
	for _, act := range actions {
		if stepBoth(t, a, b, act).Done() {
			return
		}
	}
}

// specWant is the registry row a test expects for an id.
type specWant struct {
	params   map[string]any
	maxTurns int
}

// wantSpecs checks the registry row of every id in want: id, family, turn
// limit, chat suffix and registered params.
func wantSpecs(t *testing.T, family, chatSuffix string, want map[string]specWant) {
	t.Helper()
	for id, w := range want {
		s, err := Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID != id || s.Family != family || s.MaxTurns != w.maxTurns || s.ChatSuffix != chatSuffix || !maps.Equal(s.Params, w.params) {
			t.Errorf("%s: spec %+v", id, s)
		}
	}
}

// mustNew builds id with its registered parameters.
// mustNew builds a registered env with its defaults; a task env gets a
// small question, as a request would give it.
func mustNew(t testing.TB, id string) Env {
	t.Helper()
	var opts json.RawMessage
	if spec, err := Lookup(id); err == nil && spec.Task {
		opts, _ = WithTask(nil, "What is 1 + 1?", "2")
	}
	env, err := New(id, opts)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// sameSeedEpisodes plays seeds 0..n-1, each on a resetPair that must agree
// step for step over actions(seed, a) until the episode ends, and returns the
// set of distinct reset states seen.
func sameSeedEpisodes(t *testing.T, id string, n uint64, actions func(seed uint64, a Env) []string) map[string]bool {
	t.Helper()
	distinct := map[string]bool{}
	for seed := range n {
		a, b := resetPair(t, id, seed)
		distinct[string(a.Snapshot())] = true
		stepBothUntilDone(t, a, b, actions(seed, a))
	}
	return distinct
}

// mustRestore restores state into env.
func mustRestore(t testing.TB, env Env, state string) {
	t.Helper()
	if err := env.Restore(json.RawMessage(state)); err != nil {
		t.Fatalf("Restore(%s): %v", state, err)
	}
}

// hugeLen is the size of the huge actions that show a parser is linear:
// 1 MiB, or 64 KiB with -short (the race detector makes a megabyte slow).
func hugeLen() int {
	if testing.Short() {
		return 64 << 10
	}
	return 1 << 20
}
