package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
)

const (
	game2048Family = "Game2048"
	// game2048DefaultSize is GEM's board_size; no registration changes it.
	game2048DefaultSize = 4
	// game2048MaxSize bounds the board_size override: the board is rendered
	// into every prompt, and GEM's boards are 4x4.
	game2048MaxSize = 16
	// game2048MaxTile bounds restored tiles and targets. Merges conserve the
	// tile sum and spawns add at most 4, so no tile can then overflow an int.
	game2048MaxTile = 1 << 30
)

// game2048Instructions is GEM's instruction text; its verbs are, in order,
// target_tile, max_turns and the example direction.
const game2048Instructions = `You are playing 2048.
Your goal is to reach the %d tile by sliding and merging tiles.
You have %d turns maximum.

Rules:
- When two tiles with the same number touch, they merge into one tile with double the value.
- After each move, a new tile (2 or 4) appears in a random empty spot.
- You can move tiles in four directions: 'up', 'down', 'left', 'right'.

To submit your move, type the direction in \boxed{...}.
For example: \boxed{%s}

`

// game2048Directions are the moves, in GEM's order.
var game2048Directions = []string{"up", "down", "left", "right"}

// game2048RandomConfigs are the (target_tile, max_turns) pairs the -random
// variant draws from at every reset.
var game2048RandomConfigs = [][2]int{{16, 20}, {32, 30}, {64, 50}}

// game2048Move is GEM's case-insensitive action pattern. Python's IGNORECASE
// also lets İ (U+0130) and ı (U+0131) match the i of "right"; Go's (?i) does
// not, so they are listed explicitly.
var game2048Move = regexp.MustCompile(`(?i)\\boxed\{(up|down|left|r[iİı]ght)\}`)

// game2048Spec registers a fixed target and turn limit.
func game2048Spec(id string, targetTile, maxTurns int) Spec {
	return game2048NewSpec(id, map[string]any{"target_tile": targetTile, "max_turns": maxTurns}, maxTurns)
}

// game2048Specs lists every registered 2048 id.
func game2048Specs() []Spec {
	return []Spec{
		game2048Spec("game:Game2048-v0-easy", 64, 50),
		game2048Spec("game:Game2048-v0-hard", 512, 50),
		game2048Spec("game:Game2048-v0-extreme-hard", 2048, 100),
		game2048NewSpec("game:Game2048-v0-random", map[string]any{"target_tile": nil, "max_turns": nil}, 0),
	}
}

// game2048NewSpec builds a registry row. ChatSuffix is empty: GEM's suffix is
// the current board, which changes every turn.
func game2048NewSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, game2048Family, "", params, maxTurns, newGame2048)
}

// game2048State is the whole game state; its JSON form is the snapshot.
type game2048State struct {
	TargetTile int `json:"target_tile"`
	MaxTurns   int `json:"max_turns"`
	// Board is square, row-major; 0 is an empty cell.
	Board [][]int `json:"board"`
	// MaxTile is the largest tile credited so far (capped at the target);
	// InitMax is the largest tile after reset. Both feed the progress reward.
	MaxTile   int `json:"max_tile"`
	InitMax   int `json:"init_max"`
	TurnCount int `json:"turn_count"`
	// Spawns are scripted future spawns as [row, col, value], used before
	// any drawn one.
	Spawns [][]int `json:"spawns"`
	// SpawnSeed and SpawnCount fix the drawn spawns: spawn k after reset
	// draws from PCG(SpawnSeed, k), so the snapshot needs no RNG internals.
	SpawnSeed  uint64 `json:"spawn_seed"`
	SpawnCount uint64 `json:"spawn_count"`
	Example    string `json:"example"`
	// Random makes every Reset draw the target and the turn limit.
	Random bool `json:"random"`
}

// game2048 is GEM's Game2048Env.
type game2048 struct {
	s game2048State
}

