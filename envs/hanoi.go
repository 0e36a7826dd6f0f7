package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	hanoiFamily = "TowerofHanoi"
	// hanoiMaxDisks bounds num_disks so that a bad option or snapshot cannot
	// make the env allocate and render an enormous board; GEM has no limit,
	// but 2^1000 - 1 moves is far beyond any turn limit.
	hanoiMaxDisks = 1000
)

// hanoiInstructions is GEM's instruction text; its one verb is num_disks.
const hanoiInstructions = `You are playing Tower of Hanoi with %d disks.
You have to move the disks from tower A to tower C.
To move a disk, type the source tower and the target tower (e.g., '\boxed{A C}').
Note that you can only move the top disk of a tower, and that a bigger disk cannot be placed on a smaller disk.
As you play, the history of your moves will be displayed.
`

// hanoiMove is GEM's action pattern, anchored: two tower letters in either
// case, optionally separated by whitespace and at most one comma.
var hanoiMove = regexp.MustCompile(`^\\boxed\{([ABCabc])` + pySpaceClass + `*,?` + pySpaceClass + `*([ABCabc])\}`)

// hanoiCandidates are the (num_disks, max_turns) pairs a drawn variant picks from.
var hanoiCandidates = [][2]int{{3, 10}, {4, 20}, {5, 35}}

// towerOfHanoiSpecs is the family's registry list.
func towerOfHanoiSpecs() []Spec {
	return []Spec{
		hanoiSpec("game:TowerofHanoi-v0-easy", map[string]any{"num_disks": 3, "max_turns": 10}, 10),
		hanoiSpec("game:TowerofHanoi-v0-hard", map[string]any{"num_disks": 5, "max_turns": 35}, 35),
		hanoiSpec("game:TowerofHanoi-v0-random", map[string]any{"num_disks": nil, "max_turns": nil}, 0),
	}
}

// hanoiSpec builds a registry row; params are the registered values overrides
// apply to. ChatSuffix is empty because GEM's suffix is the live board.
func hanoiSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, hanoiFamily, "", params, maxTurns, newTowerOfHanoi)
}

// hanoiBoard holds the towers, each listed bottom to top; disk 1 is the smallest.
type hanoiBoard struct {
	A []int `json:"A"`
	B []int `json:"B"`
	C []int `json:"C"`
}

// hanoiState is the whole game state; its JSON form is the snapshot.
type hanoiState struct {
	NumDisks  int        `json:"num_disks"`
	MaxTurns  int        `json:"max_turns"`
	Board     hanoiBoard `json:"board"`
	TurnCount int        `json:"turn_count"`
	// Random makes every Reset draw num_disks and max_turns.
	Random bool `json:"random"`
}

// towerOfHanoi is GEM's TowerofHanoiEnv.
type towerOfHanoi struct {
	s hanoiState
}

// newTowerOfHanoi applies the overrides to the registered parameters. As in
// GEM, a null num_disks or max_turns makes the env draw both at every reset,
// and unknown keys are ignored.
func newTowerOfHanoi(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p, err := overrideIntParams(registered, opts)
	if err != nil {
		return nil, err
	}
	numDisks, disksOK := p["num_disks"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	random := !disksOK || !turnsOK
	if random {
		// GEM's constructor resets at once; start on the first candidate so
		// that the state is valid before the first Reset draws.
		numDisks, maxTurns = hanoiCandidates[0][0], hanoiCandidates[0][1]
	} else {
		if err := hanoiCheckDisks(numDisks); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		if maxTurns < 1 {
			return nil, fmt.Errorf("%w: %w", ErrBadOption, errMaxTurns(maxTurns))
		}
	}
	g := &towerOfHanoi{s: hanoiState{NumDisks: numDisks, MaxTurns: maxTurns, Random: random}}
	g.s.Board = hanoiStart(numDisks)
	return g, nil
}

// hanoiCheckDisks validates num_disks: zero disks would make GEM divide by
// zero at the turn limit.
func hanoiCheckDisks(n int) error {
	if n < 1 || n > hanoiMaxDisks {
		return fmt.Errorf("num_disks: must be in [1, %d], got %d", hanoiMaxDisks, n)
	}
	return nil
}

// hanoiStart is the starting board: every disk on A, largest at the bottom.
func hanoiStart(n int) hanoiBoard {
	return hanoiBoard{A: hanoiStack(n), B: []int{}, C: []int{}}
}

// hanoiStack is [n, n-1, ..., 1], the only order a full tower can have.
func hanoiStack(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = n - i
	}
	return s
}

