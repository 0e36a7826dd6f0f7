package envs

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	game2048EasyID    = "game:Game2048-v0-easy"
	game2048HardID    = "game:Game2048-v0-hard"
	game2048ExtremeID = "game:Game2048-v0-extreme-hard"
	game2048RandomID  = "game:Game2048-v0-random"
)

var game2048IDs = []string{game2048EasyID, game2048HardID, game2048ExtremeID, game2048RandomID}

// game2048FixtureCases gives the hidden state each GEM transcript was produced with.
var game2048FixtureCases = map[string]struct {
	id, opts, state string
}{
	"g2048-1.jsonl": {game2048RandomID, "", `{"target_tile": 16, "max_turns": 20, "board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]],
		"example": "left", "spawns": [[0,1,4],[0,1,4],[0,0,4],[0,3,4],[1,0,2],[3,3,2]]}`},
	"g2048-2.jsonl": {game2048EasyID, "", `{"board": [[2,4,2,4],[4,2,4,2],[2,4,2,4],[0,8,16,8]], "example": "up", "spawns": [[3,3,2]]}`},
	"g2048-3.jsonl": {game2048EasyID, `{"max_turns": 2}`, `{"board": [[2,0,0,0],[2,0,0,0],[0,0,0,0],[0,0,0,0]],
		"example": "down", "spawns": [[3,3,2],[0,0,2]]}`},
	"g2048-4.jsonl": {game2048EasyID, "", `{"board": [[2,0,0,0],[2,0,0,0],[0,0,0,0],[0,0,0,0]], "example": "down"}`},
}

// TestGame2048Fixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestGame2048Fixtures(t *testing.T) {
	replayFixtures(t, "game2048", game2048FixtureCases, func(t *testing.T, fc struct{ id, opts, state string }, reset fixtureReset) Env {
		env := newTestEnv(t, fc.id, fc.opts, fc.state)
		// The reset info is the board, which the restore replaced.
		if got := env.(*game2048).Info(); !maps.Equal(got, reset.Info) {
			t.Errorf("reset info = %q, want %q", got, reset.Info)
		}
		return env
	})
}

// game2048Step is one action, the result GEM gives for it and, when board is
// set, the board after it.
type game2048Step struct {
	action      string
	obs         string
	reward      float64
	term, trunc bool
	board       [][]int
}

// game2048Play applies each action and compares the result, the info's
// rendering of the board, and the board where one is given.
func game2048Play(t *testing.T, env Env, steps []game2048Step) {
	t.Helper()
	g := env.(*game2048)
	for i, s := range steps {
		got := env.Step(s.action)
		if got.Observation != s.obs || got.Reward != s.reward || got.Terminated != s.term || got.Truncated != s.trunc {
			t.Fatalf("step %d (%.60q):\n got %q %v %v %v\nwant %q %v %v %v", i+1, s.action,
				got.Observation, got.Reward, got.Terminated, got.Truncated, s.obs, s.reward, s.term, s.trunc)
		}
		if want := "Current board:\n" + game2048Render(g.s.Board) + "\nEnter your move."; got.Info["suffix"] != want || len(got.Info) != 1 {
			t.Fatalf("step %d: info %q, want suffix %q", i+1, got.Info, want)
		}
		if s.board != nil && !slices.EqualFunc(g.s.Board, s.board, slices.Equal) {
			t.Fatalf("step %d: board %v, want %v", i+1, g.s.Board, s.board)
		}
	}
}

func game2048Moved(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you moved %s", turn, dir)
}

func game2048NoChange(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you chose move '%s' which doesn't change the board state. Try a different direction.", turn, dir)
}

func game2048NoMove(turn int) string {
	return fmt.Sprintf(`At turn %d, you did not provide a valid move. Please use \boxed{direction} format.`, turn)
}

func game2048Won(target, turn int) string {
	return fmt.Sprintf("Congratulations! You reached the %d tile in %d turns!", target, turn)
}

func game2048Limit(maxTurns int) string {
	return fmt.Sprintf("You have reached the maximum number of turns (%d).", maxTurns)
}

const game2048Over = "Game over! No more moves possible."

// game2048Full is a board with no move left once (3,0) is filled with a 2.
const game2048Full = `[[2,4,2,4],[4,2,4,2],[2,4,2,4],[0,8,16,8]]`

