package envs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	fifteenEasy   = "game:FifteenPuzzle-v0-easy"
	fifteenHard   = "game:FifteenPuzzle-v0-hard"
	fifteenRandom = "game:FifteenPuzzle-v0-random"

	fifteenWin = "Congratulations! You have solved the puzzle!"
)

var fifteenIDs = []string{fifteenEasy, fifteenHard, fifteenRandom}

func fifteenValid(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you made a valid move: %s.\n", turn, dir)
}

func fifteenOff(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you chose a move %s that is outside the bounds of the board.", turn, dir)
}

func fifteenNoGuess(turn int) string {
	return fmt.Sprintf("At turn %d, you did not provide a valid guess", turn)
}

func fifteenSuffix(board string) string {
	return "Here is the current board layout: \n" + board + "\nEnter your move."
}

func fifteenBox(dir string) string { return `\boxed{` + dir + `}` }

// fifteenStep is one action, the result GEM gives for it and the rendered
// board the suffix must show afterwards.
type fifteenStep struct {
	action, obs string
	reward      float64
	term, trunc bool
	board       string
}

// fifteenPlay applies each action and compares the whole StepResult.
func fifteenPlay(t *testing.T, env Env, steps []fifteenStep) {
	t.Helper()
	for i, s := range steps {
		got := env.Step(s.action)
		want := StepResult{Observation: s.obs, Reward: s.reward, Terminated: s.term, Truncated: s.trunc,
			Info: Info{"suffix": fifteenSuffix(s.board)}}
		if !sameResult(got, want) {
			t.Fatalf("step %d (%.60q):\n got %q\nwant %q", i+1, s.action, fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want))
		}
	}
}

// fifteenFixtureCases gives the id, constructor overrides and hidden start
// board each GEM transcript was produced with.
var fifteenFixtureCases = map[string]struct {
	id, opts, state string
}{
	"fp-01.jsonl": {fifteenEasy, "", `{"board": [[3, 1], [2, null]]}`},
	"fp-02.jsonl": {fifteenEasy, "", `{"board": [[2, 3], [1, null]]}`},
	"fp-03.jsonl": {fifteenEasy, `{"num_rows": 3, "max_turns": 3}`, `{"board": [[1, 2, 3], [4, 5, 6], [null, 7, 8]]}`},
}

// TestFifteenPuzzleFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestFifteenPuzzleFixtures(t *testing.T) {
	replayFixtures(t, "fifteen", fifteenFixtureCases, func(t *testing.T, fc struct{ id, opts, state string }, reset fixtureReset) Env {
		env := newTestEnv(t, fc.id, fc.opts, fc.state)
		if info := env.(*fifteenPuzzle).Info(); !maps.Equal(info, reset.Info) {
			t.Errorf("reset info = %q, want %q", info, reset.Info)
		}
		return env
	})
}

// TestFifteenPuzzleFixtureResets checks the easy transcripts' reset output as
// Reset itself returns it: the easy generator only makes their two boards, so
// some seed draws each.
func TestFifteenPuzzleFixtureResets(t *testing.T) {
	for _, name := range []string{"fp-01.jsonl", "fp-02.jsonl"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "fifteen", name))
			if err != nil {
				t.Fatal(err)
			}
			var reset struct {
				Reset struct {
					Observation string `json:"observation"`
					Info        Info   `json:"info"`
				} `json:"reset"`
			}
			decodeFixtureLine(t, bytes.SplitN(data, []byte("\n"), 2)[0], &reset)
			env := mustNew(t, fifteenEasy)
			for seed := range uint64(100) {
				obs, info := env.Reset(NewRNG(seed))
				if obs == reset.Reset.Observation && maps.Equal(info, reset.Reset.Info) {
					return
				}
			}
			t.Errorf("no seed in 0..99 reproduces the reset line %+v", reset.Reset)
		})
	}
}