// newGame2048 applies the overrides (target_tile, max_turns, board_size) to
// the registered parameters. As in GEM, a null target_tile or max_turns makes
// every reset draw both, and unknown keys are ignored.
func newGame2048(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p := maps.Clone(registered)
	p["board_size"] = game2048DefaultSize
	for _, key := range slices.Sorted(maps.Keys(p)) { // sorted: the same bad key is reported every time
		raw, ok := opts[key]
		if !ok {
			continue
		}
		want := "an integer or null"
		if key == "board_size" {
			want = "an integer" // GEM has no drawn board size
		} else if isNull(raw) {
			p[key] = nil
			continue
		}
		var v int
		if err := decodeStrict(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: want %s, got %s", ErrBadOption, key, want, raw)
		}
		p[key] = v
	}
	targetTile, targetOK := p["target_tile"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	size := p["board_size"].(int)
	if size < 2 || size > game2048MaxSize {
		return nil, fmt.Errorf("%w: board_size: must be in [2, %d], got %d", ErrBadOption, game2048MaxSize, size)
	}
	random := !targetOK || !turnsOK
	if !random {
		if err := game2048CheckTarget(targetTile); err != nil {
			return nil, fmt.Errorf("%w: target_tile: %w", ErrBadOption, err)
		}
		if maxTurns < 1 {
			return nil, fmt.Errorf("%w: %w", ErrBadOption, errMaxTurns(maxTurns))
		}
	}
	// An empty board with nominal maxima is a valid state before the first
	// Reset: every move leaves it unchanged.
	return &game2048{s: game2048State{
		TargetTile: targetTile,
		MaxTurns:   maxTurns,
		Board:      game2048EmptyBoard(size),
		MaxTile:    2,
		InitMax:    2,
		Spawns:     [][]int{},
		Example:    game2048Directions[0],
		Random:     random,
	}}, nil
}

// game2048CheckTarget accepts powers of two, whose logarithms are exact
// integers: the progress reward is then the same ratio GEM computes.
func game2048CheckTarget(v int) error {
	if v < 2 || v > game2048MaxTile || v&(v-1) != 0 {
		return fmt.Errorf("must be a power of two in [2, %d], got %d", game2048MaxTile, v)
	}
	return nil
}

// game2048EmptyBoard is a size x size board of empty cells.
func game2048EmptyBoard(size int) [][]int {
	board := make([][]int, size)
	for i := range board {
		board[i] = make([]int, size)
	}
	return board
}

// Reset draws, in GEM's order: the target and turn limit (random variant
// only), two spawns, the example direction; then the seed of later spawns.
func (g *game2048) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	if s.Random {
		c := game2048RandomConfigs[rng.IntN(len(game2048RandomConfigs))]
		s.TargetTile, s.MaxTurns = c[0], c[1]
	}
	s.Board = game2048EmptyBoard(len(s.Board))
	s.TurnCount = 0
	s.Spawns = [][]int{}
	game2048Spawn(s.Board, rng)
	game2048Spawn(s.Board, rng)
	s.MaxTile = game2048Largest(s.Board)
	s.InitMax = s.MaxTile
	s.Example = game2048Directions[rng.IntN(len(game2048Directions))]
	s.SpawnSeed = rng.Uint64() >> 11 // 53 bits: exact as a JSON number in any reader
	s.SpawnCount = 0
	return g.Instructions(), g.Info()
}

// game2048Spawn puts a 2 (probability 0.9) or a 4 on a uniform empty cell,
// drawing the cell first, as GEM does. The board must have an empty cell.
func game2048Spawn(board [][]int, rng *rand.Rand) {
	var empty [][2]int
	for r, row := range board {
		for c, v := range row {
			if v == 0 {
				empty = append(empty, [2]int{r, c})
			}
		}
	}
	cell := empty[rng.IntN(len(empty))]
	value := 2
	if rng.Float64() >= 0.9 {
		value = 4
	}
	board[cell[0]][cell[1]] = value
}

// spawnNext makes the spawn after a valid move: the next scripted one if its
// cell is empty (a script never overwrites a tile; one that would is
// dropped), else one drawn from the spawn stream.
func (g *game2048) spawnNext() {
	s := &g.s
	k := s.SpawnCount
	s.SpawnCount++
	if len(s.Spawns) > 0 {
		next := s.Spawns[0]
		s.Spawns = s.Spawns[1:]
		if s.Board[next[0]][next[1]] == 0 {
			s.Board[next[0]][next[1]] = next[2]
			return
		}
	}
	game2048Spawn(s.Board, rand.New(rand.NewPCG(s.SpawnSeed, k)))
}