// TestGame2048Branches covers every branch of Step.
func TestGame2048Branches(t *testing.T) {
	z := []int{0, 0, 0, 0}
	tests := []struct {
		name, id, opts, state string
		steps                 []game2048Step
	}{
		{name: "slide without merge, scripted spawn", id: game2048EasyID,
			state: `{"board": [[0,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[3,3,4]]}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Moved(1, "left"), 0, false, false, [][]int{{2, 0, 0, 0}, z, z, {0, 0, 0, 4}}},
			}},
		{name: "merge 2 to 4 on easy is 1/5", id: game2048EasyID,
			state: `{"board": [[2,0,2,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[1,1,2]]}`, steps: []game2048Step{
				{`\boxed{right}`, game2048Moved(1, "right"), 0.2, false, false, [][]int{{0, 0, 0, 4}, {0, 2, 0, 0}, z, z}},
			}},
		{name: "hard denominator is 8", id: game2048HardID, state: `{"board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`,
			steps: []game2048Step{{`\boxed{left}`, game2048Moved(1, "left"), 0.125, false, false, nil}}},
		{name: "extreme-hard denominator is 10", id: game2048ExtremeID, state: `{"board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`,
			steps: []game2048Step{{`\boxed{left}`, game2048Moved(1, "left"), 0.1, false, false, nil}}},
		{name: "random draw 32/30 denominator is 4", id: game2048RandomID,
			state: `{"target_tile": 32, "max_turns": 30, "board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`,
			steps: []game2048Step{{`\boxed{left}`, game2048Moved(1, "left"), 0.25, false, false, nil}}},
		{name: "initial 4 shortens the scale", id: game2048EasyID, state: `{"board": [[4,4,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`,
			steps: []game2048Step{{`\boxed{left}`, game2048Moved(1, "left"), 0.25, false, false, nil}}}, // (3-2)/(6-2)
		{name: "two levels at once", id: game2048EasyID,
			state: `{"board": [[8,8,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 2, "init_max": 2}`,
			steps: []game2048Step{{`\boxed{left}`, game2048Moved(1, "left"), 0.6, false, false, nil}}}, // (4-1)/(6-1)
		{name: "spawned 4 is credited at the next valid move", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[3,3,4],[2,2,2]]}`, steps: []game2048Step{
				{`\boxed{right}`, game2048Moved(1, "right"), 0, false, false, [][]int{{0, 0, 0, 2}, z, z, {0, 0, 0, 4}}},
				{`\boxed{left}`, game2048Moved(2, "left"), 0.2, false, false, [][]int{{2, 0, 0, 0}, z, {0, 0, 2, 0}, {4, 0, 0, 0}}},
			}},
		{name: "no-op consumes a turn but no spawn", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[3,3,2]]}`, steps: []game2048Step{
				{`\boxed{left}`, game2048NoChange(1, "left"), 0, false, false, [][]int{{2, 0, 0, 0}, z, z, z}},
				{`\boxed{up}`, game2048NoChange(2, "up"), 0, false, false, nil},
				{`\boxed{down}`, game2048Moved(3, "down"), 0, false, false, [][]int{z, z, z, {2, 0, 0, 2}}},
			}},
		{name: "target reached: reward capped at target", id: game2048EasyID, opts: `{"target_tile": 16}`,
			state: `{"board": [[16,16,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 2, "init_max": 2}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Won(16, 1), 1, true, false, nil}, // m = min(32, 16): (4-1)/(4-1)
			}},
		{name: "max tile already at target: first valid move wins with 0", id: game2048EasyID, opts: `{"target_tile": 16}`,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 16, "init_max": 2}`, steps: []game2048Step{
				{`\boxed{left}`, game2048NoChange(1, "left"), 0, false, false, nil},
				{`\boxed{right}`, game2048Won(16, 2), 0, true, false, nil},
			}},
		{name: "win on the last turn beats the turn limit", id: game2048EasyID, opts: `{"target_tile": 8}`,
			state: `{"board": [[4,4,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "turn_count": 49}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Won(8, 50), 1, true, false, nil},
			}},
		{name: "game over", id: game2048EasyID, state: `{"board": ` + game2048Full + `, "spawns": [[3,3,2]]}`, steps: []game2048Step{
			{`\boxed{left}`, game2048Over, 0, true, false, [][]int{{2, 4, 2, 4}, {4, 2, 4, 2}, {2, 4, 2, 4}, {8, 16, 8, 2}}},
		}},
		{name: "game over with a reward", id: game2048EasyID,
			state: `{"board": [[2,4,2,4],[4,2,4,2],[2,4,2,4],[8,8,2,8]], "spawns": [[3,3,2]]}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Over, 0.3333333333333333, true, false, // (4-3)/(6-3): init_max is 8
					[][]int{{2, 4, 2, 4}, {4, 2, 4, 2}, {2, 4, 2, 4}, {16, 2, 8, 2}}},
			}},
		{name: "game over on the last turn beats the turn limit", id: game2048EasyID,
			state: `{"board": ` + game2048Full + `, "spawns": [[3,3,2]], "turn_count": 49}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Over, 0, true, false, nil},
			}},
		{name: "turn limit keeps the step's reward", id: game2048EasyID, opts: `{"max_turns": 1}`,
			state: `{"board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Limit(1), 0.2, true, true, nil},
			}},
		{name: "turn limit on a no-op move", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "turn_count": 49}`, steps: []game2048Step{
				{`\boxed{left}`, game2048Limit(50), 0, true, true, nil},
			}},
		{name: "turn limit on the quirky right", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "turn_count": 49}`, steps: []game2048Step{
				{`\boxed{rİght}`, game2048Limit(50), 0, true, true, nil},
			}},
		{name: "format error mid-game", id: game2048EasyID, state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`,
			steps: []game2048Step{
				{`\boxed{down}`, game2048Moved(1, "down"), 0, false, false, nil},
				{`move up`, game2048NoMove(2), -0.1, true, false, nil},
			}},
		{name: "format error on the last turn", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "turn_count": 49}`, steps: []game2048Step{
				{``, game2048NoMove(50), -0.1, true, true, [][]int{{2, 0, 0, 0}, z, z, z}},
			}},
		{name: "after done: keeps counting", id: game2048EasyID, opts: `{"max_turns": 2}`,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[0,0,2],[0,0,2]]}`, steps: []game2048Step{
				{`\boxed{right}`, game2048Moved(1, "right"), 0, false, false, nil},
				{`\boxed{right}`, game2048Limit(2), 0.2, true, true, nil},
				{`\boxed{left}`, game2048Limit(2), 0, true, true, nil},   // still ">= max_turns"
				{`\boxed{x}`, game2048NoMove(4), -0.1, true, false, nil}, // "== max_turns" no longer holds
			}},
		{name: "scripted spawn on a tile is dropped for a drawn one", id: game2048EasyID,
			state: `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[0,3,4],[1,1,4]]}`, steps: []game2048Step{
				{`\boxed{right}`, game2048Moved(1, "right"), 0, false, false, nil},
			}},
		{name: "5x5 board", id: game2048EasyID, opts: `{"board_size": 5}`,
			state: `{"board": [[2,0,0,0,2],[0,0,0,0,0],[0,0,0,0,0],[0,0,0,0,0],[0,0,0,0,0]], "spawns": [[4,4,2]]}`,
			steps: []game2048Step{
				{`\boxed{right}`, game2048Moved(1, "right"), 0.2, false, false,
					[][]int{{0, 0, 0, 0, 4}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 2}}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			game2048Play(t, newTestEnv(t, tt.id, tt.opts, tt.state), tt.steps)
		})
	}
}

// TestGame2048ScriptedSpawnDropped: the dropped entry is consumed and the
// drawn spawn lands on an empty cell.
func TestGame2048ScriptedSpawnDropped(t *testing.T) {
	env := newTestEnv(t, game2048EasyID, "", `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[0,3,4],[1,1,4]]}`)
	env.Step(`\boxed{right}`)
	s := env.(*game2048).s
	if !slices.Equal(s.Spawns[0], []int{1, 1, 4}) || len(s.Spawns) != 1 || s.SpawnCount != 1 {
		t.Fatalf("spawns %v, spawn_count %d", s.Spawns, s.SpawnCount)
	}
	if s.Board[0][3] != 2 || game2048TileCount(s.Board) != 2 {
		t.Errorf("board %v: want the 2 kept at (0, 3) and one drawn tile", s.Board)
	}
}

func game2048TileCount(board [][]int) int {
	n := 0
	for _, row := range board {
		for _, v := range row {
			if v != 0 {
				n++
			}
		}
	}
	return n
}

// TestGame2048Parsing covers the action parser through Step, on a board where
// every direction moves the tile.
func TestGame2048Parsing(t *testing.T) {
	const state = `{"board": [[0,0,0,0],[0,2,0,0],[0,0,0,0],[0,0,0,0]]}`
	tests := []struct{ name, action, obs string }{
		{"up", `\boxed{up}`, game2048Moved(1, "up")},
		{"down", `\boxed{down}`, game2048Moved(1, "down")},
		{"left", `\boxed{left}`, game2048Moved(1, "left")},
		{"right", `\boxed{right}`, game2048Moved(1, "right")},
		{"upper-case word", `\boxed{RIGHT}`, game2048Moved(1, "right")},
		{"upper-case BOXED", `\BOXED{Down}`, game2048Moved(1, "down")},
		{"mixed case", `\BoXeD{LeFt}`, game2048Moved(1, "left")},
		{"doubled backslash", `\\boxed{up}`, game2048Moved(1, "up")},
		{"inside text", `I will move $\boxed{up}$ now.`, game2048Moved(1, "up")},
		{"last match wins", `\boxed{up}, no: \boxed{down}`, game2048Moved(1, "down")},
		{"non-matching box skipped", `\boxed{left} then \boxed{north}`, game2048Moved(1, "left")},
		{"invalid utf-8", "\\boxed{up}\xff\\boxed{\xff}", game2048Moved(1, "up")},
		{"dotted capital I", `\boxed{rİght}`, game2048NoChange(1, "ri\u0307ght")},
		{"dotted capital I, upper case", `\BOXED{RİGHT}`, game2048NoChange(1, "ri\u0307ght")},
		{"dotless i", `\boxed{rıght}`, game2048NoChange(1, "rıght")},
		{"dotless i, upper case", `\boxed{RıGHT}`, game2048NoChange(1, "rıght")},
		{"quirk as the last match", `\boxed{up} \boxed{rıght}`, game2048NoChange(1, "rıght")},
		{"unknown word", `\boxed{north}`, game2048NoMove(1)},
		{"space inside", `\boxed{ up}`, game2048NoMove(1)},
		{"trailing space inside", `\boxed{up }`, game2048NoMove(1)},
		{"space before brace", `\boxed {up}`, game2048NoMove(1)},
		{"no backslash", `boxed{up}`, game2048NoMove(1)},
		{"double braces", `\boxed{{up}}`, game2048NoMove(1)},
		{"longer word", `\boxed{upward}`, game2048NoMove(1)},
		{"fullwidth letters", `\boxed{ｕｐ}`, game2048NoMove(1)},
		{"dotted capital I elsewhere", `\boxed{İeft}`, game2048NoMove(1)},
		{"empty box", `\boxed{}`, game2048NoMove(1)},
		{"bare word", `up`, game2048NoMove(1)},
		{"empty action", ``, game2048NoMove(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, game2048EasyID, "", state).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %q, want %q", tt.action, got.Observation, tt.obs)
			}
		})
	}
}

// TestGame2048SlideLine covers GEM's merge rule on single lines.
func TestGame2048SlideLine(t *testing.T) {
	tests := []struct{ in, want []int }{
		{[]int{2, 2, 2, 2}, []int{4, 4, 0, 0}},
		{[]int{4, 4, 8, 0}, []int{8, 8, 0, 0}},
		{[]int{0, 2, 0, 2}, []int{4, 0, 0, 0}},
		{[]int{2, 2, 4, 4}, []int{4, 8, 0, 0}},
		{[]int{8, 0, 8, 8}, []int{16, 8, 0, 0}},
		{[]int{4, 2, 2, 0}, []int{4, 4, 0, 0}},
		{[]int{2, 2, 2, 0}, []int{4, 2, 0, 0}},
		{[]int{2, 4, 2, 4}, []int{2, 4, 2, 4}},
		{[]int{0, 0, 0, 4}, []int{4, 0, 0, 0}},
		{[]int{0, 0, 0, 0}, []int{0, 0, 0, 0}},
		{[]int{2, 2, 2, 2, 2}, []int{4, 4, 2, 0, 0}},
	}
	for _, tt := range tests {
		if got := game2048SlideLine(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("game2048SlideLine(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestGame2048SlideDirections checks that each direction slides toward its edge.
func TestGame2048SlideDirections(t *testing.T) {
	board := [][]int{
		{2, 2, 0, 4},
		{0, 2, 0, 4},
		{2, 0, 0, 8},
		{2, 0, 4, 8},
	}
	want := map[string][][]int{
		"left":  {{4, 4, 0, 0}, {2, 4, 0, 0}, {2, 8, 0, 0}, {2, 4, 8, 0}},
		"right": {{0, 0, 4, 4}, {0, 0, 2, 4}, {0, 0, 2, 8}, {0, 2, 4, 8}},
		"up":    {{4, 4, 4, 8}, {2, 0, 0, 16}, {0, 0, 0, 0}, {0, 0, 0, 0}},
		"down":  {{0, 0, 0, 0}, {0, 0, 0, 0}, {2, 0, 0, 8}, {4, 4, 4, 16}},
	}
	before := cloneRows(board)
	for _, dir := range game2048Directions {
		got, moved := game2048Slide(board, dir)
		if !moved || !slices.EqualFunc(got, want[dir], slices.Equal) {
			t.Errorf("%s: %v (moved %v), want %v", dir, got, moved, want[dir])
		}
	}
	if !slices.EqualFunc(board, before, slices.Equal) {
		t.Errorf("slide changed its input: %v", board)
	}
	if _, moved := game2048Slide(board, "ri\u0307ght"); moved {
		t.Error("an unknown direction moved the board")
	}
}

// game2048Line reads line i of board in the order dir slides it toward index 0.
func game2048Line(board [][]int, dir string, i int) []int {
	n := len(board)
	line := make([]int, n)
	for k := range n {
		switch dir {
		case "left":
			line[k] = board[i][k]
		case "right":
			line[k] = board[i][n-1-k]
		case "up":
			line[k] = board[k][i]
		case "down":
			line[k] = board[n-1-k][i]
		}
	}
	return line
}

// game2048MergesOnce reports whether out can come from in by sliding toward
// index 0 with each tile merging at most once: the tiles of in split, in
// order, into single tiles and equal pairs whose sums are the tiles of out,
// followed only by empty cells.
func game2048MergesOnce(in, out []int) bool {
	var tiles []int
	for _, v := range in {
		if v != 0 {
			tiles = append(tiles, v)
		}
	}
	i, j := 0, 0
	for ; j < len(out) && out[j] != 0; j++ {
		switch {
		case i < len(tiles) && tiles[i] == out[j]:
			i++
		case i+1 < len(tiles) && tiles[i] == tiles[i+1] && 2*tiles[i] == out[j]:
			i += 2
		default:
			return false
		}
	}
	for ; j < len(out); j++ {
		if out[j] != 0 {
			return false
		}
	}
	return i == len(tiles)
}

// TestGame2048MergesAtMostOnce is the property test: over many random boards
// of every size and every direction, each tile merges at most once, the tile
// sum is kept, and "moved" means "changed".
func TestGame2048MergesAtMostOnce(t *testing.T) {
	rng := NewRNG(11)
	values := []int{0, 0, 2, 2, 2, 4, 4, 8} // many equal neighbours
	for range 5000 {
		n := 2 + rng.IntN(4)
		board := game2048EmptyBoard(n)
		sum := 0
		for _, row := range board {
			for c := range row {
				row[c] = values[rng.IntN(len(values))]
				sum += row[c]
			}
		}
		for _, dir := range game2048Directions {
			next, moved := game2048Slide(board, dir)
			nextSum := 0
			for i := range n {
				in, out := game2048Line(board, dir, i), game2048Line(next, dir, i)
				if !game2048MergesOnce(in, out) {
					t.Fatalf("%s on %v: line %v became %v", dir, board, in, out)
				}
				for _, v := range out {
					nextSum += v
				}
			}
			if nextSum != sum {
				t.Fatalf("%s on %v: sum %d became %d", dir, board, sum, nextSum)
			}
			if changed := !slices.EqualFunc(board, next, slices.Equal); moved != changed {
				t.Fatalf("%s on %v: moved %v but changed %v", dir, board, moved, changed)
			}
		}
	}
	if game2048MergesOnce([]int{2, 2, 4, 0}, []int{8, 0, 0, 0}) {
		t.Error("the property check accepts a double merge")
	}
}

// TestGame2048SpawnsDuringPlay plays random episodes: after every valid move
// the board is the slide plus exactly one new 2 or 4 on an empty cell, and
// the 4s are about a tenth of all spawns.
func TestGame2048SpawnsDuringPlay(t *testing.T) {
	spawns, fours := 0, 0
	for seed := range uint64(200) {
		env := newTestEnv(t, game2048ExtremeID, "", "")
		env.Reset(NewRNG(seed))
		g := env.(*game2048)
		rng := NewRNG(seed + 1)
		for range env.MaxTurns() {
			before := cloneRows(g.s.Board)
			dir := game2048Directions[rng.IntN(4)]
			slid, moved := game2048Slide(before, dir)
			r := env.Step(`\boxed{` + dir + `}`)
			if !moved {
				if !slices.EqualFunc(g.s.Board, before, slices.Equal) {
					t.Fatalf("seed %d: a no-op move changed the board", seed)
				}
			} else {
				added := 0
				for i, row := range g.s.Board {
					for j, v := range row {
						if v == slid[i][j] {
							continue
						}
						if slid[i][j] != 0 || (v != 2 && v != 4) {
							t.Fatalf("seed %d: cell (%d, %d) went from %d to %d", seed, i, j, slid[i][j], v)
						}
						added++
						spawns++
						if v == 4 {
							fours++
						}
					}
				}
				if added != 1 {
					t.Fatalf("seed %d: %d tiles spawned", seed, added)
				}
			}
			if r.Done() {
				break
			}
		}
	}
	if spawns < 5000 || fours < spawns/20 || fours > spawns*3/20 {
		t.Errorf("%d fours in %d spawns, want about 10%%", fours, spawns)
	}
}

func TestGame2048Render(t *testing.T) {
	board := [][]int{{2, 16, 128, 2048}, {16384, 131072, 0, 0}, {0, 0, 0, 0}, {4, 0, 0, 8}}
	want := "   2   16  128 2048\n16384 131072    .    .\n   .    .    .    .\n   4    .    .    8"
	if got := game2048Render(board); got != want {
		t.Errorf("render:\n%s\nwant\n%s", got, want)
	}
}

// TestGame2048RandomReset checks the drawn parameters and initial boards over many seeds.
func TestGame2048RandomReset(t *testing.T) {
	configs := map[[2]int]int{}
	examples := map[string]int{}
	tiles, fours := 0, 0
	for seed := range uint64(3000) {
		env := newTestEnv(t, game2048RandomID, "", "")
		obs, info := env.Reset(NewRNG(seed))
		s := env.(*game2048).s
		c := [2]int{s.TargetTile, s.MaxTurns}
		if !slices.Contains(game2048RandomConfigs, c) || env.MaxTurns() != s.MaxTurns || !s.Random {
			t.Fatalf("seed %d: drew %v (MaxTurns() %d)", seed, c, env.MaxTurns())
		}
		configs[c]++
		examples[s.Example]++
		if game2048TileCount(s.Board) != 2 || s.MaxTile != game2048Largest(s.Board) || s.InitMax != s.MaxTile ||
			s.TurnCount != 0 || len(s.Spawns) != 0 || s.SpawnCount != 0 {
			t.Fatalf("seed %d: not a fresh episode: %s", seed, env.Snapshot())
		}
		for _, row := range s.Board {
			for _, v := range row {
				if v != 0 && v != 2 && v != 4 {
					t.Fatalf("seed %d: initial tile %d", seed, v)
				}
				if v != 0 {
					tiles++
				}
				if v == 4 {
					fours++
				}
			}
		}
		head := fmt.Sprintf("reach the %d tile by sliding and merging tiles.\nYou have %d turns maximum.\n", s.TargetTile, s.MaxTurns)
		if !strings.Contains(obs, head) || !strings.HasSuffix(obs, `For example: \boxed{`+s.Example+"}\n\n") {
			t.Fatalf("seed %d: instructions do not show the drawn values:\n%s", seed, obs)
		}
		if info["suffix"] != "Current board:\n"+game2048Render(s.Board)+"\nEnter your move." {
			t.Fatalf("seed %d: info %q", seed, info)
		}
	}
	if len(configs) != 3 || len(examples) != 4 {
		t.Errorf("draws not spread: configs %v, examples %v", configs, examples)
	}
	for c, k := range configs {
		if k < 800 {
			t.Errorf("config %v drawn %d times of 3000", c, k)
		}
	}
	if fours < tiles/20 || fours > tiles*3/20 {
		t.Errorf("%d fours in %d initial tiles, want about 10%%", fours, tiles)
	}
}

// TestGame2048SameSeed checks that a seed fixes the whole episode, drawn spawns included, for every id.
func TestGame2048SameSeed(t *testing.T) {
	for _, id := range game2048IDs {
		t.Run(id, func(t *testing.T) {
			distinct := map[string]bool{}
			for seed := range uint64(20) {
				a, b := resetPair(t, id, seed)
				distinct[string(a.Snapshot())] = true
				acts := make([]string, 60)
				for i := range acts {
					acts[i] = `\boxed{` + game2048Directions[i*7%4] + `}`
				}
				stepBothUntilDone(t, a, b, acts)
				distinct[string(a.Snapshot())] = true
			}
			if len(distinct) < 20 {
				t.Errorf("only %d distinct states from 20 seeds", len(distinct))
			}
		})
	}
}

// TestGame2048SnapshotRoundTrip restores a mid-game snapshot into a fresh env
// and checks both behave identically from there on, drawn spawns included.
func TestGame2048SnapshotRoundTrip(t *testing.T) {
	for _, id := range game2048IDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := newTestEnv(t, id, "", "")
				a.Reset(NewRNG(seed))
				a.Step(`\boxed{left}`)
				a.Step(`\boxed{up}`)

				b := newTestEnv(t, id, "", "")
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				for i := range 40 {
					act := `\boxed{` + game2048Directions[(i*5+int(seed))%4] + `}`
					stepBoth(t, a, b, act)
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

func TestGame2048SnapshotKeys(t *testing.T) {
	env := newTestEnv(t, game2048EasyID, "",
		`{"board": [[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "example": "up", "spawn_seed": 5, "spawns": [[3,3,4]]}`)
	want := `{"target_tile":64,"max_turns":50,"board":[[2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]],"max_tile":2,"init_max":2,` +
		`"turn_count":0,"spawns":[[3,3,4]],"spawn_seed":5,"spawn_count":0,"example":"up","random":false}`
	wantSnapshot(t, env, "after restore", want)
	env.Step(`\boxed{left}`)
	want = `{"target_tile":64,"max_turns":50,"board":[[4,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,4]],"max_tile":4,"init_max":2,` +
		`"turn_count":1,"spawns":[],"spawn_seed":5,"spawn_count":1,"example":"up","random":false}`
	wantSnapshot(t, env, "after a step", want)
	wantRandomFlag(t, game2048RandomID)
}

func TestGame2048Restore(t *testing.T) {
	const base = `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "example": "up"}` // on -easy
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, s game2048State)
	}{
		{name: "board derives max_tile and init_max", state: `{"board": [[16,0,0,0],[0,0,0,0],[0,0,0,0],[0,4,0,0]]}`,
			check: func(t *testing.T, s game2048State) {
				if s.MaxTile != 16 || s.InitMax != 16 {
					t.Errorf("max_tile %d, init_max %d", s.MaxTile, s.InitMax)
				}
			}},
		{name: "explicit maxima win over derivation", state: `{"board": [[16,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 8}`,
			check: func(t *testing.T, s game2048State) {
				if s.MaxTile != 8 || s.InitMax != 2 {
					t.Errorf("max_tile %d, init_max %d", s.MaxTile, s.InitMax)
				}
			}},
		{name: "maxima alone keep the board", state: `{"max_tile": 4}`, check: func(t *testing.T, s game2048State) {
			if s.MaxTile != 4 || s.Board[0][0] != 2 {
				t.Errorf("state %+v", s)
			}
		}},
		{name: "5x5 board", state: `{"board": [[2,0,0,0,0],[0,0,0,0,0],[0,0,0,0,0],[0,0,0,0,0],[0,0,0,0,0]]}`},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "target not a power of two", state: `{"target_tile": 48}`, wantErr: "target_tile"},
		{name: "target too small", state: `{"target_tile": 1}`, wantErr: "target_tile"},
		{name: "target too large", state: `{"target_tile": 2147483648}`, wantErr: "target_tile"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "empty board", state: `{"board": [[0,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`, wantErr: "board"},
		{name: "board not square", state: `{"board": [[2,0,0],[0,0,0],[0,0,0],[0,0,0]], "max_tile": 2}`, wantErr: "board"},
		{name: "ragged board", state: `{"board": [[2,0,0,0],[0,0,0],[0,0,0,0],[0,0,0,0]]}`, wantErr: "board"},
		{name: "board with an empty row", state: `{"board": [[2,0],[]]}`, wantErr: "board"},
		{name: "board with a null row", state: `{"board": [[2,0],null]}`, wantErr: "board"},
		{name: "board too small", state: `{"board": [[2]]}`, wantErr: "board"},
		{name: "board no rows", state: `{"board": []}`, wantErr: "board"},
		{name: "odd tile", state: `{"board": [[3,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 2}`, wantErr: "board"},
		{name: "negative tile", state: `{"board": [[-2,2,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]]}`, wantErr: "board"},
		{name: "huge tile", state: `{"board": [[2147483648,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "max_tile": 2}`, wantErr: "board"},
		{name: "null board", state: `{"board": null}`, wantErr: "board"},
		{name: "max_tile not a power of two", state: `{"max_tile": 6}`, wantErr: "max_tile"},
		{name: "init_max zero", state: `{"init_max": 0}`, wantErr: "init_max"},
		{name: "max_tile below init_max", state: `{"max_tile": 2, "init_max": 4}`, wantErr: "max_tile"},
		{name: "short spawn", state: `{"spawns": [[0,0]]}`, wantErr: "spawns"},
		{name: "long spawn", state: `{"spawns": [[0,0,2,1]]}`, wantErr: "spawns"},
		{name: "spawn off the board", state: `{"spawns": [[4,0,2]]}`, wantErr: "spawns"},
		{name: "spawn negative", state: `{"spawns": [[0,-1,2]]}`, wantErr: "spawns"},
		{name: "spawn value 8", state: `{"spawns": [[0,0,8]]}`, wantErr: "spawns"},
		{name: "spawn off a shrunk board", state: `{"board": [[2,0],[0,0]], "spawns": [[3,3,2]]}`, wantErr: "spawns"},
		{name: "null spawns", state: `{"spawns": null}`, wantErr: "spawns"},
		{name: "negative spawn seed", state: `{"spawn_seed": -1}`, wantErr: "spawn_seed"},
		{name: "bad spawn count", state: `{"spawn_count": "1"}`, wantErr: "spawn_count"},
		{name: "unknown example", state: `{"example": "north"}`, wantErr: "example"},
		{name: "upper-case example", state: `{"example": "UP"}`, wantErr: "example"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"board_size": 4}`, wantErr: "board_size"},
		{name: "not an object", state: `[7]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, game2048EasyID, "", base)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env.(*game2048).s)
			}
		})
	}
}

// TestGame2048RestoreDoesNotAlias: a restored env and the env whose snapshot
// it took share no board, and a failed restore leaves the live board alone.
func TestGame2048RestoreDoesNotAlias(t *testing.T) {
	a := newTestEnv(t, game2048EasyID, "", `{"board": [[2,0,0,0],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "spawns": [[3,3,2]]}`)
	b := newTestEnv(t, game2048EasyID, "", "")
	if err := b.Restore(a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	b.Step(`\boxed{right}`)
	if got := a.(*game2048).s.Board[0]; !slices.Equal(got, []int{2, 0, 0, 0}) {
		t.Errorf("stepping the restored env changed the original: %v", got)
	}
	wantRestore(t, a, `{"board": [[4,4,4,4],[0,0,0,0],[0,0,0,0],[0,0,0,0]], "turn_count": -1}`, "turn_count")
}

func TestGame2048Options(t *testing.T) {
	tests := []struct {
		name, id, opts       string
		wantRandom           bool
		wantTarget, wantMax  int
		wantSize             int
		wantInstructionsPart string
	}{
		{name: "easy", id: game2048EasyID, wantTarget: 64, wantMax: 50, wantSize: 4},
		{name: "hard", id: game2048HardID, wantTarget: 512, wantMax: 50, wantSize: 4},
		{name: "extreme-hard", id: game2048ExtremeID, wantTarget: 2048, wantMax: 100, wantSize: 4,
			wantInstructionsPart: "reach the 2048 tile by sliding and merging tiles.\nYou have 100 turns maximum."},
		{name: "max_turns", id: game2048EasyID, opts: `{"max_turns": 7}`, wantTarget: 64, wantMax: 7, wantSize: 4,
			wantInstructionsPart: "You have 7 turns maximum."},
		{name: "target_tile", id: game2048HardID, opts: `{"target_tile": 128}`, wantTarget: 128, wantMax: 50, wantSize: 4,
			wantInstructionsPart: "reach the 128 tile"},
		{name: "board_size", id: game2048EasyID, opts: `{"board_size": 6}`, wantTarget: 64, wantMax: 50, wantSize: 6},
		{name: "unknown keys ignored", id: game2048EasyID, opts: `{"seed": 3, "foo": "bar"}`, wantTarget: 64, wantMax: 50, wantSize: 4},
		{name: "null target makes it random", id: game2048EasyID, opts: `{"target_tile": null}`, wantRandom: true, wantSize: 4},
		{name: "null max_turns makes it random", id: game2048HardID, opts: `{"max_turns": null}`, wantRandom: true, wantSize: 4},
		{name: "fixed on the random id", id: game2048RandomID, opts: `{"target_tile": 256, "max_turns": 9}`,
			wantTarget: 256, wantMax: 9, wantSize: 4},
		{name: "one given stays random", id: game2048RandomID, opts: `{"target_tile": 256}`, wantRandom: true, wantSize: 4},
		{name: "random 3x3", id: game2048RandomID, opts: `{"board_size": 3}`, wantRandom: true, wantSize: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			s := env.(*game2048).s
			if s.Random != tt.wantRandom || len(s.Board) != tt.wantSize || game2048TileCount(s.Board) != 2 {
				t.Fatalf("state %s", env.Snapshot())
			}
			if tt.wantRandom {
				// Reset drew the pair; values given were overwritten, as in GEM.
				if !slices.Contains(game2048RandomConfigs, [2]int{s.TargetTile, s.MaxTurns}) {
					t.Errorf("drew %d/%d", s.TargetTile, s.MaxTurns)
				}
				return
			}
			if s.TargetTile != tt.wantTarget || s.MaxTurns != tt.wantMax || env.MaxTurns() != tt.wantMax {
				t.Errorf("state %s, want target %d max_turns %d", env.Snapshot(), tt.wantTarget, tt.wantMax)
			}
			if !strings.Contains(env.Instructions(), tt.wantInstructionsPart) {
				t.Errorf("instructions lack %q:\n%s", tt.wantInstructionsPart, env.Instructions())
			}
		})
	}
}

func TestGame2048BadOptions(t *testing.T) {
	tests := []badOption{
		{"target not a power of two", game2048EasyID, `{"target_tile": 100}`, "target_tile"},
		{"target zero", game2048EasyID, `{"target_tile": 0}`, "target_tile"},
		{"target string", game2048EasyID, `{"target_tile": "64"}`, "target_tile"},
		{"target on the random id", game2048RandomID, `{"target_tile": 3, "max_turns": 5}`, "target_tile"},
		{"max_turns zero", game2048HardID, `{"max_turns": 0}`, "max_turns"},
		{"max_turns fractional", game2048HardID, `{"max_turns": 2.5}`, "max_turns"},
		{"board_size one", game2048EasyID, `{"board_size": 1}`, "board_size"},
		{"board_size too large", game2048EasyID, `{"board_size": 17}`, "board_size"},
		{"board_size null", game2048RandomID, `{"board_size": null}`, "board_size"},
		{"board_size string", game2048EasyID, `{"board_size": "4"}`, "board_size"},
		{"not an object", game2048EasyID, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

func TestGame2048Registry(t *testing.T) {
	want := map[string]specWant{
		game2048EasyID:    {map[string]any{"target_tile": 64, "max_turns": 50}, 50},
		game2048HardID:    {map[string]any{"target_tile": 512, "max_turns": 50}, 50},
		game2048ExtremeID: {map[string]any{"target_tile": 2048, "max_turns": 100}, 100},
		game2048RandomID:  {map[string]any{"target_tile": nil, "max_turns": nil}, 0},
	}
	var got []string
	for _, id := range IDs() {
		if strings.HasPrefix(id, "game:Game2048-") {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("2048 ids %v", got)
	}
	wantSpecs(t, "Game2048", "", want)
}

// TestGame2048BeforeReset: an env used before Reset must not panic.
func TestGame2048BeforeReset(t *testing.T) {
	for _, id := range game2048IDs {
		env := mustNew(t, id)
		for _, act := range []string{`\boxed{up}`, `\boxed{left}`, `x`, `\boxed{rıght}`} {
			env.Step(act)
		}
		_ = env.Instructions()
		_ = env.Snapshot()
	}
}

// directionHugeActions are 1 MB actions of several shapes, each ending in one
// real move, for the games that take a boxed direction (2048, Sokoban).
func directionHugeActions() map[string]string {
	mb := hugeLen()
	rng := NewRNG(5)
	noise := make([]byte, mb)
	for i := range noise {
		noise[i] = byte(rng.IntN(256))
	}
	return map[string]string{
		"backslashes":    strings.Repeat(`\`, mb) + `\boxed{up}`,
		"open boxes":     strings.Repeat(`\boxed{`, mb/7) + `\boxed{up}`,
		"near misses":    strings.Repeat(`\boxed{righ`, mb/11) + `\boxed{up}`,
		"many matches":   strings.Repeat(`\boxed{left}`, mb/12) + `\boxed{up}`,
		"dotless i runs": strings.Repeat(`\BOXED{rı`, mb/10) + `\boxed{up}`,
		"no backslash":   strings.Repeat(`boxed{up}`, mb/9) + `\boxed{up}`,
		"random bytes":   string(noise) + `\boxed{up}`,
	}
}

// TestGame2048HugeAction steps 1 MB actions: the parser is linear, so each
// completes well within a generous deadline.
func TestGame2048HugeAction(t *testing.T) {
	for name, action := range directionHugeActions() {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, game2048EasyID, "", `{"board": [[0,0,0,0],[0,0,0,0],[0,0,0,0],[0,2,0,0]]}`)
			if r := stepWithin(t, env, action, 2*time.Minute); r.Observation != game2048Moved(1, "up") {
				t.Errorf("observation %q", r.Observation)
			}
		})
	}
}

// FuzzGame2048Step feeds arbitrary action text to Step: it must never panic,
// every observation must be one of GEM's lines with its reward and flags, and
// a parsed direction must come from a box.
func FuzzGame2048Step(f *testing.F) {
	for _, seed := range []string{
		`\boxed{up}`, `\BOXED{Down}`, `\\boxed{left}`, `\boxed{right}`, `\boxed{rİght}`, `\boxed{rıght}`,
		`\boxed{north}`, `\boxed{ up}`, `\boxed{}`, `first \boxed{up} then \boxed{left}`, "\\boxed{up}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, game2048IDs, which, seed)
		g := env.(*game2048)
		// Step past the turn limit to reach every branch, including the permissive after-done ones.
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn, s := env.Turn(), g.s
			switch obs := r.Observation; {
			case checkFormatOrLimit(t, r, turn, s.MaxTurns, game2048NoMove(turn), game2048Limit(s.MaxTurns)):
			case obs == game2048Won(s.TargetTile, turn), obs == game2048Over:
				if r.Reward < 0 || r.Reward > 1 || !r.Terminated || r.Truncated {
					t.Fatalf("end result %+v", r)
				}
			case strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you ", turn)):
				if r.Reward < 0 || r.Reward > 1 || r.Terminated || r.Truncated {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", obs)
			}
			if r.Info["suffix"] != "Current board:\n"+game2048Render(s.Board)+"\nEnter your move." || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
		}
		if dir, ok := game2048ParseMove(action); ok && (!strings.Contains(strings.ToLower(action), `\boxed{`) ||
			!slices.Contains([]string{"up", "down", "left", "right", "ri\u0307ght", "rıght"}, dir)) {
			t.Fatalf("parsed %q from %q", dir, action)
		}
	})
}
