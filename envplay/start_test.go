package envplay

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs"
)

// seeds is how many seeds each state is started with; all must agree.
const seeds = 50

// stateCase is a (partial) state started with Start and played over JSON
// lines. Every seed must print the same lines, or fail with the same error.
type stateCase struct {
	name, id, opts, state string
	// actions are the raw action texts played after the start.
	actions []string
	// want are substrings of the JSON lines printed (JSON-escaped, so a
	// backslash is written twice).
	want []string
	// wantErr, when set, is a substring of the error every seed must give;
	// missing says that it must wrap envs.ErrMissingKey.
	wantErr string
	missing bool
}

// startAndPlay starts tc with seed and plays its actions; it returns the
// printed lines, or the error of the start.
func startAndPlay(t *testing.T, tc stateCase, seed uint64) (string, error) {
	t.Helper()
	var opts json.RawMessage
	if tc.opts != "" {
		opts = json.RawMessage(tc.opts)
	}
	env, obs, info, err := Start(tc.id, opts, seed, json.RawMessage(tc.state))
	if err != nil {
		return "", err
	}
	var in strings.Builder
	for _, a := range tc.actions {
		line, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(line)
		in.WriteByte('\n')
	}
	var out bytes.Buffer
	if err := JSONL(strings.NewReader(in.String()), &out, env, obs, info); err != nil {
		t.Fatal(err)
	}
	return out.String(), nil
}

// checkStateCases runs each case with seeds 0 to seeds-1 and checks that
// the seed changes nothing, then checks the outcome against the case.
func checkStateCases(t *testing.T, cases []stateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := startAndPlay(t, tc, 0)
			for seed := uint64(1); seed < seeds; seed++ {
				o, e := startAndPlay(t, tc, seed)
				if o != out || errString(e) != errString(err) {
					t.Fatalf("seed %d differs from seed 0:\n%s%v\nseed 0:\n%s%v", seed, o, e, out, err)
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one naming %q; output:\n%s", err, tc.wantErr, out)
				}
				if got := errors.Is(err, envs.ErrMissingKey); got != tc.missing {
					t.Errorf("errors.Is(%v, ErrMissingKey) = %v, want %v", err, got, tc.missing)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestStartGuessTheNumberState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random range, no turn limit or example", id: "game:GuessTheNumber-v0-random",
			state:   `{"min_number": 1, "max_number": 20, "game_number": 15}`,
			actions: []string{`\boxed{10}`, `\boxed{15}`},
			// ceil(sqrt(19)) + 1 turns, and the example is min_number.
			want: []string{"between 1 and 20 (inclusive) within 6 turns", `for example, \\boxed{1}.`,
				"target number is higher than 10", `"reward":1,"terminated":true`}},
		{name: "random, every key that shows", id: "game:GuessTheNumber-v0-random",
			state:   `{"min_number": 3, "max_number": 9, "max_turns": 2, "game_number": 4, "example": 7}`,
			actions: []string{`\boxed{5}`, `\boxed{6}`},
			want:    []string{"between 3 and 9 (inclusive) within 2 turns", `\\boxed{7}`, `"reward":0.6666666666666667,"terminated":true,"truncated":true`}},
		{name: "random without a range", id: "game:GuessTheNumber-v0-random",
			state: `{"game_number": 7}`, wantErr: "min_number: missing from the state", missing: true},
		{name: "random without max_number", id: "game:GuessTheNumber-v0-random",
			state: `{"min_number": 1, "game_number": 7}`, wantErr: "max_number: missing from the state", missing: true},
		{name: "easy target", id: "game:GuessTheNumber-v0-easy", state: `{"game_number": 7}`,
			actions: []string{`\boxed{5}`, `\boxed{7}`},
			want: []string{"between 1 and 10 (inclusive) within 4 turns", `for example, \\boxed{1}.`,
				"Congratulations! You guessed the correct number 7 in 2 turns."}},
		{name: "easy without a target", id: "game:GuessTheNumber-v0-easy",
			state: `{"example": 3}`, wantErr: "game_number: missing from the state", missing: true},
		{name: "easy target out of range", id: "game:GuessTheNumber-v0-easy",
			state: `{"game_number": 70}`, wantErr: "game_number: 70 is outside [1, 10]"},
		{name: "earlier guesses", id: "game:GuessTheNumber-v0-easy",
			state:   `{"game_number": 7, "previous_guesses": [5], "turn_count": 1}`,
			actions: []string{`\boxed{5}`},
			want:    []string{"At turn 2, you guessed 5, which has been already guessed before."}},
		{name: "options set the turn limit", id: "game:GuessTheNumber-v0-hard", opts: `{"max_turns": 2}`,
			state: `{"game_number": 40}`, want: []string{"between 1 and 50 (inclusive) within 2 turns"}},
		{name: "unknown key", id: "game:GuessTheNumber-v0-easy",
			state: `{"game_number": 7, "target": 7}`, wantErr: "target: unknown key"},
	})
}