// game2048Largest is the largest tile on the board (0 when it is empty).
func game2048Largest(board [][]int) int {
	m := 0
	for _, row := range board {
		for _, v := range row {
			m = max(m, v)
		}
	}
	return m
}

// Step follows GEM's order: format error, a move that changes nothing, then a
// valid move (progress reward, spawn, win, game over), and finally the turn
// limit, which replaces the feedback line but keeps the step's reward.
func (g *game2048) Step(action string) StepResult {
	s := &g.s
	s.TurnCount++
	t := s.TurnCount
	dir, ok := game2048ParseMove(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf(`At turn %d, you did not provide a valid move. Please use \boxed{direction} format.`, t), t, s.MaxTurns, g.Info())
	}
	var obs string
	reward := rewardStep
	if next, moved := game2048Slide(s.Board, dir); !moved {
		obs = fmt.Sprintf("At turn %d, you chose move '%s' which doesn't change the board state. Try a different direction.", t, dir)
	} else {
		s.Board = next
		// Credited before the spawn, so a spawned 4 counts only at the next valid move.
		if m := min(game2048Largest(s.Board), s.TargetTile); m > s.MaxTile {
			reward = float64(game2048Log2(m)-game2048Log2(s.MaxTile)) /
				float64(game2048Log2(s.TargetTile)-game2048Log2(s.InitMax))
			s.MaxTile = m
		}
		g.spawnNext()
		switch {
		case s.MaxTile >= s.TargetTile:
			return StepResult{
				Observation: fmt.Sprintf("Congratulations! You reached the %d tile in %d turns!", s.TargetTile, t),
				Reward:      reward,
				Terminated:  true,
				Won:         true,
				Info:        g.Info(),
			}
		case !game2048CanMove(s.Board):
			return StepResult{Observation: "Game over! No more moves possible.", Reward: reward, Terminated: true, Info: g.Info()}
		}
		obs = fmt.Sprintf("At turn %d, you moved %s", t, dir) // no final period, as in GEM
	}
	if t >= s.MaxTurns {
		return turnLimitResult(fmt.Sprintf("You have reached the maximum number of turns (%d).", s.MaxTurns), reward, g.Info())
	}
	return StepResult{Observation: obs, Reward: reward, Info: g.Info()}
}

// game2048Log2 is log2 of a power of two, exact as GEM's float log2 is there.
func game2048Log2(v int) int { return bits.Len(uint(v)) - 1 }

// game2048ParseMove returns the last boxed direction, lowercased as Python's
// str.lower does: İ becomes "i" + U+0307, so "rİght" and "rıght" are no known
// direction and, as in GEM, slide nothing.
func game2048ParseMove(action string) (string, bool) {
	last := lastSubmatchIndex(game2048Move, action)
	if last == nil {
		return "", false
	}
	word := action[last[2]:last[3]]
	return strings.ToLower(strings.ReplaceAll(word, "İ", "i\u0307")), true
}

// game2048Slide returns the board after sliding toward dir and whether
// anything changed; an unknown dir changes nothing. Every direction is the
// left slide of lines read from the far edge inward.
func game2048Slide(board [][]int, dir string) ([][]int, bool) {
	n := len(board)
	var cell func(line, i int) (int, int)
	switch dir {
	case "left":
		cell = func(line, i int) (int, int) { return line, i }
	case "right":
		cell = func(line, i int) (int, int) { return line, n - 1 - i }
	case "up":
		cell = func(line, i int) (int, int) { return i, line }
	case "down":
		cell = func(line, i int) (int, int) { return n - 1 - i, line }
	default:
		return board, false
	}
	next := game2048EmptyBoard(n)
	changed := false
	values := make([]int, n)
	for line := range n {
		for i := range n {
			r, c := cell(line, i)
			values[i] = board[r][c]
		}
		for i, v := range game2048SlideLine(values) {
			r, c := cell(line, i)
			next[r][c] = v
			changed = changed || v != board[r][c]
		}
	}
	return next, changed
}

