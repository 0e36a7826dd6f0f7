package envs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

const (
	sokobanFamily = "Sokoban"

	// sokobanMinDim and sokobanMaxDim bound each side of the room. Five is
	// the smallest side the fallback room fits in; the cap keeps the board,
	// which every prompt shows, small. The registered rooms are 6x6 and 8x8.
	sokobanMinDim = 5
	sokobanMaxDim = 16

	// sokobanTries is how many rooms Reset tries to generate before it
	// falls back to a fixed layout, so that a reset always ends;
	// sokobanMoveBudget caps the reverse moves of all tries together, so
	// that long walks (large max_turns) cost no more time than short ones.
	sokobanTries      = 100
	sokobanMoveBudget = 100_000
	// sokobanWalks is the number of reverse-play walks tried on each room.
	sokobanWalks = 16
	// sokobanMaxWalk caps a walk's length at GEM's search depth.
	sokobanMaxWalk = 300
)

// GEM's codes for the cells of the fixed layer (room_fixed in the snapshot).
const (
	sokobanWall   = 0
	sokobanFloor  = 1
	sokobanTarget = 2
)

// sokobanInstructions is GEM's instruction text, with no final newline and
// GEM's lower-case "you have"; its verbs are max_turns, the example
// direction, and the same direction again.
const sokobanInstructions = `You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.
When you are right next to a box, you can push it by moving in the same direction.
You cannot push a box through a wall or another box, and you cannot pull a box.
you have to complete the puzzle within %d turns.
On the board, objects are represented as:
- The player (you) appears as 'P'
- Walls are represented with '#'
- Boxes are marked as 'X'
- Empty goals are shown with 'O'
- Boxes on goals are visualized with '√'
- Empty floor is shown as '_'

To submit your move, type the command in \boxed{}.
For example: \boxed{%s} to move %s.
Use logic and deduction to push all boxes onto the target positions!`

// sokobanDirections are the moves in GEM's order; sokobanSteps gives each
// one's (row, col) change.
var (
	sokobanDirections = [4]string{"up", "down", "left", "right"}
	sokobanSteps      = [4]sokobanPos{{-1, 0}, {1, 0}, {0, -1}, {0, 1}}
)

// sokobanConfig is one parameter set: the room's size, its boxes and the turn limit.
type sokobanConfig struct{ rows, cols, numBoxes, maxTurns int }

// sokobanRandomConfigs are what the -random variant draws from at every
// reset. Note the 5 boxes, against 4 in -hard: GEM's values.
var sokobanRandomConfigs = [...]sokobanConfig{{6, 6, 2, 20}, {8, 8, 5, 50}}

// sokobanSpecs is the Sokoban family's list of registered ids. GEM's
// -random registration passes a misspelled room_size, which its constructor
// ignores, so the registered dim_room is the default (6, 6); the draw at
// reset replaces it.
func sokobanSpecs() []Spec {
	return []Spec{
		sokobanSpec("game:Sokoban-v0-easy", map[string]any{"dim_room": [2]int{6, 6}, "num_boxes": 2, "max_turns": 20}, 20),
		sokobanSpec("game:Sokoban-v0-hard", map[string]any{"dim_room": [2]int{8, 8}, "num_boxes": 4, "max_turns": 50}, 50),
		sokobanSpec("game:Sokoban-v0-random", map[string]any{"dim_room": [2]int{6, 6}, "num_boxes": nil, "max_turns": nil}, 0),
	}
}

// sokobanSpec builds a registry row. ChatSuffix is empty: GEM's suffix is
// the current board, which changes every turn.
func sokobanSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, sokobanFamily, "", params, maxTurns, newSokoban)
}

// sokobanPos is a (row, col) cell of the room.
type sokobanPos = gridCell

func (p sokobanPos) add(d sokobanPos) sokobanPos { return sokobanPos{p[0] + d[0], p[1] + d[1]} }