func TestStartMastermindState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random, no example", id: "game:Mastermind-v0-random",
			state:   `{"code_length": 4, "num_numbers": 6, "max_turns": 20, "code": [1, 2, 3, 4]}`,
			actions: []string{`\boxed{1 2 5 6}`},
			want: []string{`"info":{}`, `for example, \\boxed{1 2 3 4}.`,
				`2 black peg(s) and 0 white peg(s).","reward":0.5`}},
		{name: "random code and digit range", id: "game:Mastermind-v0-random",
			state: `{"code": [4, 2, 6, 1], "num_numbers": 6}`,
			want:  []string{"secret 4 digit code within 20 turns", "digits from 1 to 6"}},
		{name: "random size GEM never draws", id: "game:Mastermind-v0-random",
			state: `{"code": [4, 2, 5, 1], "num_numbers": 5}`, wantErr: "max_turns: missing from the state", missing: true},
		{name: "random code only", id: "game:Mastermind-v0-random",
			state: `{"code": [1, 2]}`, wantErr: "num_numbers: missing from the state", missing: true},
		{name: "no code", id: "game:Mastermind-v0-hard",
			state: `{"example": [1, 2, 3, 4]}`, wantErr: "code: missing from the state", missing: true},
		{name: "milestone from the guesses", id: "game:Mastermind-v0-hard",
			state:   `{"code": [1, 2, 3, 4], "previous_guesses": [[1, 2, 5, 6]], "turn_count": 1}`,
			actions: []string{`\boxed{1 2 3 5}`},
			// GEM's milestone is 2 after [1 2 5 6], so 3 blacks pay 1/4.
			want: []string{`At turn 2, you guessed [1, 2, 3, 5]. This guess receives 3 black peg(s) and 0 white peg(s).","reward":0.25`}},
		{name: "code of the wrong length", id: "game:Mastermind-v0-easy",
			state: `{"code": [1, 2, 3, 4]}`, wantErr: "code: has 4 digits, want code_length 2"},
	})
}

// msMines are five mines in the corners and on the right edge of a 5x5 board.
const msMines = `[[0, 0], [0, 4], [4, 0], [4, 4], [2, 4]]`

func TestStartMinesweeperState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random, no examples", id: "game:Minesweeper-v0-random",
			state:   `{"rows": 5, "cols": 5, "num_mines": 5, "max_turns": 25, "mines": ` + msMines + `}`,
			actions: []string{`\boxed{reveal 2 1}`},
			want: []string{`\\boxed{reveal 0 0} to reveal`, `\\boxed{flag 4 4} to place`,
				`successfully revealed cell (2, 1).","reward":0.9`}},
		{name: "random rows and mines", id: "game:Minesweeper-v0-random",
			state:   `{"rows": 5, "mines": ` + msMines + `}`,
			actions: []string{`\boxed{reveal 2 1}`},
			want:    []string{`"reward":0.9`, " 4  .  .  .  .  . "}},
		{name: "random cols and mine order", id: "game:Minesweeper-v0-random",
			state:   `{"cols": 6, "mine_order": [35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]}`,
			actions: []string{`\boxed{reveal 0 0}`},
			// 7 mines (36/5) on the last 7 cells: every safe cell opens at once.
			want: []string{`successfully revealed cell (0, 0).","reward":1,"terminated":false`, " 4  2  3  3  3  4  . "}},
		{name: "random without a size", id: "game:Minesweeper-v0-random",
			state: `{"mines": [[0, 0]]}`, wantErr: "rows: missing from the state", missing: true},
		{name: "no mines", id: "game:Minesweeper-v0-easy",
			state: `{"flagged": [[1, 1]]}`, wantErr: "mines: missing from the state", missing: true},
		{name: "revealed cells", id: "game:Minesweeper-v0-easy",
			state:   `{"mines": ` + msMines + `, "revealed": [[2, 2]], "turn_count": 1}`,
			actions: []string{`\boxed{reveal 2 2}`},
			want:    []string{"At turn 2, you chose to reveal cell (2, 2), which has already been revealed."}},
		{name: "mines that do not match num_mines", id: "game:Minesweeper-v0-easy",
			state: `{"mines": [[0, 0]]}`, wantErr: "mines: want 5 cells, got 1"},
	})
}