// TestFifteenPuzzleBranches covers every branch of Step for every registered id.
func TestFifteenPuzzleBranches(t *testing.T) {
	const (
		easyStart  = `{"board": [[3, 1], [2, null]]}`
		easyNear   = `{"board": [[1, 2], [null, 3]]}`
		threeNear  = `{"board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`
		threeWrong = `{"board": [[8, 7, 6], [5, null, 3], [2, 1, 4]]}`
		hardNear   = `{"board": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, null, 15]]}`
	)
	tests := []struct {
		name, id, opts, state string
		steps                 []fifteenStep
	}{
		// game:FifteenPuzzle-v0-easy: 2x2, 10 turns.
		{name: "easy/solve", id: fifteenEasy, state: easyNear, steps: []fifteenStep{
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"},
		}},
		{name: "easy/every direction off the board and back", id: fifteenEasy, state: easyStart, steps: []fifteenStep{
			{fifteenBox("up"), fifteenOff(1, "up"), 0, false, false, " 3  1\n 2 __\n"},
			{fifteenBox("left"), fifteenOff(2, "left"), 0, false, false, " 3  1\n 2 __\n"},
			{fifteenBox("right"), fifteenValid(3, "right"), 0, false, false, " 3  1\n__  2\n"},
			{fifteenBox("right"), fifteenOff(4, "right"), 0, false, false, " 3  1\n__  2\n"},
			{fifteenBox("down"), fifteenValid(5, "down"), 0, false, false, "__  1\n 3  2\n"},
			{fifteenBox("down"), fifteenOff(6, "down"), 0, false, false, "__  1\n 3  2\n"},
			{fifteenBox("left"), fifteenValid(7, "left"), 0, false, false, " 1 __\n 3  2\n"},
			{fifteenBox("up"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"},
		}},
		{name: "easy/format error mid-game keeps the board", id: fifteenEasy, state: easyStart, steps: []fifteenStep{
			{fifteenBox("down"), fifteenValid(1, "down"), 0, false, false, " 3 __\n 2  1\n"},
			{`\boxed{Up}`, fifteenNoGuess(2), -0.1, true, false, " 3 __\n 2  1\n"},
		}},
		{name: "easy/format error on the last turn", id: fifteenEasy, state: `{"board": [[3, 1], [2, null]], "turn_count": 9}`, steps: []fifteenStep{
			{"up", fifteenNoGuess(10), -0.1, true, true, " 3  1\n 2 __\n"},
		}},
		{name: "easy/legal move on the last turn gets the soft score", id: fifteenEasy, state: `{"board": [[3, 1], [2, null]], "turn_count": 9}`, steps: []fifteenStep{
			{fifteenBox("right"), turnLimitMessage, 0, true, true, " 3  1\n__  2\n"},
		}},
		{name: "easy/off-board move on the last turn gets the soft score", id: fifteenEasy, state: `{"board": [[1, 2], [null, 3]], "turn_count": 9}`, steps: []fifteenStep{
			{fifteenBox("right"), turnLimitMessage, 0.5, true, true, " 1  2\n__  3\n"},
		}},
		{name: "easy/solve on the last turn beats the limit", id: fifteenEasy, state: `{"board": [[1, 2], [null, 3]], "turn_count": 9}`, steps: []fifteenStep{
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"},
		}},
		{name: "easy/max_turns override", id: fifteenEasy, opts: `{"max_turns": 2}`, state: easyNear, steps: []fifteenStep{
			{fifteenBox("down"), fifteenValid(1, "down"), 0, false, false, "__  2\n 1  3\n"},
			{fifteenBox("up"), turnLimitMessage, 0.5, true, true, " 1  2\n__  3\n"},
		}},

		// 3x3 by override, as in GEM's direct construction.
		{name: "3x3/soft score by repeated addition", id: fifteenEasy, opts: `{"num_rows": 3, "max_turns": 2}`, state: threeNear, steps: []fifteenStep{
			{fifteenBox("down"), fifteenValid(1, "down"), 0, false, false, " 1  2  3\n 4 __  6\n 7  5  8\n"},
			{fifteenBox("up"), turnLimitMessage, 0.7777777777777779, true, true, " 1  2  3\n 4  5  6\n 7 __  8\n"},
		}},
		{name: "3x3/off-board on the last turn", id: fifteenEasy, opts: `{"num_rows": 3, "max_turns": 1}`, state: threeNear, steps: []fifteenStep{
			{fifteenBox("up"), turnLimitMessage, 0.7777777777777779, true, true, " 1  2  3\n 4  5  6\n 7 __  8\n"},
		}},
		{name: "3x3/no cell right gives exactly zero", id: fifteenEasy, opts: `{"num_rows": 3, "max_turns": 1}`, state: threeWrong, steps: []fifteenStep{
			{fifteenBox("down"), turnLimitMessage, 0, true, true, " 8 __  6\n 5  7  3\n 2  1  4\n"},
		}},
		{name: "3x3/solve", id: fifteenEasy, opts: `{"num_rows": 3}`, state: threeNear, steps: []fifteenStep{
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2  3\n 4  5  6\n 7  8 __\n"},
		}},

		// game:FifteenPuzzle-v0-hard: 4x4, 50 turns.
		{name: "hard/two-digit tiles and the soft score", id: fifteenHard, state: `{"board": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, null, 15]], "turn_count": 48}`, steps: []fifteenStep{
			{fifteenBox("right"), fifteenValid(49, "right"), 0, false, false, " 1  2  3  4\n 5  6  7  8\n 9 10 11 12\n13 __ 14 15\n"},
			{fifteenBox("down"), turnLimitMessage, 0.75, true, true, " 1  2  3  4\n 5  6  7  8\n 9 __ 11 12\n13 10 14 15\n"},
		}},
		{name: "hard/solve", id: fifteenHard, state: hardNear, steps: []fifteenStep{
			{fifteenBox("up"), fifteenOff(1, "up"), 0, false, false, " 1  2  3  4\n 5  6  7  8\n 9 10 11 12\n13 14 __ 15\n"},
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2  3  4\n 5  6  7  8\n 9 10 11 12\n13 14 15 __\n"},
		}},
		{name: "hard/format error", id: fifteenHard, state: hardNear, steps: []fifteenStep{
			{`\boxed{ left}`, fifteenNoGuess(1), -0.1, true, false, " 1  2  3  4\n 5  6  7  8\n 9 10 11 12\n13 14 __ 15\n"},
		}},

		// game:FifteenPuzzle-v0-random after a reset that drew 3x3 and 20 turns.
		{name: "random/3x3 on the last turn", id: fifteenRandom, state: `{"num_rows": 3, "max_turns": 20, "turn_count": 19, "board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`, steps: []fifteenStep{
			{fifteenBox("right"), turnLimitMessage, 0.6666666666666667, true, true, " 1  2  3\n 4  5  6\n__  7  8\n"},
		}},
		{name: "random/solve", id: fifteenRandom, state: `{"num_rows": 3, "max_turns": 20, "board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`, steps: []fifteenStep{
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2  3\n 4  5  6\n 7  8 __\n"},
		}},

		// GEM does not guard against stepping after done; neither do we.
		{name: "after done/keeps counting", id: fifteenEasy, opts: `{"max_turns": 2}`, state: easyNear, steps: []fifteenStep{
			{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"},
			{fifteenBox("down"), turnLimitMessage, 0.5, true, true, " 1 __\n 3  2\n"},
			{fifteenBox("up"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"}, // a win still returns first
			{fifteenBox("up"), turnLimitMessage, 1, true, true, " 1  2\n 3 __\n"},
			{"none", fifteenNoGuess(5), -0.1, true, false, " 1  2\n 3 __\n"}, // "== max_turns" no longer holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fifteenPlay(t, newTestEnv(t, tt.id, tt.opts, tt.state), tt.steps)
		})
	}
}

// TestFifteenPuzzleParsing covers the action parser through Step, on the
// easy board [[1, 2], [__, 3]] where only "left" and "down" are legal.
func TestFifteenPuzzleParsing(t *testing.T) {
	tests := []struct {
		name, action, obs string
	}{
		{"plain", `\boxed{down}`, fifteenValid(1, "down")},
		{"in prose", `I will move the tile: $\boxed{down}$.`, fifteenValid(1, "down")},
		{"doubled backslash", `\\boxed{down}`, fifteenValid(1, "down")},
		{"last match wins", `\boxed{left} no, \boxed{down}`, fifteenValid(1, "down")},
		{"last match off the board", `\boxed{down} or \boxed{up}`, fifteenOff(1, "up")},
		{"non-matching box skipped", `\boxed{down} then \boxed{north}`, fifteenValid(1, "down")},
		{"adjacent boxes", `\boxed{down}\boxed{right}`, fifteenOff(1, "right")},
		{"invalid utf-8", "\\boxed{down}\xff\\boxed{\xff}", fifteenValid(1, "down")},
		{"solving move", `\boxed{left}`, fifteenWin},
		{"capitalised", `\boxed{Up}`, fifteenNoGuess(1)},
		{"upper case", `\boxed{DOWN}`, fifteenNoGuess(1)},
		{"upper-case command", `\BOXED{down}`, fifteenNoGuess(1)},
		{"dotless i", `\boxed{rıght}`, fifteenNoGuess(1)},
		{"fullwidth letters", `\boxed{ｄｏｗｎ}`, fifteenNoGuess(1)},
		{"space inside", `\boxed{ up}`, fifteenNoGuess(1)},
		{"trailing space inside", `\boxed{down }`, fifteenNoGuess(1)},
		{"non-breaking space inside", "\\boxed{\u00a0down}", fifteenNoGuess(1)},
		{"space before brace", `\boxed {down}`, fifteenNoGuess(1)},
		{"no backslash", `boxed{down}`, fifteenNoGuess(1)},
		{"quoted", `\boxed{'down'}`, fifteenNoGuess(1)},
		{"longer word", `\boxed{downward}`, fifteenNoGuess(1)},
		{"two words", `\boxed{up down}`, fifteenNoGuess(1)},
		{"double braces", `\boxed{{down}}`, fifteenNoGuess(1)},
		{"empty box", `\boxed{}`, fifteenNoGuess(1)},
		{"bare word", `down`, fifteenNoGuess(1)},
		{"empty action", ``, fifteenNoGuess(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, fifteenEasy, "", `{"board": [[1, 2], [null, 3]]}`).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %q, want %q", tt.action, got.Observation, tt.obs)
			}
		})
	}
}

// TestFifteenPuzzleInstructions checks the size-dependent title and the ten lines.
func TestFifteenPuzzleInstructions(t *testing.T) {
	for rows, n1 := range map[int]int{2: 3, 3: 8, 4: 15, 5: 24} {
		env := newTestEnv(t, fifteenEasy, fmt.Sprintf(`{"num_rows": %d}`, rows), "")
		got := env.Instructions()
		lines := strings.SplitAfter(got, "\n")
		if len(lines) != 11 || lines[10] != "" {
			t.Fatalf("%dx%d: want ten lines each ending in a newline, got %q", rows, rows, got)
		}
		want0 := fmt.Sprintf("You are playing the %d-Puzzle game.\n", n1)
		want1 := fmt.Sprintf("You have to arrange the numbered tiles in ascending order from 1 to %d, with the empty space located in the bottom-right corner.\n", n1)
		if lines[0] != want0 || lines[1] != want1 || lines[8] != "The current board layout is shown below\n" {
			t.Errorf("%dx%d: instructions %q", rows, rows, got)
		}
	}
}

// TestFifteenPuzzleRender covers the cell widths, including tiles of three digits.
func TestFifteenPuzzleRender(t *testing.T) {
	env := newTestEnv(t, fifteenEasy, `{"num_rows": 11, "mc_rand_moves": 0}`, "")
	lines := strings.Split(env.(*fifteenPuzzle).s.render(), "\n")
	if len(lines) != 12 || lines[11] != "" {
		t.Fatalf("want 11 rows each ending in a newline, got %q", lines)
	}
	if want := " 1  2  3  4  5  6  7  8  9 10 11"; lines[0] != want {
		t.Errorf("row 0 = %q, want %q", lines[0], want)
	}
	if want := "111 112 113 114 115 116 117 118 119 120 __"; lines[10] != want {
		t.Errorf("row 10 = %q, want %q", lines[10], want)
	}
}

// fifteenSolvable is the textbook solvability rule, independent of the
// generator's invariant: count inversions among the tiles; on an odd width
// they must be even, on an even width inversions plus the blank's row counted
// from the bottom (from 1) must be odd.
func fifteenSolvable(b fifteenBoard) bool {
	n := len(b)
	var tiles []int
	blankRowFromBottom := 0
	for r, row := range b {
		for _, v := range row {
			if v == 0 {
				blankRowFromBottom = n - r
			} else {
				tiles = append(tiles, v)
			}
		}
	}
	inv := 0
	for i := range tiles {
		for j := i + 1; j < len(tiles); j++ {
			if tiles[i] > tiles[j] {
				inv++
			}
		}
	}
	if n%2 == 1 {
		return inv%2 == 0
	}
	return (inv+blankRowFromBottom)%2 == 1
}

// fifteenReachable lists every board reachable from the n×n goal by slides,
// keyed by its row-major cells, by breadth-first search.
func fifteenReachable(n int) map[string]bool {
	start := make([]int, n*n)
	for i := range start {
		start[i] = (i + 1) % (n * n)
	}
	seen := map[string]bool{fifteenKey(start): true}
	queue := [][]int{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		b := slices.Index(cur, 0)
		for _, mv := range fifteenMoves {
			r, c := b/n+mv.dr, b%n+mv.dc
			if r < 0 || r >= n || c < 0 || c >= n {
				continue
			}
			next := slices.Clone(cur)
			next[b], next[r*n+c] = next[r*n+c], 0
			if k := fifteenKey(next); !seen[k] {
				seen[k] = true
				queue = append(queue, next)
			}
		}
	}
	return seen
}

func fifteenCells(b fifteenBoard) []int { return slices.Concat(b...) }

// fifteenKey is a compact map key for row-major cells of up to 5x5.
func fifteenKey(cells []int) string {
	b := make([]byte, len(cells))
	for i, v := range cells {
		b[i] = byte(v)
	}
	return string(b)
}

// TestFifteenPuzzleGeneratedSolvable checks that both generators only make
// solvable boards: against the full reachable set on 2x2 and 3x3, and the
// inversion rule on 4x4 and 5x5.
func TestFifteenPuzzleGeneratedSolvable(t *testing.T) {
	reachable := map[int]map[string]bool{2: fifteenReachable(2), 3: fifteenReachable(3)}
	if len(reachable[2]) != 12 || len(reachable[3]) != 181440 {
		t.Fatalf("reachable sets have %d and %d boards, want 12 and 181440", len(reachable[2]), len(reachable[3]))
	}
	seeds := uint64(500)
	if testing.Short() {
		seeds = 50
	}
	for _, algo := range []string{fifteenMonteCarlo, fifteenPureRandom} {
		for _, rows := range []int{2, 3, 4, 5} {
			env := newTestEnv(t, fifteenEasy, fmt.Sprintf(`{"num_rows": %d, "init_algo": %q}`, rows, algo), "")
			distinct := map[string]bool{}
			for seed := range seeds {
				env.Reset(NewRNG(seed))
				b := env.(*fifteenPuzzle).s.Board
				if err := env.(*fifteenPuzzle).s.validate(); err != nil {
					t.Fatalf("%s %dx%d seed %d: invalid board: %v", algo, rows, rows, seed, err)
				}
				k := fifteenKey(fifteenCells(b))
				if set, ok := reachable[rows]; ok && !set[k] {
					t.Fatalf("%s %dx%d seed %d: unreachable board %v", algo, rows, rows, seed, b)
				}
				if !fifteenSolvable(b) {
					t.Fatalf("%s %dx%d seed %d: unsolvable board %v", algo, rows, rows, seed, b)
				}
				distinct[k] = true
			}
			if rows > 2 && len(distinct) < int(seeds)/2 {
				t.Errorf("%s %dx%d: only %d distinct boards", algo, rows, rows, len(distinct))
			}
		}
	}
}

// TestFifteenPuzzleEasyBoards: on 2x2 the Monte Carlo walk can only end on
// two boards, and each comes up about half the time.
func TestFifteenPuzzleEasyBoards(t *testing.T) {
	env := newTestEnv(t, fifteenEasy, "", "")
	counts := map[string]int{}
	for seed := range uint64(2000) {
		env.Reset(NewRNG(seed))
		counts[fmt.Sprint(fifteenCells(env.(*fifteenPuzzle).s.Board))]++
	}
	a, b := counts["[3 1 2 0]"], counts["[2 3 1 0]"]
	if len(counts) != 2 || a < 800 || b < 800 {
		t.Errorf("easy boards %v, want [3 1 2 0] and [2 3 1 0] about equally", counts)
	}
}

// TestFifteenPuzzleParity checks GEM's invariant against the inversion rule
// on shuffled boards of both parities.
func TestFifteenPuzzleParity(t *testing.T) {
	rng := NewRNG(5)
	for _, n := range []int{2, 3, 4, 5} {
		both := map[int]bool{}
		for range 300 {
			cells := make([]int, n*n)
			for i := range cells {
				cells[i] = i
			}
			rng.Shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
			board := make(fifteenBoard, n)
			for r := range board {
				board[r] = cells[r*n : (r+1)*n]
			}
			p := fifteenParity(cells, n)
			if (p == 0) != fifteenSolvable(board) {
				t.Fatalf("%dx%d %v: parity %d but solvable %v", n, n, cells, p, fifteenSolvable(board))
			}
			both[p] = true
		}
		if len(both) != 2 {
			t.Errorf("%dx%d: only parity %v seen", n, n, both)
		}
	}
}

// TestFifteenPuzzleRandomReset checks the drawn size and turn limit over many seeds.
func TestFifteenPuzzleRandomReset(t *testing.T) {
	seen := map[[2]int]int{}
	env := newTestEnv(t, fifteenRandom, "", "")
	for seed := range uint64(600) {
		obs, info := env.Reset(NewRNG(seed))
		s := env.(*fifteenPuzzle).s
		pair := [2]int{s.NumRows, s.MaxTurns}
		if !slices.Contains(fifteenRandomCandidates[:], pair) || env.MaxTurns() != s.MaxTurns {
			t.Fatalf("seed %d: drew %v (MaxTurns() %d), not a candidate", seed, pair, env.MaxTurns())
		}
		if !strings.HasPrefix(obs, fmt.Sprintf("You are playing the %d-Puzzle game.\n", s.NumRows*s.NumRows-1)) {
			t.Fatalf("seed %d: instructions do not show the drawn size:\n%s", seed, obs)
		}
		if len(s.Board) != s.NumRows || !fifteenSolvable(s.Board) || s.TurnCount != 0 || !s.Random {
			t.Fatalf("seed %d: bad episode %s", seed, env.Snapshot())
		}
		if info["suffix"] != fifteenSuffix(s.render()) {
			t.Fatalf("seed %d: info %q", seed, info)
		}
		seen[pair]++
	}
	for _, c := range fifteenRandomCandidates {
		if seen[c] < 150 {
			t.Errorf("candidate %v drawn %d times in 600", c, seen[c])
		}
	}
}

// TestFifteenPuzzleSameSeed checks that a seed fixes the whole episode, for every id.
func TestFifteenPuzzleSameSeed(t *testing.T) {
	actions := []string{fifteenBox("down"), fifteenBox("right"), fifteenBox("up"), fifteenBox("left")}
	for _, id := range fifteenIDs {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(seed uint64, _ Env) []string {
				acts := make([]string, 60)
				for i := range acts {
					acts[i] = actions[(i*7+int(seed))%len(actions)]
				}
				return acts
			})
			if len(distinct) < 2 {
				t.Error("every seed gave the same episode")
			}
		})
	}
}