// sokobanState is the whole game state; its JSON form is the snapshot.
type sokobanState struct {
	NumBoxes int `json:"num_boxes"`
	MaxTurns int `json:"max_turns"`
	// RoomFixed is GEM's fixed layer in rows, in GEM's codes: 0 wall,
	// 1 floor, 2 target. Its shape is the room's size (GEM's dim_room).
	RoomFixed [][]int `json:"room_fixed"`
	// Boxes are the cells holding a box, in row-major order so that equal
	// states have equal snapshots.
	Boxes     []sokobanPos `json:"boxes"`
	Player    sokobanPos   `json:"player"`
	TurnCount int          `json:"turn_count"`
	Example   string       `json:"example"`
	// Random makes every Reset draw the room size, box count and turn limit.
	Random bool `json:"random"`
}

// sokoban is GEM's SokobanEnv.
type sokoban struct {
	s sokobanState
}

// newSokoban applies the overrides (dim_room as [rows, cols], num_boxes,
// max_turns) to the registered parameters. As in GEM, a null num_boxes or
// max_turns makes every reset draw all three, and unknown keys are ignored.
func newSokoban(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p := maps.Clone(registered)
	for _, key := range slices.Sorted(maps.Keys(p)) { // sorted: the same bad key is reported every time
		raw, ok := opts[key]
		if !ok {
			continue
		}
		if key == "dim_room" {
			var dim []int
			if err := decodeStrict(raw, &dim); err != nil || len(dim) != 2 {
				return nil, fmt.Errorf("%w: dim_room: want [rows, cols], got %s", ErrBadOption, raw)
			}
			p[key] = [2]int{dim[0], dim[1]}
			continue
		}
		if isNull(raw) {
			p[key] = nil
			continue
		}
		var v int
		if err := decodeStrict(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: want an integer or null, got %s", ErrBadOption, key, raw)
		}
		p[key] = v
	}
	dim := p["dim_room"].([2]int)
	numBoxes, boxesOK := p["num_boxes"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	s := sokobanState{Example: sokobanDirections[0], Random: !boxesOK || !turnsOK}
	c := sokobanConfig{dim[0], dim[1], numBoxes, maxTurns}
	if s.Random {
		// A placeholder until Reset draws: the first candidate.
		c = sokobanRandomConfigs[0]
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	s.NumBoxes, s.MaxTurns = c.numBoxes, c.maxTurns
	// The fallback room keeps the env usable before the first Reset.
	s.RoomFixed, s.Boxes, s.Player = sokobanFallback(c.rows, c.cols, c.numBoxes)
	return &sokoban{s: s}, nil
}

// validate checks a parameter set, naming the offending key. The bounds are
// what the fallback room needs: walls around at least three free rows and
// columns, and a row or column of free cells for the boxes.
func (c sokobanConfig) validate() error {
	switch {
	case c.rows < sokobanMinDim || c.rows > sokobanMaxDim || c.cols < sokobanMinDim || c.cols > sokobanMaxDim:
		return fmt.Errorf("dim_room: each side must be in [%d, %d], got (%d, %d)", sokobanMinDim, sokobanMaxDim, c.rows, c.cols)
	case c.numBoxes < 1 || c.numBoxes > max(c.rows, c.cols)-2:
		return fmt.Errorf("num_boxes: must be in [1, %d] for a %dx%d room, got %d", max(c.rows, c.cols)-2, c.rows, c.cols, c.numBoxes)
	case c.maxTurns < 1:
		return errMaxTurns(c.maxTurns)
	}
	return nil
}

// Reset draws the parameters (random variant only), the room, then the
// example direction.
func (g *sokoban) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	rows, cols := len(s.RoomFixed), len(s.RoomFixed[0])
	if s.Random {
		c := sokobanRandomConfigs[rng.IntN(len(sokobanRandomConfigs))]
		rows, cols, s.NumBoxes, s.MaxTurns = c.rows, c.cols, c.numBoxes, c.maxTurns
	}
	s.RoomFixed, s.Boxes, s.Player, _ = sokobanGenerate(rng, rows, cols, s.NumBoxes, s.MaxTurns)
	s.TurnCount = 0
	s.Example = sokobanDirections[rng.IntN(len(sokobanDirections))]
	return g.Instructions(), g.Info()
}

// Step follows GEM's order: format error, collision, push or move, win, and
// finally the turn limit, whose reward is the share of boxes on targets.
func (g *sokoban) Step(action string) StepResult {
	s := &g.s
	s.TurnCount++
	t := s.TurnCount
	d, ok := sokobanParseMove(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf("At turn %d, your submitted action is not valid.", t), t, s.MaxTurns, g.Info())
	}
	dir := sokobanDirections[d]
	next := s.Player.add(sokobanSteps[d])
	beyond := next.add(sokobanSteps[d])
	box := s.boxAt(next)
	var obs string
	if !s.open(next) || box >= 0 && (!s.open(beyond) || s.boxAt(beyond) >= 0) {
		obs = fmt.Sprintf("At turn %d, you cannot move %s - you would collide with wall or other boxes!", t, dir)
	} else {
		if box >= 0 {
			s.Boxes[box] = beyond
			sokobanSort(s.Boxes)
			obs = fmt.Sprintf("At turn %d, you pushed a box while you moved %s.", t, dir)
		} else {
			obs = fmt.Sprintf("At turn %d, you moved %s.", t, dir)
		}
		// The cell left behind shows the fixed layer again (a target
		// reappears), since rendering starts from it.
		s.Player = next
		if s.onTargets() == s.NumBoxes {
			return StepResult{Observation: "Congratulations! You have solved the Sokoban puzzle!", Reward: rewardSuccess, Terminated: true, Won: true, Info: g.Info()}
		}
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, float64(s.onTargets())/float64(s.NumBoxes), g.Info())
	}
	return StepResult{Observation: obs, Reward: rewardStep, Info: g.Info()}
}

