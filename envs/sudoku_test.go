package envs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	sudokuEasy   = "game:Sudoku-v0-easy"
	sudokuHard   = "game:Sudoku-v0-hard"
	sudokuRandom = "game:Sudoku-v0-random"

	sudokuNoMove = "You did not provide a valid guess."
	sudokuWin    = "Congratulations! You have completed the Sudoku puzzle!"
)

var sudokuIDs = []string{sudokuEasy, sudokuHard, sudokuRandom}

// sudokuSD is the hidden state of every GEM transcript: what the Python
// generator produced for reset(seed=5) on the easy config.
const sudokuSD = `{"solution": [[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,1,4,2]],
	"board": [[0,3,0,4],[0,0,3,1],[4,0,0,0],[0,0,4,2]], "init_num_empty": 9}`

// sudokuNinth is the reward for one correct placement on the SD board.
const sudokuNinth = 0.1111111111111111

// sudokuSDFixtures gives the id, constructor overrides and hidden state each
// GEM transcript was produced with.
var sudokuSDFixtures = map[string]struct{ id, opts, state string }{
	"sd-1.jsonl": {sudokuEasy, "", sudokuSD},
	"sd-2.jsonl": {sudokuEasy, "", sudokuSD},
	"sd-3.jsonl": {sudokuEasy, `{"max_turns": 3}`, sudokuSD},
}

// TestSudokuFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestSudokuFixtures(t *testing.T) {
	replayFixtures(t, "sudoku", sudokuSDFixtures, func(t *testing.T, fc struct{ id, opts, state string }, reset fixtureReset) Env {
		env := newTestEnv(t, fc.id, fc.opts, fc.state)
		// Reset's info is the suffix of the restored board.
		if got := env.(*sudoku).Info(); !maps.Equal(got, reset.Info) {
			t.Errorf("reset info:\n got %q\nwant %q", got, reset.Info)
		}
		return env
	})
}

func sudokuBox(r, c, n int) string { return fmt.Sprintf(`\boxed{%d %d %d}`, r, c, n) }

func sudokuPlaced(turn int, n, r, c string) string {
	return fmt.Sprintf("At turn %d, you placed %s at R%s C%s, which is correct.", turn, n, r, c)
}

func sudokuOutOfBounds(turn int, n, r, c string) string {
	return fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which is out of bounds.", turn, n, r, c)
}

func sudokuFilled(turn int, n, r, c string) string {
	return fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which is already filled. You cannot overwrite pre-filled cells.", turn, n, r, c)
}

func sudokuViolates(turn int, n, r, c string) string {
	return fmt.Sprintf("At turn %d, you tried to place %s at R%s C%s, which violates Sudoku rules.", turn, n, r, c)
}

// sudokuSDMoves are the nine correct placements of the SD board, in order.
var sudokuSDMoves = [][3]int{{1, 1, 1}, {1, 3, 2}, {2, 1, 2}, {2, 2, 4}, {3, 2, 2}, {3, 3, 1}, {3, 4, 3}, {4, 1, 3}, {4, 2, 1}}