// sudokuSolution4 is a 4x4 solution; sudokuBoard9 empties 9 of its cells
// and has it as its only completion, sudokuBoardMany empties 9 and has more.
const (
	sudokuSolution4 = `[[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]`
	sudokuBoard9    = `[[0, 2, 3, 0], [3, 0, 1, 0], [0, 0, 0, 0], [4, 3, 0, 1]]`
	sudokuBoardMany = `[[1, 2, 3, 4], [3, 4, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]`
)

func TestStartSudokuState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "9 empties pay 1/9", id: "game:Sudoku-v0-easy",
			state:   `{"solution": ` + sudokuSolution4 + `, "board": ` + sudokuBoard9 + `}`,
			actions: []string{`\boxed{1 1 1}`},
			want:    []string{`which is correct.","reward":0.1111111111111111`}},
		{name: "solution from the board", id: "game:Sudoku-v0-easy",
			state:   `{"board": ` + sudokuBoard9 + `}`,
			actions: []string{`\boxed{1 1 2}`, `\boxed{1 1 1}`},
			want:    []string{"which violates Sudoku rules.", `which is correct.","reward":0.1111111111111111`}},
		{name: "random 4x4", id: "game:Sudoku-v0-random",
			state:   `{"board": ` + sudokuBoard9 + `}`,
			actions: []string{`\boxed{1 1 1}`},
			want:    []string{"You are playing A simple version of Sudoku.", `"reward":0.1111111111111111`}},
		{name: "random with scale given", id: "game:Sudoku-v0-random",
			state:   `{"scale": 4, "solution": ` + sudokuSolution4 + `, "board": ` + sudokuBoard9 + `}`,
			actions: []string{`\boxed{1 1 1}`},
			want:    []string{`"reward":0.1111111111111111`}},
		{name: "board with many completions", id: "game:Sudoku-v0-easy",
			state: `{"board": ` + sudokuBoardMany + `}`, wantErr: "solution: missing from the state", missing: true},
		{name: "board with no completion", id: "game:Sudoku-v0-easy",
			state: `{"board": [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]}`, wantErr: "board: has no completion"},
		{name: "later turn without init_num_empty", id: "game:Sudoku-v0-easy",
			state: `{"board": ` + sudokuBoard9 + `, "turn_count": 3}`, wantErr: "init_num_empty: missing from the state", missing: true},
		{name: "later turn with init_num_empty", id: "game:Sudoku-v0-easy",
			state:   `{"board": ` + sudokuBoard9 + `, "turn_count": 3, "init_num_empty": 10}`,
			actions: []string{`\boxed{1 1 1}`},
			want:    []string{`At turn 4, you placed 1 at R1 C1, which is correct.","reward":0.1`}},
		{name: "board of the wrong size", id: "game:Sudoku-v0-hard",
			state: `{"board": ` + sudokuBoard9 + `}`, wantErr: "board: has 4 rows, want 9"},
		{name: "no board", id: "game:Sudoku-v0-easy",
			state: `{"solution": ` + sudokuSolution4 + `}`, wantErr: "board: missing from the state", missing: true},
	})
}

