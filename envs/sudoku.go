package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const sudokuFamily = "Sudoku"

// sudokuInstructions is GEM's instruction text. The first verb is the title
// ("A simple version of" for 4x4, empty otherwise, which leaves two spaces);
// every other verb is the scale. "nine {s}x{s} subgrids" is GEM's wording even
// for 4x4.
const sudokuInstructions = `You are playing %[1]s Sudoku.
Each row is numbered from 1 to %[2]d, and each column is also numbered from 1 to %[2]d.
Empty cells are represented by '.', and pre-filled cells contain digits from 1 to %[2]d.

Your objective is to fill the empty cells in the %[2]dx%[2]d grid with digits from 1 to %[2]d such that:
1. Each row contains all digits from 1 to %[2]d without repetition.
2. Each column contains all digits from 1 to %[2]d without repetition.
3. Each of the nine %[2]dx%[2]d subgrids contains all digits from 1 to %[2]d without repetition.

Rules and Instructions:
1. **Do not overwrite** the initial numbers provided in the grid.
2. **Only fill** empty cells represented by '.'.
3. You may respond in any manner you prefer, but ensure that your response includes the format of '\boxed{row column number}', e.g. \boxed{1 1 5}.
4. **Ensure** that your move does not violate Sudoku rules. Invalid moves, including overwriting pre-filled cells and placing two numbers in one row/col/sub-grid will result in penalties.
The history of your moves will be appended as you play more rounds. Use the history of your move to improve your decision making by avoiding the moves you have tried. Good luck!

`

// sudokuMove is GEM's action pattern: three digit runs separated by exactly
// one whitespace character each. \p{Nd} stands for Python's Unicode \d.
var sudokuMove = regexp.MustCompile(`\\boxed\{(\p{Nd}+)` + pySpaceClass + `(\p{Nd}+)` + pySpaceClass + `(\p{Nd}+)\}`)

// sudokuRandomDraws are the (scale, clues, max_turns) triples a drawn variant
// picks from uniformly at each reset: the -easy and -hard parameter sets.
var sudokuRandomDraws = [...][3]int{{4, 10, 15}, {9, 50, 50}}

// sudokuSpecs is the Sudoku family's list of registered ids.
func sudokuSpecs() []Spec {
	return []Spec{
		sudokuSpec("game:Sudoku-v0-easy", map[string]any{"scale": 4, "clues": 10, "max_turns": 15}, 15),
		sudokuSpec("game:Sudoku-v0-hard", map[string]any{"scale": 9, "clues": 50, "max_turns": 50}, 50),
		sudokuSpec("game:Sudoku-v0-random", map[string]any{"scale": nil, "clues": nil, "max_turns": nil}, 0),
	}
}

// sudokuSpec builds a registry row; params are the registered values
// overrides apply to. ChatSuffix is empty because GEM's suffix is the
// current board, which changes every turn.
func sudokuSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, sudokuFamily, "", params, maxTurns, newSudoku)
}

// sudokuState is the whole game state; its JSON form is the snapshot. Grids
// are rows of digits, 0 for an empty cell.
type sudokuState struct {
	Scale    int `json:"scale"`
	Clues    int `json:"clues"`
	MaxTurns int `json:"max_turns"`
	// Solution is the hidden full grid that placements are judged against.
	Solution [][]int `json:"solution"`
	// Board is the visible grid: the givens plus every correct placement.
	Board [][]int `json:"board"`
	// InitNumEmpty is the number of empty cells right after generation; each
	// correct placement earns 1/InitNumEmpty.
	InitNumEmpty int `json:"init_num_empty"`
	TurnCount    int `json:"turn_count"`
	// Random makes every Reset draw scale, clues and the turn limit.
	Random bool `json:"random"`
}

// sudoku is GEM's SudokuEnv.
type sudoku struct {
	s sudokuState
}