// TestSudokuBranches covers every branch of Step on the SD board (15 turns).
func TestSudokuBranches(t *testing.T) {
	var solveAll []step
	for i, m := range sudokuSDMoves {
		obs := sudokuPlaced(i+1, fmt.Sprint(m[2]), fmt.Sprint(m[0]), fmt.Sprint(m[1]))
		solveAll = append(solveAll, step{sudokuBox(m[0], m[1], m[2]), obs, sudokuNinth, false, false})
	}
	solveAll[8] = step{sudokuBox(4, 2, 1), sudokuWin, sudokuNinth, true, false}
	atTurn := func(turn int) string { return fmt.Sprintf(`{"turn_count": %d}`, turn) }
	tests := []struct {
		name, opts, state string
		steps             []step
	}{
		{name: "solve", steps: solveAll},
		{name: "out of bounds on each axis", steps: []step{
			{sudokuBox(0, 1, 1), sudokuOutOfBounds(1, "1", "0", "1"), 0, false, false},
			{sudokuBox(1, 0, 1), sudokuOutOfBounds(2, "1", "1", "0"), 0, false, false},
			{sudokuBox(1, 1, 0), sudokuOutOfBounds(3, "0", "1", "1"), 0, false, false},
			{sudokuBox(5, 1, 1), sudokuOutOfBounds(4, "1", "5", "1"), 0, false, false},
			{sudokuBox(1, 5, 1), sudokuOutOfBounds(5, "1", "1", "5"), 0, false, false},
			{sudokuBox(1, 1, 5), sudokuOutOfBounds(6, "5", "1", "1"), 0, false, false},
			// Bounds are checked before the cell: a given with an out-of-range digit.
			{sudokuBox(1, 2, 9), sudokuOutOfBounds(7, "9", "1", "2"), 0, false, false},
		}},
		{name: "numbers printed canonically", steps: []step{
			{`\boxed{007 0001 99999999999999999999999}`, sudokuOutOfBounds(1, "99999999999999999999999", "7", "1"), 0, false, false},
			{`\boxed{01 01 01}`, sudokuPlaced(2, "1", "1", "1"), sudokuNinth, false, false},
		}},
		{name: "filled given and filled placement", steps: []step{
			{sudokuBox(1, 2, 3), sudokuFilled(1, "3", "1", "2"), 0, false, false},
			{sudokuBox(1, 2, 1), sudokuFilled(2, "1", "1", "2"), 0, false, false},
			{sudokuBox(1, 1, 1), sudokuPlaced(3, "1", "1", "1"), sudokuNinth, false, false},
			{sudokuBox(1, 1, 1), sudokuFilled(4, "1", "1", "1"), 0, false, false},
		}},
		{name: "violates compares with the hidden solution only", steps: []step{
			// 1 at R3 C2 clashes with nothing visible (row 4 . . ., column 3 . . ., box 4 . / . .), yet the solution has 2.
			{sudokuBox(3, 2, 1), sudokuViolates(1, "1", "3", "2"), 0, false, false},
			{sudokuBox(1, 1, 2), sudokuViolates(2, "2", "1", "1"), 0, false, false},
			{sudokuBox(1, 1, 1), sudokuPlaced(3, "1", "1", "1"), sudokuNinth, false, false},
		}},
		{name: "format error mid-game", steps: []step{
			{sudokuBox(1, 1, 1), sudokuPlaced(1, "1", "1", "1"), sudokuNinth, false, false},
			{`\boxed{1,3,2}`, sudokuNoMove, -0.1, true, false},
		}},
		{name: "format error on the last turn", state: atTurn(14), steps: []step{
			{`\boxed{1 3}`, sudokuNoMove, -0.1, true, true},
		}},
		{name: "turn limit on out of bounds", state: atTurn(14), steps: []step{
			{sudokuBox(9, 9, 9), turnLimitMessage, 0, true, true},
		}},
		{name: "turn limit on filled", state: atTurn(14), steps: []step{
			{sudokuBox(1, 2, 3), turnLimitMessage, 0, true, true},
		}},
		{name: "turn limit on violates", state: atTurn(14), steps: []step{
			{sudokuBox(1, 1, 4), turnLimitMessage, 0, true, true},
		}},
		{name: "turn limit on a correct placement keeps its reward", state: atTurn(14), steps: []step{
			{sudokuBox(1, 1, 1), turnLimitMessage, sudokuNinth, true, true},
		}},
		{name: "win on the last turn beats the limit", state: `{"turn_count": 14,
			"board": [[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,0,4,2]]}`, steps: []step{
			{sudokuBox(4, 2, 1), sudokuWin, sudokuNinth, true, false},
		}},
		{name: "reward is 1/init_num_empty", state: `{"init_num_empty": 10}`, steps: []step{
			{sudokuBox(1, 1, 1), sudokuPlaced(1, "1", "1", "1"), 0.1, false, false},
		}},
		{name: "max_turns override", opts: `{"max_turns": 2}`, steps: []step{
			{sudokuBox(1, 1, 1), sudokuPlaced(1, "1", "1", "1"), sudokuNinth, false, false},
			{sudokuBox(1, 1, 1), turnLimitMessage, 0, true, true},
		}},
		// GEM does not guard against stepping after done; neither do we.
		{name: "after done keeps counting", opts: `{"max_turns": 10}`, state: `{"turn_count": 8}`, steps: []step{
			{"", sudokuNoMove, -0.1, true, false},
			{sudokuBox(1, 1, 1), turnLimitMessage, sudokuNinth, true, true},
			{sudokuBox(1, 1, 1), turnLimitMessage, 0, true, true}, // still ">= max_turns"
			{"", sudokuNoMove, -0.1, true, false},                 // "== max_turns" no longer holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, sudokuEasy, tt.opts, sudokuSD)
			if tt.state != "" {
				mustRestore(t, env, tt.state)
			}
			play(t, env, env.(*sudoku).Info, tt.steps)
		})
	}
}

