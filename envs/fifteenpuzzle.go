package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
)

const (
	fifteenFamily = "FifteenPuzzle"

	// fifteenMonteCarlo (GEM's registered generator) walks randomly away from
	// the goal; fifteenPureRandom shuffles and then repairs the parity.
	fifteenMonteCarlo = "monte_carlo"
	fifteenPureRandom = "pure_random"

	// fifteenDefaultMCMoves is GEM's constructor default; every registered id
	// sets num_rows and max_turns, so their defaults never apply.
	fifteenDefaultMCMoves = 100

	// fifteenMaxRows and fifteenMaxMCMoves bound what options and Restore
	// accept, so a bad value cannot make Reset or the board allocate or loop
	// without end; GEM has no limits. The registered sizes are 2 to 4.
	fifteenMaxRows    = 100
	fifteenMaxMCMoves = 1_000_000
)

// fifteenInstructions is GEM's instruction text; both verbs are the largest
// tile number, num_rows² - 1. Line 9 has no final period in GEM either.
const fifteenInstructions = `You are playing the %[1]d-Puzzle game.
You have to arrange the numbered tiles in ascending order from 1 to %[1]d, with the empty space located in the bottom-right corner.
To make a move, you can slide a tile into the empty space (represented by a double underscore, e.g. __) by using one of the following commands:
- 'up': Move the tile below the empty space up.
- 'down': Move the tile above the empty space down.
- 'left': Move the tile to the right of the empty space left.
- 'right': Move the tile to the left of the empty space right.
To submit your move, type the direction (e.g., 'up', 'down', 'left', or 'right') in \boxed{...}.
The current board layout is shown below
Use logic and planning to solve the puzzle.
`

// fifteenAction is GEM's action pattern: case-sensitive, no spaces allowed.
var fifteenAction = regexp.MustCompile(`\\boxed\{(up|down|left|right)\}`)

// fifteenMoves names the direction a tile slides into the blank; the blank
// moves the other way, by (dr, dc). The order is GEM's, which the Monte Carlo
// generator draws from, and index^1 is the opposite move.
var fifteenMoves = [4]fifteenMove{
	{"up", 1, 0},
	{"down", -1, 0},
	{"left", 0, 1},
	{"right", 0, -1},
}

// fifteenMove is one slide: its name and how the blank moves.
type fifteenMove struct {
	name   string
	dr, dc int
}

// fifteenRandomCandidates are the (num_rows, max_turns) pairs the -random
// variant draws from at each reset.
var fifteenRandomCandidates = [...][2]int{{2, 10}, {3, 20}, {4, 50}}

// fifteenPuzzleSpecs is the FifteenPuzzle family's registry rows. GEM's
// historical game:FifteenPuzzle-v0 (3x3, 20 turns) is not registered at HEAD
// and is left out.
func fifteenPuzzleSpecs() []Spec {
	return []Spec{
		fifteenSpec("game:FifteenPuzzle-v0-easy", map[string]any{"num_rows": 2, "max_turns": 10}, 10),
		fifteenSpec("game:FifteenPuzzle-v0-hard", map[string]any{"num_rows": 4, "max_turns": 50}, 50),
		fifteenSpec("game:FifteenPuzzle-v0-random", map[string]any{"num_rows": nil, "max_turns": nil}, 0),
	}
}

// fifteenSpec builds a registry row; params are the registered values
// overrides apply to. ChatSuffix is empty because GEM's suffix is the
// rendered board, which changes every turn.
func fifteenSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, fifteenFamily, "", params, maxTurns, newFifteenPuzzle)
}

// fifteenBoard is the board in row-major rows; 0 is the blank. Its JSON form
// is GEM's: rows of tile numbers with null for the blank.
type fifteenBoard [][]int

// MarshalJSON writes the blank as null.
func (b fifteenBoard) MarshalJSON() ([]byte, error) {
	rows := make([][]*int, len(b))
	for r, row := range b {
		rows[r] = make([]*int, len(row))
		for c := range row {
			if row[c] != 0 {
				rows[r][c] = &row[c]
			}
		}
	}
	return json.Marshal(rows)
}