// newSudoku applies the overrides to the registered parameters. As in GEM, a
// null parameter makes the env draw all three at every reset, and unknown
// keys are ignored.
func newSudoku(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p, err := overrideIntParams(registered, opts)
	if err != nil {
		return nil, err
	}
	scale, scaleOK := p["scale"].(int)
	clues, cluesOK := p["clues"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	if !scaleOK || !cluesOK || !turnsOK {
		// Until the first Reset draws, hold the first candidate so the state is valid.
		d := sudokuRandomDraws[0]
		return &sudoku{s: sudokuPlaceholder(d[0], d[1], d[2], true)}, nil
	}
	if err := sudokuCheckParams(scale, clues, maxTurns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	return &sudoku{s: sudokuPlaceholder(scale, clues, maxTurns, false)}, nil
}

// sudokuCheckParams validates a parameter set, naming the offending key.
// Scales are limited to the perfect squares whose puzzles generate quickly;
// GEM crashes when clues exceeds the number of cells.
func sudokuCheckParams(scale, clues, maxTurns int) error {
	switch {
	case scale != 1 && scale != 4 && scale != 9:
		return fmt.Errorf("scale: must be 1, 4 or 9, got %d", scale)
	case clues < 0 || clues > scale*scale:
		return fmt.Errorf("clues: must be in [0, %d], got %d", scale*scale, clues)
	case maxTurns < 1:
		return errMaxTurns(maxTurns)
	}
	return nil
}

// sudokuPlaceholder is the state before the first Reset: a fixed solved grid
// with nothing left to fill, so Step and Snapshot work without a puzzle
// (GEM's constructor resets instead, but there is no RNG here yet).
func sudokuPlaceholder(scale, clues, maxTurns int, random bool) sudokuState {
	b := sudokuBoxSide(scale)
	solution := sudokuNewGrid(scale)
	for r := range scale {
		for c := range scale {
			// The standard shifted pattern: each row rotates by b, each band by one more.
			solution[r][c] = (r%b*b+r/b+c)%scale + 1
		}
	}
	return sudokuState{
		Scale:    scale,
		Clues:    clues,
		MaxTurns: maxTurns,
		Solution: solution,
		Board:    sudokuCloneGrid(solution),
		Random:   random,
	}
}

// Reset draws, in GEM's order: the parameter set (random variant only), the
// solution grid, then the cells to empty.
func (g *sudoku) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	if s.Random {
		d := sudokuRandomDraws[rng.IntN(len(sudokuRandomDraws))]
		s.Scale, s.Clues, s.MaxTurns = d[0], d[1], d[2]
	}
	s.Solution = sudokuFillGrid(rng, s.Scale)
	s.Board = sudokuRemoveCells(rng, s.Solution, s.Clues)
	s.InitNumEmpty = sudokuCountEmpty(s.Board)
	s.TurnCount = 0
	return g.Instructions(), g.Info()
}

// sudokuFillGrid builds a random solved grid as GEM does: backtracking over
// the empty cells in row-major order, trying the digits of each cell in a
// freshly shuffled order.
func sudokuFillGrid(rng *rand.Rand, scale int) [][]int {
	grid := sudokuNewGrid(scale)
	var fill func(cell int) bool
	fill = func(cell int) bool {
		if cell == scale*scale {
			return true
		}
		r, c := cell/scale, cell%scale
		digits := make([]int, scale)
		for i := range digits {
			digits[i] = i + 1
		}
		rng.Shuffle(len(digits), func(i, j int) { digits[i], digits[j] = digits[j], digits[i] })
		for _, d := range digits {
			if sudokuIsSafe(grid, r, c, d) {
				grid[r][c] = d
				if fill(cell + 1) {
					return true
				}
				grid[r][c] = 0
			}
		}
		return false
	}
	fill(0) // the search is exhaustive and a solved grid exists, so it succeeds
	return grid
}

// sudokuIsSafe reports whether d is absent from the row, the column and the
// sub-box of (r, c).
func sudokuIsSafe(grid [][]int, r, c, d int) bool {
	scale := len(grid)
	b := sudokuBoxSide(scale)
	for i := range scale {
		if grid[r][i] == d || grid[i][c] == d {
			return false
		}
	}
	r0, c0 := r/b*b, c/b*b
	for i := r0; i < r0+b; i++ {
		for j := c0; j < c0+b; j++ {
			if grid[i][j] == d {
				return false
			}
		}
	}
	return true
}

// sudokuRemoveCells empties up to clues random cells of the solution as GEM
// does: shuffle the row-major cell list, then take cells from its end,
// keeping each blank only if the puzzle still has exactly one solution.
// Every kept step preserves uniqueness (the full grid starts with exactly one
// solution, and a rejected blank is refilled), so the puzzle returned always
// has the solution as its only completion.
func sudokuRemoveCells(rng *rand.Rand, solution [][]int, clues int) [][]int {
	scale := len(solution)
	puzzle := sudokuCloneGrid(solution)
	cells := make([]int, scale*scale)
	for i := range cells {
		cells[i] = i
	}
	rng.Shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
	for _, cell := range slices.Backward(cells[len(cells)-clues:]) {
		r, c := cell/scale, cell%scale
		puzzle[r][c] = 0
		if sudokuCountSolutions(puzzle, 2) != 1 {
			puzzle[r][c] = solution[r][c]
		}
	}
	return puzzle
}

// sudokuCountSolutions counts the completions of grid, stopping at limit.
// GEM uses a plain row-major search; the capped count does not depend on the
// search order, so this one fills the most constrained cell first (bit masks
// of used digits) to stay fast on sparse 9x9 puzzles. grid is not modified.
func sudokuCountSolutions(grid [][]int, limit int) int {
	scale := len(grid)
	b := sudokuBoxSide(scale)
	rows, cols, boxes := make([]uint, scale), make([]uint, scale), make([]uint, scale)
	var empty []int
	for r := range scale {
		for c := range scale {
			d := grid[r][c]
			if d == 0 {
				empty = append(empty, r*scale+c)
				continue
			}
			bit := uint(1) << d
			box := r/b*b + c/b
			if rows[r]&bit != 0 || cols[c]&bit != 0 || boxes[box]&bit != 0 {
				return 0 // a given clashes: no completion
			}
			rows[r] |= bit
			cols[c] |= bit
			boxes[box] |= bit
		}
	}
	all := (uint(1)<<(scale+1) - 1) &^ 1 // bits 1..scale
	count := 0
	var search func(n int)
	search = func(n int) {
		if n == 0 {
			count++
			return
		}
		// Move the empty cell with the fewest candidates to position n-1.
		best, bestFree := -1, uint(0)
		for i := range n {
			r, c := empty[i]/scale, empty[i]%scale
			free := all &^ (rows[r] | cols[c] | boxes[r/b*b+c/b])
			if best < 0 || bits.OnesCount(free) < bits.OnesCount(bestFree) {
				best, bestFree = i, free
				if free == 0 {
					return
				}
			}
		}
		empty[best], empty[n-1] = empty[n-1], empty[best]
		cell := empty[n-1]
		r, c := cell/scale, cell%scale
		box := r/b*b + c/b
		for free := bestFree; free != 0 && count < limit; free &= free - 1 {
			bit := free & -free
			rows[r] |= bit
			cols[c] |= bit
			boxes[box] |= bit
			search(n - 1)
			rows[r] &^= bit
			cols[c] &^= bit
			boxes[box] &^= bit
		}
	}
	search(len(empty))
	return count
}

// Step follows GEM's order of checks: format error, out of bounds, filled
// cell, then a placement judged against the hidden solution (completing the
// board returns at once, even on the last turn), and finally the turn limit,
// which replaces the feedback line but keeps the step's reward.
func (g *sudoku) Step(action string) StepResult {
	s := &g.s
	s.TurnCount++
	t := s.TurnCount
	row, col, num, ok := sudokuParseMove(action)
	if !ok {
		return formatErrorResult("You did not provide a valid guess.", t, s.MaxTurns, g.Info())
	}
	r, rOK := s.index(row)
	c, cOK := s.index(col)
	d, dOK := s.index(num)
	var obs string
	reward := 0.0 // GEM's invalid-action reward; a correct placement replaces it
	switch {
	case !rOK || !cOK || !dOK:
		obs = fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which is out of bounds.", t, num, row, col)
	case s.Board[r][c] != 0:
		obs = fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which is already filled. You cannot overwrite pre-filled cells.", t, num, row, col)
	case s.Solution[r][c] == d+1:
		s.Board[r][c] = d + 1
		// GEM's 1 / init_num_empty; init_num_empty >= 1 here, as the cell was empty.
		reward = 1 / float64(s.InitNumEmpty)
		if sudokuCountEmpty(s.Board) == 0 {
			return StepResult{
				Observation: "Congratulations! You have completed the Sudoku puzzle!",
				Reward:      reward,
				Terminated:  true,
				Won:         true,
				Info:        g.Info(),
			}
		}
		obs = fmt.Sprintf("At turn %d, you placed %s at R%s C%s, which is correct.", t, num, row, col)
	default:
		// GEM's "violates" verdict only compares with the hidden solution.
		obs = fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which violates Sudoku rules.", t, num, row, col)
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, reward, g.Info())
	}
	return StepResult{Observation: obs, Reward: reward, Info: g.Info()}
}