// Reset draws num_disks and max_turns (drawn variant only); nothing else is random.
func (g *towerOfHanoi) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	if s.Random {
		c := hanoiCandidates[rng.IntN(len(hanoiCandidates))]
		s.NumDisks, s.MaxTurns = c[0], c[1]
	}
	s.Board = hanoiStart(s.NumDisks)
	s.TurnCount = 0
	return g.Instructions(), g.Info()
}

// Step follows GEM's order of checks: format error, empty source, larger disk
// onto smaller, then the move (a win returns at once, even on the last turn),
// and finally the turn limit, which replaces the feedback line and reward.
func (g *towerOfHanoi) Step(action string) StepResult {
	s := &g.s
	s.TurnCount++
	t := s.TurnCount
	src, dst, ok := hanoiParse(action)
	if !ok {
		return formatErrorResult("You did not provide a valid action.", t, s.MaxTurns, g.Info())
	}
	from, to := s.Board.tower(src), s.Board.tower(dst)
	var obs string
	switch {
	case len(*from) == 0:
		obs = fmt.Sprintf("At turn %d, you tried to move from tower %c, which is empty.", t, src)
	case len(*to) > 0 && hanoiTop(*from) > hanoiTop(*to):
		obs = fmt.Sprintf("At turn %d, you tried to move from tower %c to tower %c, but the top disk on tower %c is larger than the top disk on tower %c.", t, src, dst, src, dst)
	default:
		// Pop, then push: with src == dst this puts the disk back, a legal no-op move.
		disk := hanoiTop(*from)
		*from = (*from)[:len(*from)-1]
		*to = append(*to, disk)
		if slices.Equal(s.Board.C, hanoiStack(s.NumDisks)) {
			return StepResult{
				Observation: "Congratulations! You solved the Tower of Hanoi Puzzle",
				Reward:      rewardSuccess,
				Terminated:  true,
				Won:         true,
				Info:        g.Info(),
			}
		}
		obs = fmt.Sprintf("At turn %d, you moved disk %d from tower %c to tower %c.", t, disk, src, dst)
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, float64(len(s.Board.C))/float64(s.NumDisks), g.Info()) // Python's int / int true division
	}
	return StepResult{Observation: obs, Reward: rewardStep, Info: g.Info()}
}

// hanoiTop is the top disk of a non-empty tower.
func hanoiTop(tower []int) int { return tower[len(tower)-1] }

// hanoiParse returns the source and destination of the last move in the
// action, upper-cased. A match holds no backslash after its first byte, so
// matches never overlap and GEM's last finditer match is the match at the
// rightmost "\boxed{" where one starts. Trying those from the right, each
// only up to the next candidate (a match cannot reach past its backslash),
// reads every byte of a long action about once.
func hanoiParse(action string) (src, dst byte, ok bool) {
	var loc []int
	for end := len(action); ; {
		p := strings.LastIndex(action[:end], `\boxed{`)
		if p < 0 {
			return 0, 0, false
		}
		if loc = hanoiMove.FindStringSubmatchIndex(action[p:end]); loc != nil {
			action = action[p:end]
			break
		}
		end = p
	}
	const upper = 'a' - 'A'
	src, dst = action[loc[2]], action[loc[4]]
	if src >= 'a' {
		src -= upper
	}
	if dst >= 'a' {
		dst -= upper
	}
	return src, dst, true
}

// tower returns the tower named by an upper-case letter A, B or C.
func (b *hanoiBoard) tower(name byte) *[]int {
	switch name {
	case 'A':
		return &b.A
	case 'B':
		return &b.B
	default:
		return &b.C
	}
}

// clone deep-copies the towers so that decoding into the copy cannot write
// into the live slices.
func (b hanoiBoard) clone() hanoiBoard {
	return hanoiBoard{A: slices.Clone(b.A), B: slices.Clone(b.B), C: slices.Clone(b.C)}
}

// render is GEM's board: one line per tower, each in Python list format.
func (b *hanoiBoard) render() string {
	var sb strings.Builder
	for _, name := range []byte("ABC") {
		sb.WriteByte(name)
		sb.WriteString(": [")
		for i, d := range *b.tower(name) {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(strconv.Itoa(d))
		}
		sb.WriteString("]\n")
	}
	return sb.String()
}

// info is GEM's task suffix: the current board and a call to action.
func (g *towerOfHanoi) Info() Info {
	return Info{"suffix": "Here is the current state of the tower of hanoi:\n" + g.s.Board.render() + "\nEnter your move."}
}

// Instructions renders GEM's instruction text for the current number of disks.
func (g *towerOfHanoi) Instructions() string {
	return fmt.Sprintf(hanoiInstructions, g.s.NumDisks)
}

// Snapshot returns the state as a JSON object with the keys of hanoiState.
func (g *towerOfHanoi) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, a bool and int slices
	return b
}