// TestSudokuParsing covers the action parser through Step: GEM's regex
// semantics (last match, exactly one Python whitespace between numbers,
// Unicode digits, case) and Python int() conversion, on the SD board.
func TestSudokuParsing(t *testing.T) {
	big4300 := "1" + strings.Repeat("0", 4299)
	placed := sudokuPlaced(1, "1", "1", "1")
	tests := []struct {
		name, action, obs string
	}{
		{"plain", `\boxed{1 1 1}`, placed},
		{"arabic-indic", `\boxed{١ ١ ١}`, placed},
		{"mathematical bold", `\boxed{𝟏 𝟏 𝟏}`, placed},
		{"fullwidth and mixed", `\boxed{１ 1 ١}`, placed},
		{"leading zeros", `\boxed{001 01 0001}`, placed},
		{"tab", "\\boxed{1\t1\t1}", placed},
		{"newline", "\\boxed{1\n1\r1}", placed},
		{"vertical tab and form feed", "\\boxed{1\v1\f1}", placed},
		{"information separators", "\\boxed{1\x1c1\x1f1}", placed},
		{"next line", "\\boxed{1\u00851\u00a01}", placed},
		{"ogham and en quad", "\\boxed{1\u16801\u20001}", placed},
		{"hair and line separator", "\\boxed{1\u200a1\u20281}", placed},
		{"paragraph separator and narrow nbsp", "\\boxed{1\u20291\u202f1}", placed},
		{"math space and ideographic", "\\boxed{1\u205f1\u30001}", placed},
		{"zero width space is not whitespace", "\\boxed{1\u200b1 1}", sudokuNoMove},
		{"mongolian vowel separator is not whitespace", "\\boxed{1\u180e1 1}", sudokuNoMove},
		{"two spaces", `\boxed{1  1 1}`, sudokuNoMove},
		{"commas", `\boxed{1,1,1}`, sudokuNoMove},
		{"labels", `\boxed{R1 C1 1}`, sudokuNoMove},
		{"two numbers", `\boxed{1 1}`, sudokuNoMove},
		{"four numbers", `\boxed{1 1 1 1}`, sudokuNoMove},
		{"leading space", `\boxed{ 1 1 1}`, sudokuNoMove},
		{"trailing space", `\boxed{1 1 1 }`, sudokuNoMove},
		{"space before brace", `\boxed {1 1 1}`, sudokuNoMove},
		{"negative", `\boxed{1 1 -1}`, sudokuNoMove},
		{"superscript", `\boxed{1 1 ¹}`, sudokuNoMove},
		{"upper case", `\BOXED{1 1 1}`, sudokuNoMove},
		{"capitalised", `\Boxed{1 1 1}`, sudokuNoMove},
		{"no backslash", `boxed{1 1 1}`, sudokuNoMove},
		{"empty action", ``, sudokuNoMove},
		{"doubled backslash", `\\boxed{1 1 1}`, placed},
		{"inside math", `$\boxed{1 1 1}$.`, placed},
		{"last match wins", `\boxed{1 1 2} no, \boxed{1 1 1}`, placed},
		{"last match judged", `\boxed{1 1 1} no, \boxed{1 1 2}`, sudokuViolates(1, "2", "1", "1")},
		{"non-matching box skipped", `\boxed{1 1 1} then \boxed{1 1 x}`, placed},
		{"invalid utf-8", "\\boxed{1 1 1}\xff\\boxed{1 1 \xff}", placed},
		{"4300 digits", `\boxed{1 1 ` + big4300 + `}`, sudokuOutOfBounds(1, big4300, "1", "1")},
		{"4300 digits mostly zeros", `\boxed{` + strings.Repeat("0", 4299) + `1 1 1}`, placed},
		{"4300 multibyte digits", `\boxed{1 ` + strings.Repeat("٠", 4299) + `١ 1}`, placed},
		{"4301 digits in row", `\boxed{` + big4300 + `0 1 1}`, sudokuNoMove},
		{"4301 digits in col", `\boxed{1 ` + strings.Repeat("0", 4300) + `1 1}`, sudokuNoMove},
		{"4301 digits in num", `\boxed{1 1 ` + big4300 + `0}`, sudokuNoMove},
		{"last match too long", `\boxed{1 1 1} \boxed{1 1 ` + big4300 + `0}`, sudokuNoMove},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, sudokuEasy, "", sudokuSD).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %.80q, want %.80q", tt.action, got.Observation, tt.obs)
			}
		})
	}
}