// open reports whether p is on the grid and not a wall.
func (s *sokobanState) open(p sokobanPos) bool {
	return p[0] >= 0 && p[0] < len(s.RoomFixed) && p[1] >= 0 && p[1] < len(s.RoomFixed[p[0]]) &&
		s.RoomFixed[p[0]][p[1]] != sokobanWall
}

// boxAt is the index in Boxes of the box on p, or -1.
func (s *sokobanState) boxAt(p sokobanPos) int {
	return slices.Index(s.Boxes, p)
}

// onTargets is the number of boxes on targets, GEM's count of code-3 cells.
func (s *sokobanState) onTargets() int {
	n := 0
	for _, b := range s.Boxes {
		if s.RoomFixed[b[0]][b[1]] == sokobanTarget {
			n++
		}
	}
	return n
}

// sokobanSort puts cells in row-major order.
func sokobanSort(cells []sokobanPos) {
	slices.SortFunc(cells, func(a, b sokobanPos) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
}

// sokobanParseMove returns the direction (an index into sokobanDirections)
// of the last match of GEM's pattern \\boxed\{(up|down|left|right)\}, which
// GEM compiles case-insensitively, "boxed" included. Python's IGNORECASE
// also lets İ (U+0130) and ı (U+0131) stand for the i of "right"; GEM's step
// then fails on the unknown word, and here such a last match is a format
// error instead.
//
// It is hand-written because Go's regexp is slow on megabyte actions. A
// match holds exactly one backslash, at its start, so matches never overlap
// and the last one starts at the last backslash where the rest of the
// pattern matches; each try reads a few bytes, so the scan stays linear.
func sokobanParseMove(action string) (int, bool) {
	for end := len(action); ; {
		p := strings.LastIndexByte(action[:end], '\\')
		if p < 0 {
			return 0, false
		}
		if d, matched := sokobanMatchAt(action[p+1:]); matched {
			return max(d, 0), d >= 0
		}
		end = p
	}
}

// sokobanMatchAt matches the pattern after its backslash at the start of s,
// ignoring case. It returns the direction, or -1 for the İ/ı form of "right".
func sokobanMatchAt(s string) (dir int, matched bool) {
	s, ok := cutFoldPrefix(s, "boxed{")
	if !ok {
		return 0, false
	}
	for d, word := range sokobanDirections[:3] {
		if rest, ok := cutFoldPrefix(s, word); ok && strings.HasPrefix(rest, "}") {
			return d, true
		}
	}
	rest, ok := cutFoldPrefix(s, "r")
	if !ok {
		return 0, false
	}
	dir = 3
	switch {
	case strings.HasPrefix(rest, "İ"), strings.HasPrefix(rest, "ı"):
		rest, dir = rest[len("ı"):], -1 // both are two bytes in UTF-8
	case strings.HasPrefix(rest, "i"), strings.HasPrefix(rest, "I"):
		rest = rest[1:]
	default:
		return 0, false
	}
	if rest, ok = cutFoldPrefix(rest, "ght"); !ok || !strings.HasPrefix(rest, "}") {
		return 0, false
	}
	return dir, true
}

// cutFoldPrefix removes prefix, lower-case ASCII, from the start of s,
// matching ASCII letters in either case. No other character folds to the
// letters of GEM's Sokoban pattern apart from the i of "right", which
// sokobanMatchAt handles itself.
func cutFoldPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) {
		return s, false
	}
	for i := range len(prefix) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return s, false
		}
	}
	return s[len(prefix):], true
}