// UnmarshalJSON reads null as the blank; a literal 0 is refused because it
// would be mistaken for the blank.
func (b *fifteenBoard) UnmarshalJSON(data []byte) error {
	var rows [][]*int
	if err := json.Unmarshal(data, &rows); err != nil {
		return err
	}
	board := make(fifteenBoard, len(rows))
	for r, row := range rows {
		board[r] = make([]int, len(row))
		for c, v := range row {
			switch {
			case v == nil:
				board[r][c] = 0
			case *v == 0:
				return errors.New("0 is not a tile; the blank is null")
			default:
				board[r][c] = *v
			}
		}
	}
	*b = board
	return nil
}

// fifteenGoal is the solved n×n board: 1..n²-1 in row-major order, blank last.
func fifteenGoal(n int) fifteenBoard {
	b := make(fifteenBoard, n)
	for r := range b {
		b[r] = make([]int, n)
		for c := range b[r] {
			b[r][c] = r*n + c + 1
		}
	}
	b[n-1][n-1] = 0
	return b
}

// fifteenState is the whole game state; its JSON form is the snapshot.
type fifteenState struct {
	NumRows   int          `json:"num_rows"`
	MaxTurns  int          `json:"max_turns"`
	Board     fifteenBoard `json:"board"`
	TurnCount int          `json:"turn_count"`
	// InitAlgo and MCRandMoves choose how Reset generates the start board.
	InitAlgo    string `json:"init_algo"`
	MCRandMoves int    `json:"mc_rand_moves"`
	// Random makes every Reset draw num_rows and max_turns.
	Random bool `json:"random"`
}

// fifteenPuzzle is GEM's FifteenPuzzleEnv.
type fifteenPuzzle struct {
	s fifteenState
}