// TestSudokuRender checks the 9x9 and 1x1 layouts (the 4x4 one is in the fixtures).
func TestSudokuRender(t *testing.T) {
	board := sudokuPlaceholder(9, 0, 1, false).Solution
	board[0][0], board[8][8], board[4][5] = 0, 0, 0
	want := strings.Join([]string{
		"   C1 C2 C3   C4 C5 C6   C7 C8 C9  ",
		"R1  .  2  3 |  4  5  6 |  7  8  9",
		"R2  4  5  6 |  7  8  9 |  1  2  3",
		"R3  7  8  9 |  1  2  3 |  4  5  6",
		"   - - - - - - - - - - - - - - - - ",
		"R4  2  3  4 |  5  6  7 |  8  9  1",
		"R5  5  6  7 |  8  9  . |  2  3  4",
		"R6  8  9  1 |  2  3  4 |  5  6  7",
		"   - - - - - - - - - - - - - - - - ",
		"R7  3  4  5 |  6  7  8 |  9  1  2",
		"R8  6  7  8 |  9  1  2 |  3  4  5",
		"R9  9  1  2 |  3  4  5 |  6  7  .",
	}, "\n")
	if got := sudokuRender(board); got != want {
		t.Errorf("9x9 board:\n%s\nwant\n%s", got, want)
	}
	if got, want := sudokuRender([][]int{{0}}), "   C1  \nR1  ."; got != want {
		t.Errorf("1x1 board %q, want %q", got, want)
	}
}