// game2048SlideLine slides one line toward index 0 as GEM does: drop the
// gaps, then scan from index 0 and merge each adjacent equal pair into one
// tile, skipping past it so that a merged tile cannot merge again.
func game2048SlideLine(line []int) []int {
	var tiles []int
	for _, v := range line {
		if v != 0 {
			tiles = append(tiles, v)
		}
	}
	out := make([]int, 0, len(line))
	for i := 0; i < len(tiles); i++ {
		if i+1 < len(tiles) && tiles[i] == tiles[i+1] {
			out = append(out, 2*tiles[i])
			i++
			continue
		}
		out = append(out, tiles[i])
	}
	return append(out, make([]int, len(line)-len(out))...)
}

// game2048CanMove reports whether any direction would change the board.
func game2048CanMove(board [][]int) bool {
	for _, dir := range game2048Directions {
		if _, moved := game2048Slide(board, dir); moved {
			return true
		}
	}
	return false
}

// info is GEM's step and reset info: the rendered board and a call to action.
func (g *game2048) Info() Info {
	return Info{"suffix": "Current board:\n" + game2048Render(g.s.Board) + "\nEnter your move."}
}

// game2048Render draws each cell right-aligned in width 4 ("   ." when
// empty), cells joined by spaces and rows by newlines.
func game2048Render(board [][]int) string {
	rows := make([]string, len(board))
	cells := make([]string, len(board))
	for r, row := range board {
		for c, v := range row {
			if v == 0 {
				cells[c] = "   ."
			} else {
				cells[c] = fmt.Sprintf("%4d", v)
			}
		}
		rows[r] = strings.Join(cells, " ")
	}
	return strings.Join(rows, "\n")
}

// Instructions renders GEM's instruction text for the current target, turn limit and example.
func (g *game2048) Instructions() string {
	return fmt.Sprintf(game2048Instructions, g.s.TargetTile, g.s.MaxTurns, g.s.Example)
}

// Snapshot returns the state as a JSON object with the keys of game2048State.
func (g *game2048) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, strings, a bool and int slices
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state. A board given without
// max_tile and init_max sets both to its largest tile, as a reset does.
func (g *game2048) Restore(state json.RawMessage) error {
	return restoreState(game2048Family, &g.s, state, func(obj map[string]json.RawMessage, next *game2048State) error {
		if has(obj, "board") && !has(obj, "max_tile") && !has(obj, "init_max") {
			next.MaxTile = game2048Largest(next.Board)
			next.InitMax = next.MaxTile
			if next.MaxTile == 0 {
				return errors.New("board: no tile to derive max_tile and init_max from")
			}
		}
		return nil
	})
}