// Restore overrides the keys present in state (and, inside "board", the
// towers present), then validates the result as a whole; on any error the env
// keeps its previous state.
func (g *towerOfHanoi) Restore(state json.RawMessage) error {
	return restoreState(hanoiFamily, &g.s, state, nil)
}

// fromState lays state over the constructor's state. Towers that a given
// board leaves out are empty; without a board, the disks start on A as at
// reset. For a drawn size, num_disks is the number of disks on the board
// given (else it must be given) and max_turns is what the -random draw
// pairs with it.
func (g *towerOfHanoi) fromState(state json.RawMessage) (Info, error) {
	obj, err := decodeObject(state)
	if err != nil {
		return nil, restoreError(hanoiFamily, err)
	}
	drawn := g.s.Random
	base := g.s
	if has(obj, "board") {
		base.Board = hanoiBoard{A: []int{}, B: []int{}, C: []int{}}
	}
	next, err := base.overlay(obj)
	if err != nil {
		return nil, err
	}
	if err := next.derive(obj, drawn); err != nil {
		return nil, restoreError(hanoiFamily, err)
	}
	if err := next.validate(); err != nil {
		return nil, restoreError(hanoiFamily, err)
	}
	g.s = next
	return g.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its size at reset.
func (s *hanoiState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if drawn {
		if !has(obj, "num_disks") {
			if !has(obj, "board") {
				return errMissing("num_disks", "this env draws it at reset; give it or a board")
			}
			s.NumDisks = len(s.Board.A) + len(s.Board.B) + len(s.Board.C)
		}
		if !has(obj, "max_turns") {
			i := slices.IndexFunc(hanoiCandidates, func(c [2]int) bool { return c[0] == s.NumDisks })
			if i < 0 {
				return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with num_disks %d", s.NumDisks))
			}
			s.MaxTurns = hanoiCandidates[i][1]
		}
	}
	if !has(obj, "board") {
		if err := hanoiCheckDisks(s.NumDisks); err != nil {
			return err
		}
		s.Board = hanoiStart(s.NumDisks)
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s hanoiState) overlay(obj map[string]json.RawMessage) (hanoiState, error) {
	next := s
	next.Board = s.Board.clone()
	fields := map[string]any{
		"num_disks":  &next.NumDisks,
		"max_turns":  &next.MaxTurns,
		"turn_count": &next.TurnCount,
		"random":     &next.Random,
		"board":      next.Board.restore,
	}
	if err := restoreFields(hanoiFamily, obj, fields); err != nil {
		return hanoiState{}, err
	}
	return next, nil
}

// restore overrides the towers present in a JSON object; absent towers keep
// their disks. Errors name the key path, e.g. "board.A".
func (b *hanoiBoard) restore(raw json.RawMessage) error {
	if isNull(raw) {
		// decodeObject would read null as "no change", hiding the mistake.
		return errors.New("board: must not be null")
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return fmt.Errorf("board: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		if len(name) != 1 || !strings.Contains("ABC", name) {
			return fmt.Errorf("board.%s: unknown tower, want A, B or C", name)
		}
		if err := decodeStrict(obj[name], b.tower(name[0])); err != nil {
			return fmt.Errorf("board.%s: %w", name, err)
		}
	}
	return nil
}

// validate checks the invariants Step and Instructions rely on, naming the
// offending key: the towers hold disks 1..num_disks once each, and no disk
// sits on a smaller one (GEM's moves can never produce that).
func (s *hanoiState) validate() error {
	if err := hanoiCheckDisks(s.NumDisks); err != nil {
		return err
	}
	switch {
	case s.MaxTurns < 1:
		return errMaxTurns(s.MaxTurns)
	case s.TurnCount < 0:
		return errTurnCount(s.TurnCount)
	}
	seen := make([]bool, s.NumDisks+1)
	for _, name := range []byte("ABC") {
		tower := *s.Board.tower(name)
		for i, d := range tower {
			switch {
			case d < 1 || d > s.NumDisks:
				return fmt.Errorf("board.%c: disk %d is outside [1, %d] (num_disks)", name, d, s.NumDisks)
			case seen[d]:
				return fmt.Errorf("board.%c: disk %d appears twice", name, d)
			case i > 0 && d > tower[i-1]:
				return fmt.Errorf("board.%c: disk %d sits on the smaller disk %d", name, d, tower[i-1])
			}
			seen[d] = true
		}
	}
	if n := len(s.Board.A) + len(s.Board.B) + len(s.Board.C); n != s.NumDisks {
		return fmt.Errorf("board: holds %d disks, want num_disks %d", n, s.NumDisks)
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (g *towerOfHanoi) Turn() int { return g.s.TurnCount }

// MaxTurns is the current turn limit.
func (g *towerOfHanoi) MaxTurns() int { return g.s.MaxTurns }