// sudokuParseMove returns the row, column and number of the last
// \boxed{row col num} in the action as canonical decimal. ok is false for no
// match or a digit run Python's int() refuses.
func sudokuParseMove(action string) (row, col, num string, ok bool) {
	m := lastSubmatchIndex(sudokuMove, action)
	if m == nil {
		return "", "", "", false
	}
	var vals [3]string
	for i := range vals {
		if vals[i], ok = pyInt(action[m[2+2*i]:m[3+2*i]]); !ok {
			return "", "", "", false
		}
	}
	return vals[0], vals[1], vals[2], true
}

// index converts a canonical 1-based coordinate or digit to 0-based, if it
// is within 1..scale; a value too large for int is out of bounds.
func (s *sudokuState) index(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > s.Scale {
		return 0, false
	}
	return n - 1, true
}

// info is GEM's {"suffix": ...}: the current board and a call to action.
func (g *sudoku) Info() Info {
	return Info{"suffix": "Here is the current board layout:\n" + sudokuRender(g.s.Board) + "\nEnter your move."}
}

// sudokuRender draws the board as GEM does: a column header ending in two
// spaces, rows with "| " between sub-boxes and trailing spaces stripped, and
// a dashed separator (with a trailing space) between bands.
func sudokuRender(board [][]int) string {
	scale := len(board)
	b := sudokuBoxSide(scale)
	var sb strings.Builder
	sb.WriteString("   ")
	for j := 1; j <= scale; j++ {
		if j > 1 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "C%d", j)
		if j%b == 0 {
			sb.WriteString("  ")
		}
	}
	for i, row := range board {
		var line strings.Builder
		fmt.Fprintf(&line, "R%d ", i+1)
		for j, d := range row {
			cell := "."
			if d != 0 {
				cell = strconv.Itoa(d)
			}
			line.WriteString(" " + cell + " ")
			if (j+1)%b == 0 && j < scale-1 {
				line.WriteString("| ")
			}
		}
		sb.WriteByte('\n')
		sb.WriteString(strings.TrimRight(line.String(), " "))
		if (i+1)%b == 0 && i < scale-1 {
			sb.WriteString("\n   " + strings.Repeat("- ", 2*(scale-1)))
		}
	}
	return sb.String()
}