// newFifteenPuzzle applies the overrides to the registered parameters. As in
// GEM, a null num_rows or max_turns makes the env draw both at every reset,
// and unknown keys are ignored.
func newFifteenPuzzle(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p, err := overrideIntParams(registered, opts)
	if err != nil {
		return nil, err
	}
	s := fifteenState{InitAlgo: fifteenMonteCarlo, MCRandMoves: fifteenDefaultMCMoves}
	if raw, ok := opts["init_algo"]; ok {
		if err := decodeStrict(raw, &s.InitAlgo); err != nil {
			return nil, fmt.Errorf("%w: init_algo: want a string, got %s", ErrBadOption, raw)
		}
	}
	if raw, ok := opts["mc_rand_moves"]; ok {
		if err := decodeStrict(raw, &s.MCRandMoves); err != nil {
			return nil, fmt.Errorf("%w: mc_rand_moves: want an integer, got %s", ErrBadOption, raw)
		}
	}
	numRows, rowsOK := p["num_rows"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	s.Random = !rowsOK || !turnsOK
	if s.Random {
		// A placeholder until Reset draws: the first candidate, solved.
		numRows, maxTurns = fifteenRandomCandidates[0][0], fifteenRandomCandidates[0][1]
	}
	s.NumRows, s.MaxTurns = numRows, maxTurns
	if err := s.validateConfig(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	// The goal board keeps the env usable before the first Reset.
	s.Board = fifteenGoal(s.NumRows)
	return &fifteenPuzzle{s: s}, nil
}

// Reset draws, in GEM's order: the size and turn limit (random variant only),
// then the start board.
func (f *fifteenPuzzle) Reset(rng *rand.Rand) (string, Info) {
	s := &f.s
	if s.Random {
		c := fifteenRandomCandidates[rng.IntN(len(fifteenRandomCandidates))]
		s.NumRows, s.MaxTurns = c[0], c[1]
	}
	if s.InitAlgo == fifteenPureRandom {
		s.Board = fifteenShuffled(rng, s.NumRows)
	} else {
		s.Board = fifteenRandomWalk(rng, s.NumRows, s.MCRandMoves)
	}
	s.TurnCount = 0
	return f.Instructions(), f.Info()
}

// fifteenRandomWalk is GEM's Monte Carlo generator: from the goal, make moves
// random legal moves, never undoing the previous one. Every move is a legal
// slide, so the board stays reachable from the goal, hence solvable. On 2×2
// only two boards can come out.
func fifteenRandomWalk(rng *rand.Rand, n, moves int) fifteenBoard {
	b := fifteenGoal(n)
	br, bc := n-1, n-1
	last := -1
	legal := make([]int, 0, len(fifteenMoves))
	for range moves {
		legal = legal[:0]
		for m, mv := range fifteenMoves {
			if last >= 0 && m == last^1 {
				continue
			}
			if r, c := br+mv.dr, bc+mv.dc; 0 <= r && r < n && 0 <= c && c < n {
				legal = append(legal, m)
			}
		}
		// n >= 2 leaves at least one legal move besides the undo.
		m := legal[rng.IntN(len(legal))]
		r, c := br+fifteenMoves[m].dr, bc+fifteenMoves[m].dc
		b[br][bc], b[r][c] = b[r][c], 0
		br, bc = r, c
		last = m
	}
	return b
}

// fifteenShuffled is GEM's "pure_random" generator: shuffle every cell,
// blank included, and if the parity invariant differs from the goal's, swap
// two distinct random tiles. A swap of two tiles flips the permutation
// parity and keeps the blank, so the result always has the goal's invariant,
// which for the n×n sliding puzzle means it is solvable.
func fifteenShuffled(rng *rand.Rand, n int) fifteenBoard {
	cells := make([]int, n*n)
	for i := range cells {
		cells[i] = (i + 1) % len(cells) // 1..n²-1, then the blank
	}
	rng.Shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
	if fifteenParity(cells, n) != 0 { // the goal's invariant is 0
		// GEM's random.sample over the tiles in board order: two distinct picks.
		tiles := make([]int, 0, len(cells)-1)
		for i, v := range cells {
			if v != 0 {
				tiles = append(tiles, i)
			}
		}
		i := rng.IntN(len(tiles))
		j := rng.IntN(len(tiles) - 1)
		if j >= i {
			j++
		}
		a, b := tiles[i], tiles[j]
		cells[a], cells[b] = cells[b], cells[a]
	}
	board := make(fifteenBoard, n)
	for r := range board {
		board[r] = cells[r*n : (r+1)*n : (r+1)*n]
	}
	return board
}

// fifteenParity is GEM's solvability invariant for row-major cells (0 is
// the blank): the parity of the number of transpositions that sort the tiles
// plus the blank's row+column distance from the top-left corner. Every slide
// is one transposition that moves the blank by one, so slides keep it.
func fifteenParity(cells []int, n int) int {
	perm := slices.Clone(cells)
	pos := make([]int, len(perm)) // pos[v] is where value v sits
	for i, v := range perm {
		pos[v] = i
	}
	swaps := 0
	for i := range len(perm) - 1 {
		want := i + 1 // tile i+1 belongs at i; the blank ends up last
		if j := pos[want]; j != i {
			perm[i], perm[j] = perm[j], perm[i]
			pos[perm[j]] = j
			pos[want] = i
			swaps++
		}
	}
	blank := slices.Index(cells, 0)
	return (swaps + blank/n + blank%n) % 2
}

// Step follows GEM's order of checks: format error, move off the board, then
// a legal move (a solved board returns at once, even on the last turn), and
// finally the turn limit, which replaces the feedback line and adds the soft
// score.
func (f *fifteenPuzzle) Step(action string) StepResult {
	s := &f.s
	s.TurnCount++
	t := s.TurnCount
	m, ok := fifteenParse(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf("At turn %d, you did not provide a valid guess", t), t, s.MaxTurns, f.Info()) // no period in GEM
	}
	dir := fifteenMoves[m].name
	var obs string
	if !s.slide(m) {
		obs = fmt.Sprintf("At turn %d, you chose a move %s that is outside the bounds of the board.", t, dir)
	} else {
		if s.solved() {
			return StepResult{
				Observation: "Congratulations! You have solved the puzzle!",
				Reward:      rewardSuccess,
				Terminated:  true,
				Won:         true,
				Info:        f.Info(),
			}
		}
		obs = fmt.Sprintf("At turn %d, you made a valid move: %s.\n", t, dir) // GEM ends this line with a newline
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, rewardStep+s.softScore(), f.Info()) // both branches' step reward is 0.0
	}
	return StepResult{Observation: obs, Reward: rewardStep, Info: f.Info()}
}