// TestSudokuInstructions checks the parts that depend on the scale; the 4x4
// text is checked byte for byte by the fixtures.
func TestSudokuInstructions(t *testing.T) {
	env := newTestEnv(t, sudokuHard, "", "")
	got := env.Instructions()
	for _, want := range []string{
		"You are playing  Sudoku.\nEach row is numbered from 1 to 9, and each column is also numbered from 1 to 9.\n",
		"3. Each of the nine 9x9 subgrids contains all digits from 1 to 9 without repetition.\n\n",
		`e.g. \boxed{1 1 5}.`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("9x9 instructions lack %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "Good luck!\n\n") {
		t.Errorf("instructions must end with a blank line: %q", got[len(got)-20:])
	}
	easy := strings.NewReplacer("to 4", "to 9", "4x4", "9x9", "A simple version of", "").Replace(newTestEnv(t, sudokuEasy, "", "").Instructions())
	if easy != got {
		t.Errorf("4x4 and 9x9 instructions differ beyond the scale and title:\n%s\n%s", easy, got)
	}
}

// sudokuPlainCount is GEM's solution counter: row-major backtracking, digits
// ascending, stopping at limit. The tests use it to check the fast counter.
func sudokuPlainCount(grid [][]int, limit int) int {
	scale := len(grid)
	for r := range scale {
		for c := range scale {
			if grid[r][c] != 0 {
				continue
			}
			n := 0
			for d := 1; d <= scale && n < limit; d++ {
				if sudokuIsSafe(grid, r, c, d) {
					grid[r][c] = d
					n += sudokuPlainCount(grid, limit-n)
					grid[r][c] = 0
				}
			}
			return n
		}
	}
	return 1
}

// sudokuSnapshotState decodes an env's snapshot.
func sudokuSnapshotState(t testing.TB, env Env) sudokuState {
	t.Helper()
	var s sudokuState
	if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSudokuGeneratedPuzzlesUnique checks, over many seeds, that every
// generated puzzle has exactly one solution, the hidden one, and that at
// most clues cells were emptied.
func TestSudokuGeneratedPuzzlesUnique(t *testing.T) {
	seeds := map[string]uint64{sudokuEasy: 2000, sudokuHard: 60}
	if testing.Short() {
		seeds = map[string]uint64{sudokuEasy: 200, sudokuHard: 10}
	}
	for _, id := range []string{sudokuEasy, sudokuHard} {
		t.Run(id, func(t *testing.T) {
			empties := map[int]int{}
			for seed := range seeds[id] {
				env := mustNew(t, id)
				env.Reset(NewRNG(seed))
				s := sudokuSnapshotState(t, env)
				if err := s.validate(); err != nil {
					t.Fatalf("seed %d: invalid state: %v", seed, err)
				}
				n := sudokuCountEmpty(s.Board)
				if n < 1 || n > s.Clues || s.InitNumEmpty != n {
					t.Fatalf("seed %d: %d empty cells, init_num_empty %d, clues %d", seed, n, s.InitNumEmpty, s.Clues)
				}
				empties[n]++
				if got := sudokuPlainCount(sudokuCloneGrid(s.Board), 2); got != 1 {
					t.Fatalf("seed %d: puzzle has %d solutions (capped at 2): %v", seed, got, s.Board)
				}
				if got := sudokuCountSolutions(s.Board, 2); got != 1 {
					t.Fatalf("seed %d: fast counter found %d solutions", seed, got)
				}
			}
			t.Logf("empty cells: %v", empties)
		})
	}
}

// TestSudokuCountSolutions checks the fast counter against GEM's plain one on
// puzzles with several solutions and with none. Their givens never clash, as
// in every grid GEM counts (a clash makes the fast counter return 0, which
// the solution check relies on, while GEM's counter ignores it).
func TestSudokuCountSolutions(t *testing.T) {
	rng := NewRNG(9)
	for i := range 300 {
		scale := 4
		if i%3 == 0 {
			scale = 9
		}
		grid := sudokuFillGrid(rng, scale)
		for range rng.IntN(scale * 3) {
			grid[rng.IntN(scale)][rng.IntN(scale)] = 0
		}
		// Sometimes plant a digit that clashes with nothing but may lead to a dead end.
		if r, c, d := rng.IntN(scale), rng.IntN(scale), 1+rng.IntN(scale); i%4 == 0 && grid[r][c] == 0 && sudokuIsSafe(grid, r, c, d) {
			grid[r][c] = d
		}
		for _, limit := range []int{1, 2, 5} {
			want := sudokuPlainCount(sudokuCloneGrid(grid), limit)
			if got := sudokuCountSolutions(grid, limit); got != want {
				t.Fatalf("grid %v limit %d: fast count %d, plain count %d", grid, limit, got, want)
			}
		}
	}
	if got := sudokuCountSolutions(sudokuNewGrid(4), 1000); got != 288 {
		t.Errorf("empty 4x4 grid has %d solutions, want 288", got)
	}
}

// TestSudokuRandomReset checks that the random variant draws only GEM's two
// parameter sets, both of them, and renders the drawn scale.
func TestSudokuRandomReset(t *testing.T) {
	seen := map[[3]int]int{}
	for seed := range uint64(200) {
		env := mustNew(t, sudokuRandom)
		obs, info := env.Reset(NewRNG(seed))
		s := sudokuSnapshotState(t, env)
		draw := [3]int{s.Scale, s.Clues, s.MaxTurns}
		if !slices.Contains(sudokuRandomDraws[:], draw) || env.MaxTurns() != s.MaxTurns || !s.Random {
			t.Fatalf("seed %d: drew %v (MaxTurns() %d)", seed, draw, env.MaxTurns())
		}
		if !strings.Contains(obs, fmt.Sprintf("the %dx%d grid", s.Scale, s.Scale)) || len(s.Board) != s.Scale ||
			strings.Count(info["suffix"], "\nR") != s.Scale {
			t.Fatalf("seed %d: reset does not show scale %d:\n%s\n%s", seed, s.Scale, obs, info["suffix"])
		}
		if err := s.validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		seen[draw]++
	}
	if len(seen) != 2 || seen[sudokuRandomDraws[0]] < 60 || seen[sudokuRandomDraws[1]] < 60 {
		t.Errorf("draws not spread: %v", seen)
	}
}

// sudokuSolverActions is a fixed action list mixing correct, wrong and
// malformed moves for a board.
func sudokuSolverActions(s sudokuState) []string {
	var acts []string
	for r := range s.Scale {
		for c := range s.Scale {
			if s.Board[r][c] == 0 {
				acts = append(acts, sudokuBox(r+1, c+1, s.Solution[r][c]%s.Scale+1)) // wrong unless scale 1
				acts = append(acts, sudokuBox(r+1, c+1, s.Solution[r][c]))
			} else {
				acts = append(acts, sudokuBox(r+1, c+1, s.Board[r][c]))
			}
		}
	}
	return acts
}

// TestSudokuSameSeed checks that a seed fixes the whole episode, for every id.
func TestSudokuSameSeed(t *testing.T) {
	for _, id := range sudokuIDs {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(_ uint64, a Env) []string { return sudokuSolverActions(sudokuSnapshotState(t, a)) })
			if len(distinct) < 10 {
				t.Errorf("only %d distinct episodes in 20 seeds", len(distinct))
			}
		})
	}
}