// fromState lays state over the constructor's state. The board and the
// spawn seed must be given; for a drawn target, target_tile must be given
// and max_turns is what the -random draw pairs with it. At the start of an
// episode (turn_count absent or 0) init_max is the board's largest tile and
// max_tile is init_max, as after a reset; later, both must be given. The
// example defaults to "up".
func (g *game2048) fromState(state json.RawMessage) (Info, error) {
	if err := startState(game2048Family, &g.s, g.s.Random, state); err != nil {
		return nil, err
	}
	return g.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its target at reset.
func (s *game2048State) derive(obj map[string]json.RawMessage, drawn bool) error {
	if !has(obj, "board") {
		return errMissing("board", "it is the start board")
	}
	if drawn {
		if !has(obj, "target_tile") {
			return errMissing("target_tile", "this env draws it at reset")
		}
		if !has(obj, "max_turns") {
			i := slices.IndexFunc(game2048RandomConfigs, func(c [2]int) bool { return c[0] == s.TargetTile })
			if i < 0 {
				return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with target_tile %d", s.TargetTile))
			}
			s.MaxTurns = game2048RandomConfigs[i][1]
		}
	}
	if !has(obj, "spawn_seed") {
		return errMissing("spawn_seed", "it draws the tile spawned after each move (after any scripted spawns)")
	}
	for _, key := range []string{"init_max", "max_tile"} {
		if !has(obj, key) && s.TurnCount != 0 {
			return errMissing(key, fmt.Sprintf("with turn_count %d it cannot be read off the board", s.TurnCount))
		}
	}
	if !has(obj, "init_max") {
		if s.InitMax = game2048Largest(s.Board); s.InitMax == 0 {
			return errors.New("board: no tile to derive init_max from")
		}
	}
	if !has(obj, "max_tile") {
		s.MaxTile = s.InitMax
	}
	if !has(obj, "example") {
		s.Example = game2048Directions[0]
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s game2048State) overlay(obj map[string]json.RawMessage) (game2048State, error) {
	next := s
	// Decode into fresh slices: decoding must not write into the live board.
	next.Board, next.Spawns = nil, nil
	fields := map[string]any{
		"target_tile": &next.TargetTile,
		"max_turns":   &next.MaxTurns,
		"board":       &next.Board,
		"max_tile":    &next.MaxTile,
		"init_max":    &next.InitMax,
		"turn_count":  &next.TurnCount,
		"spawns":      &next.Spawns,
		"spawn_seed":  &next.SpawnSeed,
		"spawn_count": &next.SpawnCount,
		"example":     &next.Example,
		"random":      &next.Random,
	}
	if err := restoreFields(game2048Family, obj, fields); err != nil {
		return game2048State{}, err
	}
	if next.Board == nil {
		next.Board = cloneRows(s.Board)
	}
	if next.Spawns == nil {
		next.Spawns = cloneRows(s.Spawns)
	}
	return next, nil
}

// cloneRows deep-copies a slice of int rows.
func cloneRows(rows [][]int) [][]int {
	out := make([][]int, len(rows))
	for i, row := range rows {
		out[i] = slices.Clone(row)
	}
	return out
}

// validate checks the invariants Step and Instructions rely on, naming the
// offending key.
func (s *game2048State) validate() error {
	if err := game2048CheckTarget(s.TargetTile); err != nil {
		return fmt.Errorf("target_tile: %w", err)
	}
	if s.MaxTurns < 1 {
		return errMaxTurns(s.MaxTurns)
	}
	if s.TurnCount < 0 {
		return errTurnCount(s.TurnCount)
	}
	n := len(s.Board)
	if n < 2 || n > game2048MaxSize {
		return fmt.Errorf("board: must have 2 to %d rows, got %d", game2048MaxSize, n)
	}
	for r, row := range s.Board {
		if len(row) != n {
			return fmt.Errorf("board: row %d has %d cells, want %d (square)", r, len(row), n)
		}
		for c, v := range row {
			if v != 0 && game2048CheckTarget(v) != nil {
				return fmt.Errorf("board: cell (%d, %d) is %d, want 0 or a power of two in [2, %d]", r, c, v, game2048MaxTile)
			}
		}
	}
	// The progress reward takes the logs of both. max_tile only grows from
	// init_max; with init_max <= max_tile, a due reward (target >= m >
	// max_tile) has a positive denominator.
	if err := game2048CheckTarget(s.InitMax); err != nil {
		return fmt.Errorf("init_max: %w", err)
	}
	if err := game2048CheckTarget(s.MaxTile); err != nil {
		return fmt.Errorf("max_tile: %w", err)
	}
	if s.MaxTile < s.InitMax {
		return fmt.Errorf("max_tile: %d is less than init_max %d", s.MaxTile, s.InitMax)
	}
	for i, sp := range s.Spawns {
		if len(sp) != 3 || sp[0] < 0 || sp[0] >= n || sp[1] < 0 || sp[1] >= n || (sp[2] != 2 && sp[2] != 4) {
			return fmt.Errorf("spawns: entry %d is %v, want [row, col, 2 or 4] on the %dx%d board", i, sp, n, n)
		}
	}
	if !slices.Contains(game2048Directions, s.Example) {
		return fmt.Errorf("example: %q is not one of %v", s.Example, game2048Directions)
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (g *game2048) Turn() int { return g.s.TurnCount }

// MaxTurns is the current turn limit (0 before the first Reset of the random variant).
func (g *game2048) MaxTurns() int { return g.s.MaxTurns }