// fifteenParse returns the index in fifteenMoves of the last \boxed{dir} in
// the action; ok is false when there is none.
func fifteenParse(action string) (move int, ok bool) {
	last := lastSubmatchIndex(fifteenAction, action)
	if last == nil {
		return 0, false
	}
	name := action[last[2]:last[3]]
	// The pattern only captures the four names, so the index is always found.
	return slices.IndexFunc(fifteenMoves[:], func(mv fifteenMove) bool { return mv.name == name }), true
}

// blank returns the blank's row and column.
func (s *fifteenState) blank() (int, int) {
	for r, row := range s.Board {
		if c := slices.Index(row, 0); c >= 0 {
			return r, c
		}
	}
	return -1, -1 // unreachable for a validated board
}

// slide applies move m if the tile it names exists, reporting whether it did.
func (s *fifteenState) slide(m int) bool {
	br, bc := s.blank()
	r, c := br+fifteenMoves[m].dr, bc+fifteenMoves[m].dc
	if r < 0 || r >= s.NumRows || c < 0 || c >= s.NumRows {
		return false
	}
	s.Board[br][bc], s.Board[r][c] = s.Board[r][c], 0
	return true
}

// solved reports whether the board is the goal.
func (s *fifteenState) solved() bool {
	return s.correctCells() == s.NumRows*s.NumRows
}

// correctCells counts the cells that hold their goal content (the blank
// counts in the last cell).
func (s *fifteenState) correctCells() int {
	n, k := s.NumRows, 0
	for r, row := range s.Board {
		for c, v := range row {
			if v == (r*n+c+1)%(n*n) {
				k++
			}
		}
	}
	return k
}

// softScore is GEM's end-of-episode score: 1/N added once per correct cell,
// by repeated float64 addition as GEM does (7 of 9 gives 0.7777777777777779,
// not 7/9).
func (s *fifteenState) softScore() float64 {
	inc := 1 / float64(s.NumRows*s.NumRows)
	score := 0.0
	for range s.correctCells() {
		score += inc
	}
	return score
}

