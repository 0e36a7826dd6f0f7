package envs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
)

// familyActions are a few actions per family that make progress in some
// episodes and not in others; Step goes on after the end, so all are played.
var familyActions = map[string][]string{
	gtnFamily:         {`\boxed{5}`, `\boxed{10}`, `\boxed{3}`, `\boxed{7}`},
	mastermindFamily:  {`\boxed{1 2}`, `\boxed{1 2 3 4}`, `\boxed{3 4}`, `\boxed{2 1 4 3}`},
	minesweeperFamily: {`\boxed{flag 0 0}`, `\boxed{reveal 2 2}`, `\boxed{reveal 4 4}`, `\boxed{reveal 0 1}`},
	sudokuFamily:      {`\boxed{1 1 1}`, `\boxed{2 2 2}`, `\boxed{1 2 3}`, `\boxed{3 3 4}`},
	hanoiFamily:       {`\boxed{A C}`, `\boxed{A B}`, `\boxed{C B}`, `\boxed{A C}`},
	fifteenFamily:     {`\boxed{up}`, `\boxed{left}`, `\boxed{down}`, `\boxed{right}`},
	game2048Family:    {`\boxed{left}`, `\boxed{up}`, `\boxed{right}`, `\boxed{down}`},
	sokobanFamily:     {`\boxed{up}`, `\boxed{left}`, `\boxed{down}`, `\boxed{right}`},
	MathFamily:        {`\boxed{3}`, `\boxed{2}`},
}

// TestNewFromStateFullSnapshot checks, for every registered id, that a full
// snapshot (at the start and after a few steps) gives exactly the state that
// Restore gives after a reset from another seed, the reset's observation and
// info at the start, and the same play afterwards.
func TestNewFromStateFullSnapshot(t *testing.T) {
	for _, spec := range Specs() {
		actions, ok := familyActions[spec.Family]
		if !ok {
			t.Fatalf("%s: no actions for family %s", spec.ID, spec.Family)
		}
		var opts json.RawMessage
		if spec.Task {
			opts, _ = WithTask(nil, "What is 1 + 1?", "2")
		}
		for seed := range uint64(5) {
			for played := 0; played <= len(actions)/2; played += len(actions) / 2 {
				t.Run(fmt.Sprintf("%s/seed%d/after%d", spec.ID, seed, played), func(t *testing.T) {
					a, err := New(spec.ID, opts)
					if err != nil {
						t.Fatal(err)
					}
					obs, info := a.Reset(NewRNG(seed))
					for _, act := range actions[:played] {
						a.Step(act)
					}
					snap := a.Snapshot()

					b, bObs, bInfo, err := NewFromState(spec.ID, opts, snap)
					if err != nil {
						t.Fatalf("NewFromState(%s): %v", snap, err)
					}
					if !bytes.Equal(b.Snapshot(), snap) {
						t.Fatalf("snapshot\n%s\nwant\n%s", b.Snapshot(), snap)
					}
					if bObs != a.Instructions() || b.Turn() != a.Turn() || b.MaxTurns() != a.MaxTurns() || !maps.Equal(b.Info(), a.Info()) {
						t.Fatalf("state differs from the snapshot's env")
					}
					if played == 0 && (bObs != obs || !maps.Equal(bInfo, info)) {
						t.Fatalf("start (%q, %v), want the reset's (%q, %v)", bObs, bInfo, obs, info)
					}

					c := mustNew(t, spec.ID)
					if spec.Task {
						c, _ = New(spec.ID, opts)
					}
					c.Reset(NewRNG(seed + 100))
					mustRestore(t, c, string(snap))
					if !bytes.Equal(c.Snapshot(), b.Snapshot()) {
						t.Fatalf("Restore gives\n%s\nNewFromState gives\n%s", c.Snapshot(), b.Snapshot())
					}
					for _, act := range actions[played:] {
						stepBoth(t, a, b, act)
					}
				})
			}
		}
	}
}

// snapshotHas checks that env's snapshot holds want's keys with want's values.
func snapshotHas(t *testing.T, env Env, want string) {
	t.Helper()
	var got, w map[string]json.RawMessage
	if err := json.Unmarshal(env.Snapshot(), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	for key, wv := range w {
		var a, b bytes.Buffer
		if err := json.Compact(&a, got[key]); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := json.Compact(&b, wv); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("%s = %s, want %s", key, a.String(), b.String())
		}
	}
}