// TestSudokuSnapshotRoundTrip restores a mid-game snapshot into a fresh env
// and checks both behave identically from there on.
func TestSudokuSnapshotRoundTrip(t *testing.T) {
	for _, id := range sudokuIDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := newTestEnv(t, id, `{"max_turns": 200}`, "")
				a.Reset(NewRNG(seed))
				acts := sudokuSolverActions(sudokuSnapshotState(t, a))
				half := len(acts) / 2
				for _, act := range acts[:half] {
					a.Step(act)
				}

				b := newTestEnv(t, id, "", "")
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				for _, act := range append(acts[half:], `\boxed{1 1 1}`, "") {
					stepBoth(t, a, b, act)
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

func TestSudokuSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, sudokuEasy, "", sudokuSD)
	want := `{"scale":4,"clues":10,"max_turns":15,"solution":[[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,1,4,2]],` +
		`"board":[[0,3,0,4],[0,0,3,1],[4,0,0,0],[0,0,4,2]],"init_num_empty":9,"turn_count":0,"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(`\boxed{1 1 1}`)
	env.Step(`\boxed{1 3 4}`)
	want = `{"scale":4,"clues":10,"max_turns":15,"solution":[[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,1,4,2]],` +
		`"board":[[1,3,0,4],[0,0,3,1],[4,0,0,0],[0,0,4,2]],"init_num_empty":9,"turn_count":2,"random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, sudokuRandom)
}

func TestSudokuRestore(t *testing.T) {
	const solution9 = `[[1,2,3,4,5,6,7,8,9],[4,5,6,7,8,9,1,2,3],[7,8,9,1,2,3,4,5,6],[2,3,4,5,6,7,8,9,1],[5,6,7,8,9,1,2,3,4],` +
		`[8,9,1,2,3,4,5,6,7],[3,4,5,6,7,8,9,1,2],[6,7,8,9,1,2,3,4,5],[9,1,2,3,4,5,6,7,8]]`
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "turn count", state: `{"turn_count": 3}`, check: func(t *testing.T, env Env) {
			play(t, env, env.(*sudoku).Info, []step{{sudokuBox(1, 1, 1), sudokuPlaced(4, "1", "1", "1"), sudokuNinth, false, false}})
		}},
		{name: "scale change with grids", state: `{"scale": 9, "clues": 50, "solution": ` + solution9 + `, "board": ` +
			strings.Replace(solution9, "[1,2,3", "[0,2,3", 1) + `, "init_num_empty": 1}`, check: func(t *testing.T, env Env) {
			if !strings.Contains(env.Instructions(), "You are playing  Sudoku.") {
				t.Errorf("instructions: %s", env.Instructions())
			}
			play(t, env, env.(*sudoku).Info, []step{
				{sudokuBox(5, 9, 9), sudokuFilled(1, "9", "5", "9"), 0, false, false},
				{sudokuBox(1, 1, 1), sudokuWin, 1, true, false},
			})
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "scale without grids", state: `{"scale": 9}`, wantErr: "solution"},
		{name: "bad scale", state: `{"scale": 2}`, wantErr: "scale"},
		{name: "clues above cells", state: `{"clues": 17}`, wantErr: "clues"},
		{name: "negative clues", state: `{"clues": -1}`, wantErr: "clues"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "short solution", state: `{"solution": [[1,3,2,4],[2,4,3,1],[4,2,1,3]]}`, wantErr: "solution"},
		{name: "ragged board", state: `{"board": [[0,3,0,4],[0,0,3,1],[4,0,0],[0,0,4,2]]}`, wantErr: "board"},
		{name: "solution digit out of range", state: `{"solution": [[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,1,4,5]]}`, wantErr: "solution"},
		{name: "solution repeats", state: `{"solution": [[1,3,2,4],[2,4,3,1],[4,2,1,3],[3,1,2,4]]}`, wantErr: "solution"},
		{name: "solution box repeats", state: `{"solution": [[1,2,3,4],[2,3,4,1],[3,4,1,2],[4,1,2,3]]}`, wantErr: "solution"},
		{name: "board differs from solution", state: `{"board": [[2,3,0,4],[0,0,3,1],[4,0,0,0],[0,0,4,2]]}`, wantErr: "board"},
		{name: "init_num_empty below empties", state: `{"init_num_empty": 8}`, wantErr: "init_num_empty"},
		{name: "init_num_empty above cells", state: `{"init_num_empty": 17}`, wantErr: "init_num_empty"},
		{name: "string value", state: `{"turn_count": "3"}`, wantErr: "turn_count"},
		{name: "null value", state: `{"board": null}`, wantErr: "board"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"puzzle": []}`, wantErr: "puzzle"},
		{name: "not an object", state: `[7]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, sudokuEasy, "", sudokuSD)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

func TestSudokuRegistry(t *testing.T) {
	want := map[string]specWant{
		sudokuEasy:   {map[string]any{"scale": 4, "clues": 10, "max_turns": 15}, 15},
		sudokuHard:   {map[string]any{"scale": 9, "clues": 50, "max_turns": 50}, 50},
		sudokuRandom: {map[string]any{"scale": nil, "clues": nil, "max_turns": nil}, 0},
	}
	var got []string
	for _, s := range Specs() {
		if s.Family == "Sudoku" {
			got = append(got, s.ID)
		}
	}
	if !slices.Equal(got, sudokuIDs) {
		t.Fatalf("Sudoku ids %v, want %v", got, sudokuIDs)
	}
	wantSpecs(t, "Sudoku", "", want)
}

func TestSudokuNewOverrides(t *testing.T) {
	tests := []struct {
		name, id, opts string
		want           [3]int // scale, clues, max_turns; zero for a drawn set
	}{
		{name: "no opts", id: sudokuEasy, want: [3]int{4, 10, 15}},
		{name: "hard", id: sudokuHard, opts: `{}`, want: [3]int{9, 50, 50}},
		{name: "max_turns", id: sudokuEasy, opts: `{"max_turns": 3}`, want: [3]int{4, 10, 3}},
		{name: "fewer clues", id: sudokuHard, opts: `{"clues": 5}`, want: [3]int{9, 5, 50}},
		{name: "no clues", id: sudokuEasy, opts: `{"clues": 0}`, want: [3]int{4, 0, 15}},
		{name: "all cells", id: sudokuEasy, opts: `{"clues": 16}`, want: [3]int{4, 16, 15}},
		{name: "scale 1", id: sudokuEasy, opts: `{"scale": 1, "clues": 1}`, want: [3]int{1, 1, 15}},
		{name: "unknown keys ignored", id: sudokuEasy, opts: `{"seed": 3, "foo": "bar"}`, want: [3]int{4, 10, 15}},
		{name: "fixed set on the random id", id: sudokuRandom, opts: `{"scale": 4, "clues": 3, "max_turns": 7}`, want: [3]int{4, 3, 7}},
		{name: "null makes it random", id: sudokuHard, opts: `{"clues": null}`},
		{name: "one value stays random", id: sudokuRandom, opts: `{"scale": 4, "clues": 3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			s := sudokuSnapshotState(t, env)
			got := [3]int{s.Scale, s.Clues, s.MaxTurns}
			if tt.want == ([3]int{}) {
				if !s.Random || !slices.Contains(sudokuRandomDraws[:], got) {
					t.Errorf("want a drawn set, got %s", env.Snapshot())
				}
				return
			}
			if s.Random || got != tt.want || env.MaxTurns() != tt.want[2] {
				t.Errorf("state %s, want %v", env.Snapshot(), tt.want)
			}
			if err := s.validate(); err != nil {
				t.Error(err)
			}
			if n := sudokuCountEmpty(s.Board); n > s.Clues || n != s.InitNumEmpty {
				t.Errorf("%d empty cells for clues %d, init_num_empty %d", n, s.Clues, s.InitNumEmpty)
			}
		})
	}
}

func TestSudokuNewBadOption(t *testing.T) {
	tests := []badOption{
		{"string max_turns", sudokuEasy, `{"max_turns": "6"}`, "max_turns"},
		{"zero max_turns", sudokuEasy, `{"max_turns": 0}`, "max_turns"},
		{"non-square scale", sudokuEasy, `{"scale": 5}`, "scale"},
		{"scale 16", sudokuHard, `{"scale": 16}`, "scale"},
		{"clues above cells", sudokuEasy, `{"clues": 17}`, "clues"},
		{"negative clues", sudokuHard, `{"clues": -1}`, "clues"},
		{"fractional clues", sudokuHard, `{"clues": 2.5}`, "clues"},
		{"bad type on the random id", sudokuRandom, `{"scale": true}`, "scale"},
		{"not an object", sudokuEasy, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

// TestSudokuBeforeReset: an env used before Reset holds a valid, solved
// placeholder grid and must not panic.
func TestSudokuBeforeReset(t *testing.T) {
	for _, id := range sudokuIDs {
		env := mustNew(t, id)
		if err := env.Restore(env.Snapshot()); err != nil {
			t.Errorf("%s: placeholder state does not restore: %v", id, err)
		}
		_ = env.Instructions()
		r := env.Step(`\boxed{1 1 1}`)
		if want := sudokuFilled(1, "1", "1", "1"); r.Observation != want || r.Reward != 0 {
			t.Errorf("%s: %+v, want %q", id, r, want)
		}
		env.Step("x")
	}
}

// TestSudokuHugeAction steps a 1 MB action of near-misses, digits and spaces;
// the regexp engine is linear, so this must finish well within the deadline.
func TestSudokuHugeAction(t *testing.T) {
	actions := map[string]string{
		"near misses": strings.Repeat(`\boxed{1 1 `, hugeLen()/11),
		"digits":      `\boxed{` + strings.Repeat("7", hugeLen()),
		"spaces":      `\boxed{1` + strings.Repeat(" 1", 1<<19),
		"many moves":  strings.Repeat(`\boxed{1 1 2}`, hugeLen()/13) + `\boxed{1 1 1}`,
	}
	for name, action := range actions {
		env := newTestEnv(t, sudokuEasy, "", sudokuSD)
		r := stepWithin(t, env, action, time.Minute)
		want := sudokuNoMove
		if name == "many moves" {
			want = sudokuPlaced(1, "1", "1", "1")
		}
		if r.Observation != want {
			t.Errorf("%s: %q, want %q", name, r.Observation, want)
		}
	}
}

// FuzzSudokuStep feeds arbitrary action text to Step: it must never panic,
// the observation must be one of GEM's lines with its reward, and a parsed
// move must come from a box.
func FuzzSudokuStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{1 1 1}`, `\boxed{١ ١ ١}`, "\\boxed{1\u30001\u00851}", `\boxed{1  1 1}`, `\boxed{1,1,1}`,
		`\boxed{0 0 0}`, `\boxed{9 9 9}`, `\boxed{99999999999999999999 1 1}`, `\\boxed{2 2 4}`,
		`First \boxed{1 1 2}, actually \boxed{1 1 1}`, "\\boxed{1 1 1}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, sudokuIDs, which, seed)
		before := sudokuCountEmpty(sudokuSnapshotState(t, env).Board)
		for range 3 {
			r := env.Step(action)
			turn := env.Turn()
			prefix := fmt.Sprintf("At turn %d, you ", turn)
			switch {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), sudokuNoMove, ""):
			case r.Observation == sudokuWin:
				if r.Reward <= 0 || !r.Terminated || r.Truncated {
					t.Fatalf("win result %+v", r)
				}
			case strings.HasPrefix(r.Observation, prefix+"placed "):
				if r.Reward <= 0 || r.Reward > 1 || r.Terminated || r.Truncated {
					t.Fatalf("placement result %+v", r)
				}
			case strings.HasPrefix(r.Observation, prefix+"tried to place "):
				if r.Reward != 0 || r.Terminated || r.Truncated {
					t.Fatalf("invalid move result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", r.Observation)
			}
			if len(r.Info) != 1 || !strings.HasPrefix(r.Info["suffix"], "Here is the current board layout:\n") {
				t.Fatalf("info %q", r.Info)
			}
		}
		// The same action can fill at most one cell, and only on its first step.
		s := sudokuSnapshotState(t, env)
		if after := sudokuCountEmpty(s.Board); after < before-1 || after > before {
			t.Fatalf("empty cells went from %d to %d", before, after)
		}
		if err := s.validate(); err != nil {
			t.Fatalf("state after steps: %v", err)
		}
		row, col, num, ok := sudokuParseMove(action)
		if ok && (!strings.Contains(action, `\boxed{`) || strings.Trim(row+col+num, "0123456789") != "") {
			t.Fatalf("parsed %q %q %q from %q", row, col, num, action)
		}
	})
}