// render draws the board: cells right-aligned in width 2, the blank as
// "__", single spaces between cells, and a newline after every row.
func (s *fifteenState) render() string {
	var b strings.Builder
	for _, row := range s.Board {
		for c, v := range row {
			if c > 0 {
				b.WriteByte(' ')
			}
			if v == 0 {
				b.WriteString("__")
			} else {
				fmt.Fprintf(&b, "%2d", v)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// info is GEM's step info: the suffix shows the board after the step.
func (f *fifteenPuzzle) Info() Info {
	return Info{"suffix": "Here is the current board layout: \n" + f.s.render() + "\nEnter your move."}
}

// Instructions renders GEM's instruction text for the current size.
func (f *fifteenPuzzle) Instructions() string {
	return fmt.Sprintf(fifteenInstructions, f.s.NumRows*f.s.NumRows-1)
}

// Snapshot returns the state as a JSON object with the keys of fifteenState;
// the blank is null in the board.
func (f *fifteenPuzzle) Snapshot() json.RawMessage {
	b, _ := json.Marshal(f.s) // cannot fail: ints, strings, a bool and int rows
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state.
func (f *fifteenPuzzle) Restore(state json.RawMessage) error {
	return restoreState(fifteenFamily, &f.s, state, nil)
}

// fromState lays state over the constructor's state. The board must be
// given; for a drawn size, num_rows is the board's and max_turns is what the
// -random draw pairs with it.
func (f *fifteenPuzzle) fromState(state json.RawMessage) (Info, error) {
	if err := startState(fifteenFamily, &f.s, f.s.Random, state); err != nil {
		return nil, err
	}
	return f.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its size at reset.
func (s *fifteenState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if !has(obj, "board") {
		return errMissing("board", "it is the start board")
	}
	if drawn {
		if !has(obj, "num_rows") {
			s.NumRows = len(s.Board)
		}
		for r, row := range s.Board {
			if len(row) != s.NumRows { // before the size picks a turn limit
				return fmt.Errorf("board: row %d has %d cells, want %d", r, len(row), s.NumRows)
			}
		}
		if !has(obj, "max_turns") {
			i := slices.IndexFunc(fifteenRandomCandidates[:], func(c [2]int) bool { return c[0] == s.NumRows })
			if i < 0 {
				return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with num_rows %d", s.NumRows))
			}
			s.MaxTurns = fifteenRandomCandidates[i][1]
		}
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s fifteenState) overlay(obj map[string]json.RawMessage) (fifteenState, error) {
	next := s // decoding a board replaces the rows wholesale, so the live ones are never written
	fields := map[string]any{
		"num_rows":      &next.NumRows,
		"max_turns":     &next.MaxTurns,
		"board":         &next.Board,
		"turn_count":    &next.TurnCount,
		"init_algo":     &next.InitAlgo,
		"mc_rand_moves": &next.MCRandMoves,
		"random":        &next.Random,
	}
	if err := restoreFields(fifteenFamily, obj, fields); err != nil {
		return fifteenState{}, err
	}
	return next, nil
}

// validateConfig checks the parameters, naming the offending key.
func (s *fifteenState) validateConfig() error {
	switch {
	case s.NumRows < 2 || s.NumRows > fifteenMaxRows:
		// GEM's generator has no move to make on a 1×1 board.
		return fmt.Errorf("num_rows: must be in [2, %d], got %d", fifteenMaxRows, s.NumRows)
	case s.MaxTurns < 1:
		return errMaxTurns(s.MaxTurns)
	case s.InitAlgo != fifteenMonteCarlo && s.InitAlgo != fifteenPureRandom:
		return fmt.Errorf("init_algo: %q is not %q or %q", s.InitAlgo, fifteenMonteCarlo, fifteenPureRandom)
	case s.MCRandMoves < 0 || s.MCRandMoves > fifteenMaxMCMoves:
		return fmt.Errorf("mc_rand_moves: must be in [0, %d], got %d", fifteenMaxMCMoves, s.MCRandMoves)
	}
	return nil
}

// validate checks the invariants Step and Instructions rely on, naming the
// offending key. The board must hold every tile once and one blank; it need
// not be solvable, since the game plays the same either way.
func (s *fifteenState) validate() error {
	if err := s.validateConfig(); err != nil {
		return err
	}
	if s.TurnCount < 0 {
		return errTurnCount(s.TurnCount)
	}
	n := s.NumRows
	if len(s.Board) != n {
		return fmt.Errorf("board: has %d rows, want num_rows %d", len(s.Board), n)
	}
	seen := make([]bool, n*n)
	for r, row := range s.Board {
		if len(row) != n {
			return fmt.Errorf("board: row %d has %d cells, want %d", r, len(row), n)
		}
		for _, v := range row {
			switch {
			case v < 0 || v >= n*n:
				return fmt.Errorf("board: tile %d is outside [1, %d]", v, n*n-1)
			case seen[v] && v == 0:
				return errors.New("board: more than one blank (null)")
			case seen[v]:
				return fmt.Errorf("board: tile %d appears twice", v)
			}
			seen[v] = true
		}
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (f *fifteenPuzzle) Turn() int { return f.s.TurnCount }

// MaxTurns is the current turn limit (for the random variant, a placeholder
// of 10 until the first Reset draws it).
func (f *fifteenPuzzle) MaxTurns() int { return f.s.MaxTurns }