// Rooms and boards for the tables below.
const (
	testSudokuSolution4 = `[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]`
	testSudokuBoard9    = `[[0,2,3,0],[3,0,1,0],[0,0,0,0],[4,3,0,1]]` // 9 empties, one completion
	testSokobanRoom8    = `[[0,0,0,0,0,0,0,0],[0,1,1,1,1,1,1,0],[0,2,2,2,2,2,1,0],[0,1,1,1,1,1,1,0],[0,1,1,1,1,1,1,0],[0,1,1,1,1,1,1,0],[0,1,1,1,1,1,1,0],[0,0,0,0,0,0,0,0]]`
)

// TestNewFromStateDerives checks what a partial state's missing keys become.
func TestNewFromStateDerives(t *testing.T) {
	order36 := make([]int, 36)
	for i := range order36 {
		order36[i] = 35 - i
	}
	mineOrder, _ := json.Marshal(order36)
	for _, tt := range []struct {
		name, id, state, want string
	}{
		{"GuessTheNumber drawn turn limit and example", "game:GuessTheNumber-v0-random",
			`{"min_number": 1, "max_number": 20, "game_number": 15}`,
			`{"max_turns": 6, "example": 1, "turn_count": 0, "previous_guesses": [], "random": true}`},
		{"GuessTheNumber one-number range", "game:GuessTheNumber-v0-random",
			`{"min_number": 4, "max_number": 4, "game_number": 4}`, `{"max_turns": 1, "example": 4}`},
		{"GuessTheNumber fixed parameters", "game:GuessTheNumber-v0-hard",
			`{"game_number": 30}`, `{"min_number": 1, "max_number": 50, "max_turns": 7, "example": 1, "random": false}`},
		{"Mastermind drawn size from the code", "game:Mastermind-v0-random",
			`{"code": [4, 2, 6, 1], "num_numbers": 6}`,
			`{"code_length": 4, "max_turns": 20, "example": [1, 2, 3, 4], "milestone": 0, "previous_guesses": []}`},
		{"Mastermind drawn 2-digit code", "game:Mastermind-v0-random",
			`{"code": [3, 1], "num_numbers": 4}`, `{"code_length": 2, "max_turns": 10, "example": [1, 2]}`},
		{"Mastermind milestone", "game:Mastermind-v0-hard",
			`{"code": [1, 2, 3, 4], "previous_guesses": [[1, 2, 5, 6], [1, 3, 2, 4], [5, 6, 7, 8]], "turn_count": 3}`,
			`{"milestone": 2}`},
		{"Minesweeper drawn size from rows", "game:Minesweeper-v0-random",
			`{"rows": 6, "mine_order": ` + string(mineOrder) + `}`,
			`{"cols": 6, "num_mines": 7, "max_turns": 36, "first_reveal": true, "mines": [], "reveal_example": [0, 0], "flag_example": [5, 5]}`},
		{"Minesweeper mine count from the mines", "game:Minesweeper-v0-random",
			`{"cols": 5, "mines": [[0, 0], [1, 1]]}`, `{"rows": 5, "num_mines": 2, "max_turns": 25, "mine_order": []}`},
		{"Minesweeper revealed cells", "game:Minesweeper-v0-easy",
			`{"mines": [[0, 0], [0, 4], [4, 0], [4, 4], [2, 4]], "revealed": [[2, 2]], "turn_count": 1}`,
			`{"first_reveal": false, "mine_order": [], "flagged": []}`},
		{"Sudoku solution and empties from the board", "game:Sudoku-v0-easy",
			`{"board": ` + testSudokuBoard9 + `}`,
			`{"solution": ` + testSudokuSolution4 + `, "init_num_empty": 9, "scale": 4, "clues": 10, "max_turns": 15}`},
		{"Sudoku drawn size from the board", "game:Sudoku-v0-random",
			`{"board": ` + testSudokuBoard9 + `}`, `{"scale": 4, "clues": 10, "max_turns": 15, "random": true}`},
		{"Sudoku 1x1", "game:Sudoku-v0-random",
			`{"board": [[0]], "max_turns": 3}`, `{"scale": 1, "clues": 1, "solution": [[1]], "init_num_empty": 1}`},
		{"TowerofHanoi drawn size from the board", "game:TowerofHanoi-v0-random",
			`{"board": {"A": [4, 3], "C": [2, 1]}}`,
			`{"num_disks": 4, "max_turns": 20, "board": {"A": [4, 3], "B": [], "C": [2, 1]}}`},
		{"TowerofHanoi start board", "game:TowerofHanoi-v0-easy",
			`{"turn_count": 2}`, `{"num_disks": 3, "max_turns": 10, "board": {"A": [3, 2, 1], "B": [], "C": []}}`},
		{"FifteenPuzzle drawn size from the board", "game:FifteenPuzzle-v0-random",
			`{"board": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, null, 15]]}`,
			`{"num_rows": 4, "max_turns": 50, "init_algo": "monte_carlo"}`},
		{"Game2048 maxima from the board", "game:Game2048-v0-easy",
			`{"board": [[2, 8, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 4]], "spawn_seed": 9}`,
			`{"init_max": 8, "max_tile": 8, "example": "up", "spawns": [], "spawn_count": 0, "turn_count": 0}`},
		{"Game2048 max_tile from init_max", "game:Game2048-v0-easy",
			`{"board": [[2, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], "spawn_seed": 9, "init_max": 4}`,
			`{"init_max": 4, "max_tile": 4}`},
		{"Game2048 drawn turn limit", "game:Game2048-v0-random",
			`{"board": [[2, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], "spawn_seed": 9, "target_tile": 16}`,
			`{"max_turns": 20}`},
		{"Sokoban drawn size from the room", "game:Sokoban-v0-random",
			`{"room_fixed": ` + testSokobanRoom8 + `, "boxes": [[4, 1], [4, 2], [4, 3], [4, 4], [4, 5]], "player": [6, 6]}`,
			`{"num_boxes": 5, "max_turns": 50, "example": "up", "turn_count": 0}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _, _, err := NewFromState(tt.id, nil, json.RawMessage(tt.state))
			if err != nil {
				t.Fatal(err)
			}
			snapshotHas(t, env, tt.want)
		})
	}
}

// TestNewFromStateSudokuGenerated derives the solution and the number of
// empty cells of generated 9x9 puzzles from their boards alone.
func TestNewFromStateSudokuGenerated(t *testing.T) {
	for seed := range uint64(10) {
		gen := mustNew(t, "game:Sudoku-v0-hard")
		gen.Reset(NewRNG(seed))
		var s sudokuState
		if err := json.Unmarshal(gen.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		board, _ := json.Marshal(s.Board)
		env, _, _, err := NewFromState("game:Sudoku-v0-random", nil, json.RawMessage(`{"board": `+string(board)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		solution, _ := json.Marshal(s.Solution)
		snapshotHas(t, env, fmt.Sprintf(`{"scale": 9, "clues": 50, "max_turns": 50, "solution": %s, "init_num_empty": %d}`, solution, s.InitNumEmpty))
	}
}

// TestNewFromStateSudokuReward is the reward GEM pays for a board with 9
// empty cells: 1/9 a correct placement, whatever a reset would have drawn.
func TestNewFromStateSudokuReward(t *testing.T) {
	for _, state := range []string{
		`{"board": ` + testSudokuBoard9 + `}`,
		`{"board": ` + testSudokuBoard9 + `, "solution": ` + testSudokuSolution4 + `}`,
		`{"board": ` + testSudokuBoard9 + `, "turn_count": 0}`,
	} {
		for _, id := range []string{"game:Sudoku-v0-easy", "game:Sudoku-v0-random"} {
			env, _, _, err := NewFromState(id, nil, json.RawMessage(state))
			if err != nil {
				t.Fatal(err)
			}
			if r := env.Step(`\boxed{1 1 1}`); r.Reward != 1.0/9 {
				t.Errorf("%s %s: reward %v, want 1/9", id, state, r.Reward)
			}
		}
	}
}

// TestNewFromStateErrors checks states that cannot be started: each error
// names the key, and only keys left out wrap ErrMissingKey.
func TestNewFromStateErrors(t *testing.T) {
	for _, tt := range []struct {
		name, id, state, wantErr string
		missing                  bool
	}{
		{"not an object", "game:GuessTheNumber-v0-easy", `[1]`, "want a JSON object", false},
		{"null", "game:GuessTheNumber-v0-easy", `null`, "game_number: missing from the state", true},
		{"empty", "game:Mastermind-v0-easy", ``, "code: missing from the state", true},
		{"null value", "game:GuessTheNumber-v0-easy", `{"game_number": null}`, "game_number: must not be null", false},
		{"unknown key", "game:Sudoku-v0-easy", `{"puzzle": []}`, "puzzle: unknown key", false},
		{"GuessTheNumber range upside down", "game:GuessTheNumber-v0-random",
			`{"min_number": 9, "max_number": 2, "game_number": 5}`, "max_number: 2 is less than min_number 9", false},
		{"Minesweeper rows only, no mines", "game:Minesweeper-v0-random", `{"rows": 5}`, "mines: missing from the state", true},
		{"Minesweeper huge drawn board", "game:Minesweeper-v0-random",
			`{"rows": 4611686018427387904, "mines": []}`, "rows:", false},
		{"Sudoku bad scale", "game:Sudoku-v0-random",
			`{"board": [[0, 0], [0, 0]], "max_turns": 5}`, "scale: must be 1, 4 or 9, got 2", false},
		{"Sudoku bad digit", "game:Sudoku-v0-easy",
			`{"board": [[5, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]}`, "board: R1 C1 holds 5", false},
		{"Sudoku 1x1 turn limit", "game:Sudoku-v0-random", `{"board": [[0]]}`, "max_turns: missing from the state", true},
		{"Sudoku drawn ragged board", "game:Sudoku-v0-random", `{"board": [[0, 0, 0, 0]]}`, "board: row 1 has 4 cells, want 1", false},
		{"FifteenPuzzle drawn ragged board", "game:FifteenPuzzle-v0-random",
			`{"board": [[1, 2, 3, 4, 5], [null]]}`, "board: row 0 has 5 cells, want 2", false},
		{"Sokoban drawn ragged room", "game:Sokoban-v0-random",
			`{"room_fixed": [[0, 0, 0, 0, 0, 0], [0]], "boxes": [], "player": [1, 1]}`, "room_fixed: row 1 has 1 cells, want 6", false},
		{"TowerofHanoi too many disks", "game:TowerofHanoi-v0-easy", `{"num_disks": 100000}`, "num_disks: must be in [1, 1000]", false},
		{"Game2048 empty board", "game:Game2048-v0-easy",
			`{"board": [[0, 0], [0, 0]], "spawn_seed": 1}`, "board: no tile to derive init_max from", false},
		{"Game2048 later turn without max_tile", "game:Game2048-v0-easy",
			`{"board": [[2, 0], [0, 0]], "spawn_seed": 1, "turn_count": 2, "init_max": 2}`, "max_tile: missing from the state", true},
		{"Sokoban no boxes", "game:Sokoban-v0-easy", `{"room_fixed": ` + testSokobanRoom8 + `}`, "boxes: missing from the state", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _, _, err := NewFromState(tt.id, nil, json.RawMessage(tt.state))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewFromState(%s) = %v, %v; want an error naming %q", tt.state, env, err, tt.wantErr)
			}
			if env != nil {
				t.Errorf("env %v returned with the error", env)
			}
			if got := errors.Is(err, ErrMissingKey); got != tt.missing {
				t.Errorf("errors.Is(%v, ErrMissingKey) = %v, want %v", err, got, tt.missing)
			}
		})
	}
}

// TestNewFromStateBadEnv checks that New's errors come back unchanged.
func TestNewFromStateBadEnv(t *testing.T) {
	if _, _, _, err := NewFromState("game:Nope-v0", nil, json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownEnv) {
		t.Errorf("unknown id: %v", err)
	}
	if _, _, _, err := NewFromState("game:GuessTheNumber-v0-easy", json.RawMessage(`{"max_turns": "x"}`), json.RawMessage(`{}`)); !errors.Is(err, ErrBadOption) {
		t.Errorf("bad option: %v", err)
	}
}

func TestGuessTheNumberDrawnTurns(t *testing.T) {
	for d := range 3000 {
		if got, want := gtnDrawnTurns(7, 7+d), ceilSqrt(d)+1; got != want {
			t.Fatalf("span %d: %d, want %d", d, got, want)
		}
	}
	// The widest range: ceil(sqrt(2^64 - 1)) + 1.
	if got := gtnDrawnTurns(math.MinInt64, math.MaxInt64); got != 1<<32+1 {
		t.Errorf("widest range: %d", got)
	}
}