func TestStartTowerofHanoiState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random board", id: "game:TowerofHanoi-v0-random",
			state:   `{"board": {"A": [4, 3, 2, 1]}}`,
			actions: []string{`\boxed{A B}`},
			want:    []string{"Tower of Hanoi with 4 disks", "moved disk 1 from tower A to tower B", `A: [4, 3, 2]\nB: [1]\nC: []`}},
		{name: "random size", id: "game:TowerofHanoi-v0-random",
			state: `{"num_disks": 5}`, want: []string{"with 5 disks", `A: [5, 4, 3, 2, 1]\nB: []\nC: []`}},
		{name: "random size GEM never draws", id: "game:TowerofHanoi-v0-random",
			state: `{"num_disks": 6}`, wantErr: "max_turns: missing from the state", missing: true},
		{name: "random, nothing", id: "game:TowerofHanoi-v0-random",
			state: `{}`, wantErr: "num_disks: missing from the state", missing: true},
		{name: "towers left out are empty", id: "game:TowerofHanoi-v0-easy",
			state:   `{"board": {"A": [3], "C": [2, 1]}}`,
			actions: []string{`\boxed{C B}`},
			want:    []string{`A: [3]\nB: [1]\nC: [2]`}},
		{name: "disks missing", id: "game:TowerofHanoi-v0-easy",
			state: `{"board": {"C": [3, 2]}}`, wantErr: "board: holds 2 disks, want num_disks 3"},
		{name: "start position", id: "game:TowerofHanoi-v0-easy",
			state: `{}`, want: []string{`A: [3, 2, 1]\nB: []\nC: []`}},
	})
}

func TestStartFifteenPuzzleState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random 3x3", id: "game:FifteenPuzzle-v0-random",
			state:   `{"board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`,
			actions: []string{`\boxed{left}`},
			want:    []string{"You are playing the 8-Puzzle game.", "Congratulations! You have solved the puzzle!"}},
		{name: "random size GEM never draws", id: "game:FifteenPuzzle-v0-random",
			state:   `{"board": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15], [16, 17, 18, 19, 20], [21, 22, 23, 24, null]]}`,
			wantErr: "max_turns: missing from the state", missing: true},
		{name: "random, no board", id: "game:FifteenPuzzle-v0-random",
			state: `{"num_rows": 3}`, wantErr: "board: missing from the state", missing: true},
		{name: "easy, no board", id: "game:FifteenPuzzle-v0-easy",
			state: `{"max_turns": 3}`, wantErr: "board: missing from the state", missing: true},
		{name: "easy board", id: "game:FifteenPuzzle-v0-easy",
			state:   `{"board": [[3, 1], [2, null]]}`,
			actions: []string{`\boxed{down}`},
			want:    []string{`At turn 1, you made a valid move: down.\n`, ` 3 __\n 2  1`}},
		{name: "board of the wrong size", id: "game:FifteenPuzzle-v0-easy",
			state: `{"board": [[1, 2, 3], [4, 5, 6], [7, null, 8]]}`, wantErr: "board: has 3 rows, want num_rows 2"},
	})
}

// g2048Board has two 2s to merge.
const g2048Board = `[[2, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]`

func TestStartGame2048State(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "board and spawn seed", id: "game:Game2048-v0-easy",
			state:   `{"board": ` + g2048Board + `, "spawn_seed": 1}`,
			actions: []string{`\boxed{left}`, `\boxed{up}`, `\boxed{right}`},
			// init_max 2: a 4 is one of log2(64) - 1 = 5 steps.
			want: []string{`For example: \\boxed{up}`, `At turn 1, you moved left","reward":0.2`}},
		{name: "scripted spawns", id: "game:Game2048-v0-easy",
			state:   `{"board": ` + g2048Board + `, "spawn_seed": 1, "spawns": [[3, 3, 4]]}`,
			actions: []string{`\boxed{left}`},
			want:    []string{`   4    .    .    .\n   .    .    .    .\n   .    .    .    .\n   .    .    .    4`}},
		{name: "no spawn seed", id: "game:Game2048-v0-easy",
			state: `{"board": ` + g2048Board + `}`, wantErr: "spawn_seed: missing from the state", missing: true},
		{name: "no board", id: "game:Game2048-v0-easy",
			state: `{"spawn_seed": 1}`, wantErr: "board: missing from the state", missing: true},
		{name: "random target", id: "game:Game2048-v0-random",
			state:   `{"board": ` + g2048Board + `, "spawn_seed": 1, "target_tile": 32}`,
			actions: []string{`\boxed{left}`},
			want:    []string{"reach the 32 tile", "You have 30 turns maximum.", `"reward":0.25`}},
		{name: "random without a target", id: "game:Game2048-v0-random",
			state: `{"board": ` + g2048Board + `, "spawn_seed": 1}`, wantErr: "target_tile: missing from the state", missing: true},
		{name: "random target GEM never draws", id: "game:Game2048-v0-random",
			state: `{"board": ` + g2048Board + `, "spawn_seed": 1, "target_tile": 128}`, wantErr: "max_turns: missing from the state", missing: true},
		{name: "later turn without init_max", id: "game:Game2048-v0-easy",
			state: `{"board": ` + g2048Board + `, "spawn_seed": 1, "turn_count": 5}`, wantErr: "init_max: missing from the state", missing: true},
		{name: "later turn", id: "game:Game2048-v0-easy",
			state:   `{"board": ` + g2048Board + `, "spawn_seed": 1, "turn_count": 5, "init_max": 4, "max_tile": 4}`,
			actions: []string{`\boxed{left}`},
			want:    []string{`At turn 6, you moved left","reward":0`}},
	})
}