// sudokuBoxSide is the sub-box side, the square root of a valid scale.
func sudokuBoxSide(scale int) int {
	b := 1
	for (b+1)*(b+1) <= scale {
		b++
	}
	return b
}

// sudokuNewGrid returns an empty scale x scale grid.
func sudokuNewGrid(scale int) [][]int {
	grid := make([][]int, scale)
	for i := range grid {
		grid[i] = make([]int, scale)
	}
	return grid
}

// sudokuCloneGrid deep-copies a grid so that later writes stay private.
func sudokuCloneGrid(grid [][]int) [][]int {
	out := make([][]int, len(grid))
	for i, row := range grid {
		out[i] = slices.Clone(row)
	}
	return out
}

// sudokuCountEmpty counts the empty (0) cells of a grid.
func sudokuCountEmpty(grid [][]int) int {
	n := 0
	for _, row := range grid {
		for _, d := range row {
			if d == 0 {
				n++
			}
		}
	}
	return n
}

// Instructions renders GEM's instruction text for the current scale; it has
// no random example.
func (g *sudoku) Instructions() string {
	title := ""
	if g.s.Scale == 4 {
		title = "A simple version of"
	}
	return fmt.Sprintf(sudokuInstructions, title, g.s.Scale)
}

// Snapshot returns the state as a JSON object with the keys of sudokuState.
func (g *sudoku) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, a bool and int grids
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state. Restoring a board
// does not recompute init_num_empty: give it too when it changes.
func (g *sudoku) Restore(state json.RawMessage) error {
	return restoreState(sudokuFamily, &g.s, state, nil)
}