// Info is GEM's step and reset info: the rendered board and a call to action.
func (g *sokoban) Info() Info {
	return Info{"suffix": "Here is the current board layout:\n" + g.s.render() + "\nEnter your move."}
}

// render draws one symbol per cell, joined by spaces, each row ending in a
// newline. A player on a target shows as P, as in GEM.
func (s *sokobanState) render() string {
	var b strings.Builder
	for r, row := range s.RoomFixed {
		for c, code := range row {
			if c > 0 {
				b.WriteByte(' ')
			}
			p := sokobanPos{r, c}
			switch {
			case p == s.Player:
				b.WriteString("P")
			case s.boxAt(p) >= 0 && code == sokobanTarget:
				b.WriteString("√")
			case s.boxAt(p) >= 0:
				b.WriteString("X")
			case code == sokobanWall:
				b.WriteString("#")
			case code == sokobanTarget:
				b.WriteString("O")
			default:
				b.WriteString("_")
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Instructions renders GEM's instruction text for the current turn limit and example.
func (g *sokoban) Instructions() string {
	return fmt.Sprintf(sokobanInstructions, g.s.MaxTurns, g.s.Example, g.s.Example)
}

// Snapshot returns the state as a JSON object with the keys of sokobanState.
func (g *sokoban) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, strings, a bool and int arrays
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state. Boxes may be given in
// any order.
func (g *sokoban) Restore(state json.RawMessage) error {
	if err := restoreState(sokobanFamily, &g.s, state, nil); err != nil {
		return err
	}
	sokobanSort(g.s.Boxes) // row-major, whatever order the caller gave
	return nil
}

// fromState lays state over the constructor's state. The room, the boxes
// and the player must be given; for a drawn size, num_boxes is the room's
// number of targets and max_turns is what the -random draw pairs with the
// room's size and num_boxes. The example defaults to "up".
func (g *sokoban) fromState(state json.RawMessage) (Info, error) {
	if err := startState(sokobanFamily, &g.s, g.s.Random, state); err != nil {
		return nil, err
	}
	sokobanSort(g.s.Boxes)
	return g.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its size at reset.
func (s *sokobanState) derive(obj map[string]json.RawMessage, drawn bool) error {
	for _, k := range [...]struct{ key, why string }{
		{"room_fixed", "it is the room's walls, floor and targets"},
		{"boxes", "they are where the boxes start"},
		{"player", "it is where the player starts"},
	} {
		if !has(obj, k.key) {
			return errMissing(k.key, k.why)
		}
	}
	if drawn {
		rows, cols := len(s.RoomFixed), 0
		if rows > 0 {
			cols = len(s.RoomFixed[0])
		}
		for r, row := range s.RoomFixed {
			if len(row) != cols { // before the size picks a turn limit
				return fmt.Errorf("room_fixed: row %d has %d cells, want %d", r, len(row), cols)
			}
		}
		if !has(obj, "num_boxes") {
			s.NumBoxes = 0
			for _, row := range s.RoomFixed {
				for _, code := range row {
					if code == sokobanTarget {
						s.NumBoxes++
					}
				}
			}
		}
		if !has(obj, "max_turns") {
			i := slices.IndexFunc(sokobanRandomConfigs[:], func(c sokobanConfig) bool {
				return c.rows == rows && c.cols == cols && c.numBoxes == s.NumBoxes
			})
			if i < 0 {
				return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with a %dx%d room of %d boxes", rows, cols, s.NumBoxes))
			}
			s.MaxTurns = sokobanRandomConfigs[i].maxTurns
		}
	}
	if !has(obj, "example") {
		s.Example = sokobanDirections[0]
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s sokobanState) overlay(obj map[string]json.RawMessage) (sokobanState, error) {
	next := s
	// Decode into fresh slices: decoding must not write into the live room.
	next.RoomFixed, next.Boxes = nil, nil
	fields := map[string]any{
		"num_boxes":  &next.NumBoxes,
		"max_turns":  &next.MaxTurns,
		"room_fixed": &next.RoomFixed,
		"boxes":      &next.Boxes,
		"player":     &next.Player,
		"turn_count": &next.TurnCount,
		"example":    &next.Example,
		"random":     &next.Random,
	}
	if err := restoreFields(sokobanFamily, obj, fields); err != nil {
		return sokobanState{}, err
	}
	if next.RoomFixed == nil {
		next.RoomFixed = cloneRows(s.RoomFixed)
	}
	if next.Boxes == nil {
		next.Boxes = slices.Clone(s.Boxes)
	}
	return next, nil
}

// validate checks the invariants Step, Reset and Instructions rely on,
// naming the offending key. The border need not be walls: Step treats the
// edge of the grid as one.
func (s *sokobanState) validate() error {
	rows := len(s.RoomFixed)
	if rows < sokobanMinDim || rows > sokobanMaxDim {
		return fmt.Errorf("room_fixed: must have %d to %d rows, got %d", sokobanMinDim, sokobanMaxDim, rows)
	}
	cols := len(s.RoomFixed[0])
	targets := 0
	for r, row := range s.RoomFixed {
		if len(row) != cols {
			return fmt.Errorf("room_fixed: row %d has %d cells, want %d", r, len(row), cols)
		}
		for c, code := range row {
			switch code {
			case sokobanTarget:
				targets++
			case sokobanWall, sokobanFloor:
			default:
				return fmt.Errorf("room_fixed: cell (%d, %d) is %d, want 0 (wall), 1 (floor) or 2 (target)", r, c, code)
			}
		}
	}
	if cols < sokobanMinDim || cols > sokobanMaxDim {
		return fmt.Errorf("room_fixed: must have %d to %d columns, got %d", sokobanMinDim, sokobanMaxDim, cols)
	}
	// Reset generates a room of this size with num_boxes boxes.
	if err := (sokobanConfig{rows, cols, s.NumBoxes, s.MaxTurns}).validate(); err != nil {
		return err
	}
	if targets != s.NumBoxes {
		return fmt.Errorf("room_fixed: has %d targets, want num_boxes %d", targets, s.NumBoxes)
	}
	if s.TurnCount < 0 {
		return errTurnCount(s.TurnCount)
	}
	if len(s.Boxes) != s.NumBoxes {
		return fmt.Errorf("boxes: has %d boxes, want num_boxes %d", len(s.Boxes), s.NumBoxes)
	}
	for i, b := range s.Boxes {
		if !s.open(b) {
			return fmt.Errorf("boxes: box %v is off the room or on a wall", b)
		}
		if slices.Index(s.Boxes, b) != i {
			return fmt.Errorf("boxes: two boxes on %v", b)
		}
	}
	if !s.open(s.Player) {
		return fmt.Errorf("player: %v is off the room or on a wall", s.Player)
	}
	if s.boxAt(s.Player) >= 0 {
		return fmt.Errorf("player: %v holds a box", s.Player)
	}
	if !slices.Contains(sokobanDirections[:], s.Example) {
		return fmt.Errorf("example: %q is not one of %v", s.Example, sokobanDirections)
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (g *sokoban) Turn() int { return g.s.TurnCount }

// MaxTurns is the current turn limit (for the random variant, a placeholder
// of 20 until the first Reset draws it).
func (g *sokoban) MaxTurns() int { return g.s.MaxTurns }