// sokobanRoom is GEM's transcript room: targets at (2,3) and (4,3).
const sokobanRoom = `"room_fixed": [[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]]`

func TestStartSokobanState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "random room", id: "game:Sokoban-v0-random",
			state:   `{` + sokobanRoom + `, "boxes": [[2, 2], [3, 3]], "player": [1, 3]}`,
			actions: []string{`\boxed{down}`},
			want:    []string{"complete the puzzle within 20 turns", `For example: \\boxed{up} to move up.`, "At turn 1, you moved down."}},
		{name: "random room GEM never draws", id: "game:Sokoban-v0-random",
			state:   `{"room_fixed": [[0,0,0,0,0,0,0],[0,1,1,1,1,1,0],[0,1,1,2,1,1,0],[0,1,1,1,1,1,0],[0,1,1,2,1,1,0],[0,1,1,1,1,1,0],[0,0,0,0,0,0,0]], "boxes": [[2, 2], [3, 3]], "player": [1, 3]}`,
			wantErr: "max_turns: missing from the state", missing: true},
		{name: "no player", id: "game:Sokoban-v0-easy",
			state: `{` + sokobanRoom + `, "boxes": [[2, 2], [3, 3]]}`, wantErr: "player: missing from the state", missing: true},
		{name: "no room", id: "game:Sokoban-v0-easy",
			state: `{"boxes": [[2, 2], [3, 3]], "player": [1, 3]}`, wantErr: "room_fixed: missing from the state", missing: true},
		{name: "easy room", id: "game:Sokoban-v0-easy",
			state:   `{` + sokobanRoom + `, "boxes": [[2, 2], [3, 3]], "player": [1, 3], "example": "left"}`,
			actions: []string{`\boxed{down}`},
			want:    []string{`\\boxed{left} to move left`, "At turn 1, you moved down."}},
	})
}

func TestStartMathState(t *testing.T) {
	checkStateCases(t, []stateCase{
		{name: "attempts", id: "math", opts: `{"question": "What is 1 + 1?", "answer": "2"}`,
			state:   `{"max_attempts": 2}`,
			actions: []string{`\boxed{3}`, `\boxed{2}`},
			want:    []string{"Your answer is incorrect.", `"reward":1`}},
	})
}

// TestStartSeedWithoutState checks that without a state the seed does
// choose the episode, so the checks above would see a seed's influence.
func TestStartSeedWithoutState(t *testing.T) {
	for _, id := range []string{"game:GuessTheNumber-v0-random", "game:Mastermind-v0-random", "game:Sudoku-v0-random", "game:Game2048-v0-easy"} {
		distinct := map[string]bool{}
		for seed := range uint64(seeds) {
			out, err := startAndPlay(t, stateCase{id: id}, seed)
			if err != nil {
				t.Fatal(err)
			}
			distinct[out] = true
		}
		if len(distinct) < 2 {
			t.Errorf("%s: %d seeds gave one reset", id, seeds)
		}
	}
}

// TestStartFullSnapshot checks that a full snapshot starts exactly the
// episode it was taken from, whatever the seed.
func TestStartFullSnapshot(t *testing.T) {
	env, _, _, err := Start("game:Minesweeper-v0-random", nil, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Step(`\boxed{reveal 3 3}`)
	snap := env.Snapshot()
	for seed := range uint64(seeds) {
		got, _, _, err := Start("game:Minesweeper-v0-random", nil, seed, snap)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Snapshot(), snap) {
			t.Fatalf("seed %d: %s, want %s", seed, got.Snapshot(), snap)
		}
	}
}