// fromState lays state over the constructor's state. The board must be
// given; the solution defaults to the board's only completion. For a drawn
// size, scale is the board's, and clues and max_turns are what the -random
// draw pairs with it. init_num_empty is the board's empty cells when the
// state is the start of an episode (turn_count absent or 0); later, the
// board may hold placements, so it must be given.
func (g *sudoku) fromState(state json.RawMessage) (Info, error) {
	if err := startState(sudokuFamily, &g.s, g.s.Random, state); err != nil {
		return nil, err
	}
	return g.Info(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its size at reset.
func (s *sudokuState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if !has(obj, "board") {
		return errMissing("board", "it is the puzzle")
	}
	if drawn && !has(obj, "scale") {
		s.Scale = len(s.Board)
	}
	if err := sudokuCheckBoard(s.Board, s.Scale); err != nil {
		return fmt.Errorf("board: %w", err)
	}
	if drawn {
		i := slices.IndexFunc(sudokuRandomDraws[:], func(d [3]int) bool { return d[0] == s.Scale })
		switch {
		case i >= 0:
			if !has(obj, "clues") {
				s.Clues = sudokuRandomDraws[i][1]
			}
			if !has(obj, "max_turns") {
				s.MaxTurns = sudokuRandomDraws[i][2]
			}
		case !has(obj, "max_turns"):
			return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with scale %d", s.Scale))
		case !has(obj, "clues"):
			// Only the generator reads clues; the puzzle given is what it would have made.
			s.Clues = sudokuCountEmpty(s.Board)
		}
	}
	if !has(obj, "solution") {
		// The solver needs a valid size (the board was checked above).
		if err := sudokuCheckParams(s.Scale, s.Clues, s.MaxTurns); err != nil {
			return err
		}
		switch sudokuCountSolutions(s.Board, 2) {
		case 0:
			return errors.New("board: has no completion, so no solution can be derived from it")
		case 1:
			s.Solution = sudokuSolve(s.Board)
		default:
			return errMissing("solution", "the board has more than one completion")
		}
	}
	if !has(obj, "init_num_empty") {
		if s.TurnCount != 0 {
			return errMissing("init_num_empty", fmt.Sprintf(
				"with turn_count %d the board may hold placements, so it cannot tell how many cells were empty at the start", s.TurnCount))
		}
		s.InitNumEmpty = sudokuCountEmpty(s.Board)
	}
	return nil
}

// sudokuCheckBoard checks that board is scale rows of scale cells, each
// empty (0) or a digit 1..scale.
func sudokuCheckBoard(board [][]int, scale int) error {
	if err := sudokuCheckShape(board, scale); err != nil {
		return err
	}
	for r, row := range board {
		for c, d := range row {
			if d < 0 || d > scale {
				return fmt.Errorf("R%d C%d holds %d, want 0 (empty) to %d", r+1, c+1, d, scale)
			}
		}
	}
	return nil
}

// sudokuSolve returns the first completion of grid, which must have one
// (sudokuCountSolutions(grid, 1) == 1), filling the most constrained empty
// cell first. grid is not modified.
func sudokuSolve(grid [][]int) [][]int {
	out := sudokuCloneGrid(grid)
	scale := len(out)
	var solve func() bool
	solve = func() bool {
		bestR, bestC, bestN := -1, -1, scale+1
		var bestDigits []int
		for r := range scale {
			for c := range scale {
				if out[r][c] != 0 {
					continue
				}
				var digits []int
				for d := 1; d <= scale; d++ {
					if sudokuIsSafe(out, r, c, d) {
						digits = append(digits, d)
					}
				}
				if len(digits) < bestN {
					bestR, bestC, bestN, bestDigits = r, c, len(digits), digits
				}
			}
		}
		if bestR < 0 {
			return true // no empty cell left
		}
		for _, d := range bestDigits {
			out[bestR][bestC] = d
			if solve() {
				return true
			}
		}
		out[bestR][bestC] = 0
		return false
	}
	solve()
	return out
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s sudokuState) overlay(obj map[string]json.RawMessage) (sudokuState, error) {
	next := s
	// Decode into fresh grids: decoding must not write into the live ones.
	next.Solution = sudokuCloneGrid(s.Solution)
	next.Board = sudokuCloneGrid(s.Board)
	fields := map[string]any{
		"scale":          &next.Scale,
		"clues":          &next.Clues,
		"max_turns":      &next.MaxTurns,
		"solution":       &next.Solution,
		"board":          &next.Board,
		"init_num_empty": &next.InitNumEmpty,
		"turn_count":     &next.TurnCount,
		"random":         &next.Random,
	}
	if err := restoreFields(sudokuFamily, obj, fields); err != nil {
		return sudokuState{}, err
	}
	return next, nil
}

// validate checks the invariants Step, rendering and Instructions rely on,
// naming the offending key.
func (s *sudokuState) validate() error {
	if err := sudokuCheckParams(s.Scale, s.Clues, s.MaxTurns); err != nil {
		return err
	}
	if s.TurnCount < 0 {
		return errTurnCount(s.TurnCount)
	}
	if err := sudokuCheckShape(s.Solution, s.Scale); err != nil {
		return fmt.Errorf("solution: %w", err)
	}
	if err := sudokuCheckShape(s.Board, s.Scale); err != nil {
		return fmt.Errorf("board: %w", err)
	}
	for r, row := range s.Solution {
		for c, d := range row {
			if d < 1 || d > s.Scale {
				return fmt.Errorf("solution: R%d C%d holds %d, want 1 to %d", r+1, c+1, d, s.Scale)
			}
		}
	}
	if sudokuCountSolutions(s.Solution, 1) != 1 {
		return fmt.Errorf("solution: repeats a digit in a row, column or sub-grid")
	}
	// GEM only ever fills a cell with its solution digit.
	for r, row := range s.Board {
		for c, d := range row {
			if d != 0 && d != s.Solution[r][c] {
				return fmt.Errorf("board: R%d C%d holds %d, but the solution has %d", r+1, c+1, d, s.Solution[r][c])
			}
		}
	}
	if empty := sudokuCountEmpty(s.Board); s.InitNumEmpty < empty || s.InitNumEmpty > s.Scale*s.Scale {
		return fmt.Errorf("init_num_empty: must be in [%d, %d] (the board's empty cells to all cells), got %d",
			empty, s.Scale*s.Scale, s.InitNumEmpty)
	}
	return nil
}

// sudokuCheckShape checks that grid is scale rows of scale cells.
func sudokuCheckShape(grid [][]int, scale int) error {
	if len(grid) != scale {
		return fmt.Errorf("has %d rows, want %d", len(grid), scale)
	}
	for r, row := range grid {
		if len(row) != scale {
			return fmt.Errorf("row %d has %d cells, want %d", r+1, len(row), scale)
		}
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (g *sudoku) Turn() int { return g.s.TurnCount }

// MaxTurns is the current turn limit (the first candidate's before the first
// Reset of a drawn variant).
func (g *sudoku) MaxTurns() int { return g.s.MaxTurns }