// TestFifteenPuzzleSnapshotRoundTrip restores a mid-game snapshot into a
// fresh env and checks both behave identically from there on.
func TestFifteenPuzzleSnapshotRoundTrip(t *testing.T) {
	actions := []string{fifteenBox("up"), fifteenBox("left"), fifteenBox("down"), fifteenBox("right")}
	for _, id := range fifteenIDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := newTestEnv(t, id, "", "")
				a.Reset(NewRNG(seed))
				a.Step(fifteenBox("down"))
				a.Step(fifteenBox("right"))

				b := newTestEnv(t, id, "", "")
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				for i := range 12 {
					act := actions[(i*3+int(seed))%len(actions)]
					stepBoth(t, a, b, act)
				}
				if !bytes.Equal(a.Snapshot(), b.Snapshot()) {
					t.Fatalf("states diverged:\n%s\n%s", a.Snapshot(), b.Snapshot())
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

// TestFifteenPuzzleSnapshotIsolated: stepping a restored env must not move
// the tiles of the env or the snapshot it came from.
func TestFifteenPuzzleSnapshotIsolated(t *testing.T) {
	a := newTestEnv(t, fifteenEasy, "", `{"board": [[1, 2], [null, 3]]}`)
	before := a.Snapshot()
	b := newTestEnv(t, fifteenEasy, "", "")
	if err := b.Restore(before); err != nil {
		t.Fatal(err)
	}
	b.Step(fifteenBox("down"))
	if after := a.Snapshot(); !bytes.Equal(after, before) {
		t.Errorf("stepping the copy changed the original:\n%s\n%s", before, after)
	}
}

func TestFifteenPuzzleSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, fifteenEasy, "", `{"board": [[3, 1], [2, null]]}`)
	want := `{"num_rows":2,"max_turns":10,"board":[[3,1],[2,null]],"turn_count":0,"init_algo":"monte_carlo","mc_rand_moves":100,"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(fifteenBox("down"))
	env.Step(fifteenBox("x"))
	want = `{"num_rows":2,"max_turns":10,"board":[[3,null],[2,1]],"turn_count":2,"init_algo":"monte_carlo","mc_rand_moves":100,"random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, fifteenRandom)
}

func TestFifteenPuzzleRestore(t *testing.T) {
	const base = `{"board": [[3, 1], [2, null]]}` // on -easy: 2x2, 10 turns
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "board only", state: `{"board": [[1, 2], [null, 3]]}`, check: func(t *testing.T, env Env) {
			fifteenPlay(t, env, []fifteenStep{{fifteenBox("left"), fifteenWin, 1, true, false, " 1  2\n 3 __\n"}})
		}},
		{name: "unsolvable board is still played", state: `{"board": [[2, 1], [3, null]]}`, check: func(t *testing.T, env Env) {
			fifteenPlay(t, env, []fifteenStep{{fifteenBox("down"), fifteenValid(1, "down"), 0, false, false, " 2 __\n 3  1\n"}})
		}},
		{name: "size, turn limit and board", state: `{"num_rows": 3, "max_turns": 2, "turn_count": 1, "board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`, check: func(t *testing.T, env Env) {
			if env.MaxTurns() != 2 || env.Turn() != 1 || !strings.HasPrefix(env.Instructions(), "You are playing the 8-Puzzle game.\n") {
				t.Errorf("MaxTurns() = %d, Turn() = %d, instructions: %s", env.MaxTurns(), env.Turn(), env.Instructions())
			}
			fifteenPlay(t, env, []fifteenStep{{fifteenBox("down"), turnLimitMessage, 0.6666666666666667, true, true, " 1  2  3\n 4 __  6\n 7  5  8\n"}})
		}},
		{name: "generator settings", state: `{"init_algo": "pure_random", "mc_rand_moves": 0, "random": true}`, check: func(t *testing.T, env Env) {
			env.Reset(NewRNG(3))
			if s := env.(*fifteenPuzzle).s; s.InitAlgo != fifteenPureRandom || !s.Random || !fifteenSolvable(s.Board) {
				t.Errorf("state %s", env.Snapshot())
			}
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "size without board", state: `{"num_rows": 3}`, wantErr: "board"},
		{name: "num_rows one", state: `{"num_rows": 1, "board": [[null]]}`, wantErr: "num_rows"},
		{name: "num_rows too large", state: `{"num_rows": 101}`, wantErr: "num_rows"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "short row", state: `{"board": [[3, 1], [null]]}`, wantErr: "board"},
		{name: "null row", state: `{"board": [[3, 1], null]}`, wantErr: "board"},
		{name: "too many rows", state: `{"board": [[3, 1], [2, null], [4, 5]]}`, wantErr: "board"},
		{name: "tile out of range", state: `{"board": [[4, 1], [2, null]]}`, wantErr: "board"},
		{name: "negative tile", state: `{"board": [[-1, 1], [2, null]]}`, wantErr: "board"},
		{name: "zero tile", state: `{"board": [[0, 1], [2, null]]}`, wantErr: "board"},
		{name: "tile twice", state: `{"board": [[1, 1], [2, null]]}`, wantErr: "board"},
		{name: "two blanks", state: `{"board": [[null, 1], [2, null]]}`, wantErr: "board"},
		{name: "no blank", state: `{"board": [[3, 1], [2, 1]]}`, wantErr: "board"},
		{name: "string tile", state: `{"board": [["3", 1], [2, null]]}`, wantErr: "board"},
		{name: "null board", state: `{"board": null}`, wantErr: "board"},
		{name: "bad init_algo", state: `{"init_algo": "bfs"}`, wantErr: "init_algo"},
		{name: "negative mc_rand_moves", state: `{"mc_rand_moves": -1}`, wantErr: "mc_rand_moves"},
		{name: "fractional value", state: `{"max_turns": 7.5}`, wantErr: "max_turns"},
		{name: "null value", state: `{"max_turns": null}`, wantErr: "max_turns"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"tiles": []}`, wantErr: "tiles"},
		{name: "not an object", state: `[1]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, fifteenEasy, "", base)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

func TestFifteenPuzzleSpecs(t *testing.T) {
	want := map[string]specWant{
		fifteenEasy:   {map[string]any{"num_rows": 2, "max_turns": 10}, 10},
		fifteenHard:   {map[string]any{"num_rows": 4, "max_turns": 50}, 50},
		fifteenRandom: {map[string]any{"num_rows": nil, "max_turns": nil}, 0},
	}
	wantSpecs(t, "FifteenPuzzle", "", want)
	for _, id := range IDs() {
		if strings.HasPrefix(id, "game:FifteenPuzzle") && !slices.Contains(fifteenIDs, id) {
			t.Errorf("unexpected id %s", id)
		}
	}
}

func TestFifteenPuzzleOptions(t *testing.T) {
	tests := []struct {
		name, id, opts    string
		wantRandom        bool
		wantRows, wantMax int
		wantAlgo          string
		wantMoves         int
		wantSolvedAtReset bool
	}{
		{name: "no opts", id: fifteenEasy, wantRows: 2, wantMax: 10, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "hard", id: fifteenHard, opts: `{}`, wantRows: 4, wantMax: 50, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "max_turns", id: fifteenEasy, opts: `{"max_turns": 3}`, wantRows: 2, wantMax: 3, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "num_rows", id: fifteenHard, opts: `{"num_rows": 3}`, wantRows: 3, wantMax: 50, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "unknown keys ignored", id: fifteenEasy, opts: `{"seed": 3, "foo": "bar"}`, wantRows: 2, wantMax: 10, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "no random moves starts solved", id: fifteenHard, opts: `{"mc_rand_moves": 0}`, wantRows: 4, wantMax: 50, wantAlgo: fifteenMonteCarlo, wantSolvedAtReset: true},
		{name: "pure_random", id: fifteenHard, opts: `{"init_algo": "pure_random"}`, wantRows: 4, wantMax: 50, wantAlgo: fifteenPureRandom, wantMoves: 100},
		{name: "null max_turns makes it random", id: fifteenEasy, opts: `{"max_turns": null}`, wantRandom: true, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "null num_rows makes it random", id: fifteenHard, opts: `{"num_rows": null}`, wantRandom: true, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "fixed size on the random id", id: fifteenRandom, opts: `{"num_rows": 3, "max_turns": 7}`, wantRows: 3, wantMax: 7, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
		{name: "one value stays random", id: fifteenRandom, opts: `{"num_rows": 3}`, wantRandom: true, wantAlgo: fifteenMonteCarlo, wantMoves: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			s := env.(*fifteenPuzzle).s
			if s.Random != tt.wantRandom || s.InitAlgo != tt.wantAlgo || s.MCRandMoves != tt.wantMoves {
				t.Fatalf("state %s", env.Snapshot())
			}
			if tt.wantRandom {
				if pair := [2]int{s.NumRows, s.MaxTurns}; !slices.Contains(fifteenRandomCandidates[:], pair) {
					t.Errorf("drew %v, not a candidate", pair)
				}
				return
			}
			if s.NumRows != tt.wantRows || s.MaxTurns != tt.wantMax || env.MaxTurns() != tt.wantMax || len(s.Board) != tt.wantRows {
				t.Errorf("state %s, want %dx%d and %d turns", env.Snapshot(), tt.wantRows, tt.wantRows, tt.wantMax)
			}
			if s.solved() != tt.wantSolvedAtReset {
				t.Errorf("board %v solved = %v", s.Board, s.solved())
			}
		})
	}
}

func TestFifteenPuzzleBadOption(t *testing.T) {
	tests := []badOption{
		{"string max_turns", fifteenEasy, `{"max_turns": "6"}`, "max_turns"},
		{"zero max_turns", fifteenEasy, `{"max_turns": 0}`, "max_turns"},
		{"one row", fifteenEasy, `{"num_rows": 1}`, "num_rows"},
		{"too many rows", fifteenHard, `{"num_rows": 1000000}`, "num_rows"},
		{"fractional num_rows", fifteenHard, `{"num_rows": 2.5}`, "num_rows"},
		{"bad type on the random id", fifteenRandom, `{"num_rows": "x"}`, "num_rows"},
		{"unknown init_algo", fifteenEasy, `{"init_algo": "bfs"}`, "init_algo"},
		{"null init_algo", fifteenEasy, `{"init_algo": null}`, "init_algo"},
		{"negative mc_rand_moves", fifteenEasy, `{"mc_rand_moves": -1}`, "mc_rand_moves"},
		{"huge mc_rand_moves", fifteenEasy, `{"mc_rand_moves": 1e12}`, "mc_rand_moves"},
		{"string mc_rand_moves", fifteenEasy, `{"mc_rand_moves": "100"}`, "mc_rand_moves"},
		{"not an object", fifteenEasy, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

// TestFifteenPuzzleBeforeReset: like GEM's constructor, New leaves a playable
// (solved) board, so Step before the first Reset works.
func TestFifteenPuzzleBeforeReset(t *testing.T) {
	for _, id := range fifteenIDs {
		env := mustNew(t, id)
		if err := env.(*fifteenPuzzle).s.validate(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		r := env.Step(fifteenBox("down"))
		if r.Observation != fifteenValid(1, "down") {
			t.Errorf("%s: %+v", id, r)
		}
	}
}

// TestFifteenPuzzleHugeAction steps a 1 MB action, full of near-misses and
// matches, within a generous deadline.
func TestFifteenPuzzleHugeAction(t *testing.T) {
	actions := map[string]string{
		"near misses": strings.Repeat(`\boxed{dow`, hugeLen()/10),
		"matches":     strings.Repeat(`\boxed{up}`, hugeLen()/10) + `\boxed{down}`,
		"backslashes": strings.Repeat(`\`, hugeLen()),
	}
	for name, action := range actions {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, fifteenEasy, "", `{"board": [[1, 2], [null, 3]]}`)
			r := stepWithin(t, env, action, time.Minute)
			want := fifteenNoGuess(1)
			if name == "matches" {
				want = fifteenValid(1, "down")
			}
			if r.Observation != want {
				t.Errorf("observation %q, want %q", r.Observation, want)
			}
		})
	}
}

// FuzzFifteenPuzzleStep feeds arbitrary action text to Step: it must never
// panic, the observation must be one of GEM's lines, the reward must fit the
// branch, and the board must stay a permutation.
func FuzzFifteenPuzzleStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{up}`, `\boxed{down}`, `\boxed{left}`, `\boxed{right}`, `\\boxed{up}`, `\boxed{Up}`, `\boxed{ up}`,
		`\boxed{left} then \boxed{right}`, `\BOXED{down}`, "\\boxed{up}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, fifteenIDs, which, seed)
		// Step past the turn limit to reach every branch, including the permissive after-done ones.
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn := env.Turn()
			switch {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), fifteenNoGuess(turn), turnLimitMessage):
			case r.Observation == fifteenWin:
				if r.Reward != 1 || !r.Terminated || r.Truncated {
					t.Fatalf("win result %+v", r)
				}
			case strings.HasPrefix(r.Observation, fmt.Sprintf("At turn %d, you ", turn)):
				if r.Reward != 0 || r.Terminated || r.Truncated {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", r.Observation)
			}
			s := env.(*fifteenPuzzle).s
			if err := s.validate(); err != nil {
				t.Fatalf("state after step: %v", err)
			}
			if r.Info["suffix"] != fifteenSuffix(s.render()) || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
		}
		// A move needs a lower-case boxed direction.
		if m, ok := fifteenParse(action); ok && !strings.Contains(action, fifteenBox(fifteenMoves[m].name)) {
			t.Fatalf("parsed %q from %q", fifteenMoves[m].name, action)
		}
	})
}
