package envs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	sokobanEasyID   = "game:Sokoban-v0-easy"
	sokobanHardID   = "game:Sokoban-v0-hard"
	sokobanRandomID = "game:Sokoban-v0-random"

	sokobanWin = "Congratulations! You have solved the Sokoban puzzle!"
)

var sokobanIDs = []string{sokobanEasyID, sokobanHardID, sokobanRandomID}

func sokobanMoved(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you moved %s.", turn, dir)
}

func sokobanPushed(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you pushed a box while you moved %s.", turn, dir)
}

func sokobanCollide(turn int, dir string) string {
	return fmt.Sprintf("At turn %d, you cannot move %s - you would collide with wall or other boxes!", turn, dir)
}

func sokobanInvalid(turn int) string {
	return fmt.Sprintf("At turn %d, your submitted action is not valid.", turn)
}

func sokobanBox(dir string) string { return `\boxed{` + dir + `}` }

// sokobanSuffix is GEM's suffix for a board drawn as rows of GEM's symbols.
func sokobanSuffix(rows []string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.ReplaceAll(r, "+", "P") + "\n")
	}
	return "Here is the current board layout:\n" + b.String() + "\nEnter your move."
}

// sokobanPicture turns a board drawn in GEM's symbols, one row a string with
// cells separated by spaces, into the state keys room_fixed, boxes, player
// and num_boxes. '+' is the player on a target, which GEM draws as P.
func sokobanPicture(t testing.TB, rows ...string) string {
	t.Helper()
	fixed := make([][]int, len(rows))
	boxes := []sokobanPos{}
	var player sokobanPos
	for r, row := range rows {
		for c, sym := range strings.Fields(row) {
			code := sokobanFloor
			switch sym {
			case "#":
				code = sokobanWall
			case "_":
			case "O":
				code = sokobanTarget
			case "X":
				boxes = append(boxes, sokobanPos{r, c})
			case "√":
				code = sokobanTarget
				boxes = append(boxes, sokobanPos{r, c})
			case "P":
				player = sokobanPos{r, c}
			case "+":
				code = sokobanTarget
				player = sokobanPos{r, c}
			default:
				t.Fatalf("picture symbol %q", sym)
			}
			fixed[r] = append(fixed[r], code)
		}
	}
	b, err := json.Marshal(map[string]any{"room_fixed": fixed, "boxes": boxes, "player": player, "num_boxes": len(boxes)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sokobanTranscriptRoom is the hidden room every GEM transcript was produced
// with: the border is wall, targets at (2,3) and (4,3), boxes at (2,2) and
// (3,3), the player at (1,3).
var sokobanTranscriptRoom = []string{
	"# # # # # #",
	"# _ _ P _ #",
	"# _ X O _ #",
	"# _ _ X _ #",
	"# _ _ O _ #",
	"# # # # # #",
}

// sokobanWithState joins state objects into one, later keys winning.
func sokobanWithState(t testing.TB, objects ...string) string {
	t.Helper()
	out := map[string]json.RawMessage{}
	for _, o := range objects {
		if o == "" {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(o), &m); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		maps.Copy(out, m)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// sokobanFixtureCases gives the id, constructor overrides and example each
// GEM transcript was produced with; the room is sokobanTranscriptRoom.
var sokobanFixtureCases = map[string]struct{ id, opts, example string }{
	"sb-1.jsonl": {sokobanEasyID, "", "up"},
	"sb-2.jsonl": {sokobanEasyID, "", "left"},
	"sb-3.jsonl": {sokobanEasyID, `{"max_turns": 2}`, "right"},
}

// TestSokobanFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestSokobanFixtures(t *testing.T) {
	replayFixtures(t, "sokoban", sokobanFixtureCases, func(t *testing.T, fc struct{ id, opts, example string }, reset fixtureReset) Env {
		state := sokobanWithState(t, sokobanPicture(t, sokobanTranscriptRoom...), fmt.Sprintf(`{"example": %q}`, fc.example))
		env := newTestEnv(t, fc.id, fc.opts, state)
		// The reset info is the board, which the restore replaced.
		if got := env.Info(); !maps.Equal(got, reset.Info) {
			t.Errorf("reset info = %q, want %q", got, reset.Info)
		}
		return env
	})
}

// sokobanStep is one action, the result GEM gives for it and, when board is
// set, the board after it; nil means the board did not change.
type sokobanStep struct {
	action, obs string
	reward      float64
	term, trunc bool
	board       []string
}

// sokobanPlay applies each action from the board start and compares the
// whole StepResult, the board the suffix shows included.
func sokobanPlay(t *testing.T, env Env, start []string, steps []sokobanStep) {
	t.Helper()
	board := start
	for i, s := range steps {
		got := env.Step(s.action)
		if s.board != nil {
			board = s.board
		}
		want := StepResult{Observation: s.obs, Reward: s.reward, Terminated: s.term, Truncated: s.trunc,
			Info: Info{"suffix": sokobanSuffix(board)}}
		if !sameResult(got, want) {
			t.Fatalf("step %d (%.60q):\n got %q\nwant %q", i+1, s.action, fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want))
		}
		if got.Won != (s.obs == sokobanWin) {
			t.Fatalf("step %d: Won = %v", i+1, got.Won)
		}
	}
}

// TestSokobanBranches covers every branch of Step.
func TestSokobanBranches(t *testing.T) {
	// The transcript room after the first move down, and after the push.
	onTarget := []string{"# # # # # #", "# _ _ _ _ #", "# _ X P _ #", "# _ _ X _ #", "# _ _ O _ #", "# # # # # #"}
	pushed := []string{"# # # # # #", "# _ _ _ _ #", "# _ X O _ #", "# _ _ P _ #", "# _ _ √ _ #", "# # # # # #"}
	// A box on a target with the player beside it.
	boxOnTarget := []string{"# # # # # #", "# _ _ _ _ #", "# _ P √ _ #", "# _ _ _ _ #", "# _ X O _ #", "# # # # # #"}
	// Three boxes in the top row: one against the wall, two in a line.
	crowded := []string{"# # # # # #", "# X P X X #", "# _ _ O _ #", "# _ _ O _ #", "# _ _ _ O #", "# # # # # #"}
	// No wall along the top: the edge of the grid stops the player and boxes.
	open := []string{"_ _ _ X _ _", "# _ _ P _ #", "# _ O _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"}
	// One push from solved.
	almost := []string{"# # # # # #", "# _ _ O _ #", "# _ _ X _ #", "# _ _ P _ #", "# _ _ √ _ #", "# # # # # #"}
	tests := []struct {
		name, opts, state string
		start             []string
		steps             []sokobanStep
	}{
		{name: "move, then leave a target", start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("down"), sokobanMoved(1, "down"), 0, false, false, onTarget},
			{sokobanBox("right"), sokobanMoved(2, "right"), 0, false, false,
				[]string{"# # # # # #", "# _ _ _ _ #", "# _ X O P #", "# _ _ X _ #", "# _ _ O _ #", "# # # # # #"}},
		}},
		{name: "push onto a target", start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("down"), sokobanMoved(1, "down"), 0, false, false, onTarget},
			{sokobanBox("down"), sokobanPushed(2, "down"), 0, false, false, pushed},
		}},
		{name: "push off a target", start: boxOnTarget, steps: []sokobanStep{
			{sokobanBox("right"), sokobanPushed(1, "right"), 0, false, false,
				[]string{"# # # # # #", "# _ _ _ _ #", "# _ _ + X #", "# _ _ _ _ #", "# _ X O _ #", "# # # # # #"}},
			{sokobanBox("left"), sokobanMoved(2, "left"), 0, false, false,
				[]string{"# # # # # #", "# _ _ _ _ #", "# _ P O X #", "# _ _ _ _ #", "# _ X O _ #", "# # # # # #"}},
		}},
		{name: "walk into a wall", start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("up"), sokobanCollide(1, "up"), 0, false, false, nil},
		}},
		{name: "push into a wall or another box", start: crowded, steps: []sokobanStep{
			{sokobanBox("left"), sokobanCollide(1, "left"), 0, false, false, nil},
			{sokobanBox("right"), sokobanCollide(2, "right"), 0, false, false, nil},
			{sokobanBox("up"), sokobanCollide(3, "up"), 0, false, false, nil},
			{sokobanBox("down"), sokobanMoved(4, "down"), 0, false, false,
				[]string{"# # # # # #", "# X _ X X #", "# _ P O _ #", "# _ _ O _ #", "# _ _ _ O #", "# # # # # #"}},
		}},
		{name: "push a box against a box", start: []string{"# # # # # #", "# _ _ _ _ #", "# P X X O #", "# _ _ _ O #", "# _ _ _ _ #", "# # # # # #"},
			steps: []sokobanStep{
				{sokobanBox("right"), sokobanCollide(1, "right"), 0, false, false, nil},
			}},
		{name: "edge of the grid", start: open, steps: []sokobanStep{
			{sokobanBox("up"), sokobanCollide(1, "up"), 0, false, false, nil},
			{sokobanBox("left"), sokobanMoved(2, "left"), 0, false, false,
				[]string{"_ _ _ X _ _", "# _ P _ _ #", "# _ O _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"}},
			{sokobanBox("up"), sokobanMoved(3, "up"), 0, false, false,
				[]string{"_ _ P X _ _", "# _ _ _ _ #", "# _ O _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"}},
			{sokobanBox("up"), sokobanCollide(4, "up"), 0, false, false, nil},
			{sokobanBox("right"), sokobanPushed(5, "right"), 0, false, false,
				[]string{"_ _ _ P X _", "# _ _ _ _ #", "# _ O _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"}},
			{sokobanBox("right"), sokobanPushed(6, "right"), 0, false, false,
				[]string{"_ _ _ _ P X", "# _ _ _ _ #", "# _ O _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"}},
			{sokobanBox("right"), sokobanCollide(7, "right"), 0, false, false, nil},
		}},
		{name: "win", start: almost, steps: []sokobanStep{
			{sokobanBox("left"), sokobanMoved(1, "left"), 0, false, false,
				[]string{"# # # # # #", "# _ _ O _ #", "# _ _ X _ #", "# _ P _ _ #", "# _ _ √ _ #", "# # # # # #"}},
			{sokobanBox("right"), sokobanMoved(2, "right"), 0, false, false, almost},
			{sokobanBox("up"), sokobanWin, 1, true, false,
				[]string{"# # # # # #", "# _ _ √ _ #", "# _ _ P _ #", "# _ _ _ _ #", "# _ _ √ _ #", "# # # # # #"}},
		}},
		{name: "win by the last push", state: `{"turn_count": 5}`,
			start: []string{"# # # # # #", "# _ _ _ _ #", "# _ P X O #", "# _ _ _ _ #", "# _ _ _ √ #", "# # # # # #"},
			steps: []sokobanStep{
				{`I push it: \BOXED{Right}`, sokobanWin, 1, true, false,
					[]string{"# # # # # #", "# _ _ _ _ #", "# _ _ P √ #", "# _ _ _ _ #", "# _ _ _ √ #", "# # # # # #"}},
			}},
		{name: "win on the last turn beats the turn limit", state: `{"turn_count": 19}`,
			start: []string{"# # # # # #", "# _ _ _ _ #", "# _ P X O #", "# _ _ _ _ #", "# _ _ _ √ #", "# # # # # #"},
			steps: []sokobanStep{
				{sokobanBox("right"), sokobanWin, 1, true, false,
					[]string{"# # # # # #", "# _ _ _ _ #", "# _ _ P √ #", "# _ _ _ _ #", "# _ _ _ √ #", "# # # # # #"}},
			}},
		{name: "turn limit: half the boxes on targets", opts: `{"max_turns": 2}`, start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("down"), sokobanMoved(1, "down"), 0, false, false, onTarget},
			{sokobanBox("down"), turnLimitMessage, 0.5, true, true, pushed},
		}},
		{name: "turn limit: no box on a target", state: `{"turn_count": 19}`, start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("down"), turnLimitMessage, 0, true, true, onTarget},
		}},
		{name: "turn limit on a collision keeps the boxes' share", state: `{"turn_count": 19}`, start: almost, steps: []sokobanStep{
			{sokobanBox("down"), turnLimitMessage, 0.5, true, true, nil},
		}},
		{name: "turn limit on a push off a target", state: `{"turn_count": 19}`, start: boxOnTarget, steps: []sokobanStep{
			{sokobanBox("right"), turnLimitMessage, 0, true, true,
				[]string{"# # # # # #", "# _ _ _ _ #", "# _ _ + X #", "# _ _ _ _ #", "# _ X O _ #", "# # # # # #"}},
		}},
		{name: "turn limit with one box of three on a target", state: `{"max_turns": 1}`,
			start: []string{"# # # # # #", "# _ _ _ _ #", "# P X √ _ #", "# _ _ _ _ #", "# _ X O O #", "# # # # # #"},
			steps: []sokobanStep{
				{sokobanBox("right"), turnLimitMessage, 1.0 / 3, true, true, nil},
			}},
		{name: "format errors leave the room alone", start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("north"), sokobanInvalid(1), -0.1, true, false, nil},
			{"", sokobanInvalid(2), -0.1, true, false, nil},
			{"down", sokobanInvalid(3), -0.1, true, false, nil},
			{sokobanBox("rİght"), sokobanInvalid(4), -0.1, true, false, nil},
			{sokobanBox("rıght"), sokobanInvalid(5), -0.1, true, false, nil},
			{sokobanBox("down") + " " + sokobanBox("RıGHT"), sokobanInvalid(6), -0.1, true, false, nil},
			{sokobanBox("down"), sokobanMoved(7, "down"), 0, false, false, onTarget},
		}},
		{name: "format error on the last turn", state: `{"turn_count": 19}`, start: sokobanTranscriptRoom, steps: []sokobanStep{
			{"move down", sokobanInvalid(20), -0.1, true, true, nil},
		}},
		{name: "after done: keeps counting", opts: `{"max_turns": 1}`, start: sokobanTranscriptRoom, steps: []sokobanStep{
			{sokobanBox("down"), turnLimitMessage, 0, true, true, onTarget},
			{sokobanBox("down"), turnLimitMessage, 0.5, true, true, pushed}, // still ">= max_turns"
			{sokobanBox("x"), sokobanInvalid(3), -0.1, true, false, nil},    // "== max_turns" no longer holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, sokobanEasyID, tt.opts, sokobanWithState(t, sokobanPicture(t, tt.start...), tt.state))
			sokobanPlay(t, env, tt.start, tt.steps)
		})
	}
}

// sokobanRegexp is GEM's pattern as Go's regexp states it: Python's
// IGNORECASE also lets İ and ı match the i of "right", so they are listed.
// The tests check the hand-written parser against it.
var sokobanRegexp = regexp.MustCompile(`(?i)\\boxed\{(up|down|left|r[iİı]ght)\}`)

// sokobanRegexpMove is what GEM makes of the action according to the
// regexp: the lowercased last match, or "" for none. A quirky "right" is
// reported as "quirk", which GEM fails on and the port treats as no move.
func sokobanRegexpMove(action string) string {
	m := sokobanRegexp.FindAllStringSubmatch(action, -1)
	if len(m) == 0 {
		return ""
	}
	word := m[len(m)-1][1]
	if strings.ContainsAny(word, "İı") { // Go lowercases İ to a plain i, Python to i and U+0307
		return "quirk"
	}
	return strings.ToLower(word)
}

// TestSokobanParsing covers the action parser through Step, on an open room
// where every direction is a plain move, and checks it against the regexp.
func TestSokobanParsing(t *testing.T) {
	start := []string{"# # # # # #", "# _ _ _ _ #", "# _ P _ _ #", "# _ _ _ _ #", "# _ X O _ #", "# # # # # #"}
	tests := []struct{ name, action, dir string }{
		{"up", `\boxed{up}`, "up"},
		{"down", `\boxed{down}`, "down"},
		{"left", `\boxed{left}`, "left"},
		{"right", `\boxed{right}`, "right"},
		{"upper-case word", `\boxed{RIGHT}`, "right"},
		{"upper-case BOXED", `\BOXED{Down}`, "down"},
		{"mixed case", `\BoXeD{LeFt}`, "left"},
		{"capital I in right", `\boxed{rIght}`, "right"},
		{"doubled backslash", `\\boxed{up}`, "up"},
		{"inside text", `I will move $\boxed{up}$ now.`, "up"},
		{"last match wins", `\boxed{up}, no: \boxed{down}`, "down"},
		{"non-matching box skipped", `\boxed{left} then \boxed{north}`, "left"},
		{"backslash after the match", `\boxed{left} \ \boxed{`, "left"},
		{"invalid utf-8", "\\boxed{up}\xff\\boxed{\xff}", "up"},
		{"dotted capital I", `\boxed{rİght}`, ""},
		{"dotted capital I, upper case", `\BOXED{RİGHT}`, ""},
		{"dotless i", `\boxed{rıght}`, ""},
		{"quirk as the last match", `\boxed{up} \boxed{rıght}`, ""},
		{"quirk before a real match", `\boxed{rİght} \boxed{up}`, "up"},
		{"unknown word", `\boxed{north}`, ""},
		{"space inside", `\boxed{ up}`, ""},
		{"trailing space inside", `\boxed{up }`, ""},
		{"space before brace", `\boxed {up}`, ""},
		{"no backslash", `boxed{up}`, ""},
		{"double braces", `\boxed{{up}}`, ""},
		{"bracket for a brace", `\boxed[up}`, ""},
		{"longer word", `\boxed{upward}`, ""},
		{"fullwidth letters", `\boxed{ｕｐ}`, ""},
		{"dotted capital I elsewhere", `\boxed{İeft}`, ""},
		{"alternating case", `\boxed{lEfT}`, "left"},
		{"empty box", `\boxed{}`, ""},
		{"unclosed", `\boxed{up`, ""},
		{"bare word", `up`, ""},
		{"empty action", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, sokobanEasyID, "", sokobanPicture(t, start...))
			got := env.Step(tt.action)
			want := sokobanInvalid(1)
			if tt.dir != "" {
				want = sokobanMoved(1, tt.dir)
			}
			if got.Observation != want {
				t.Errorf("Step(%.60q) = %q, want %q", tt.action, got.Observation, want)
			}
			if re := sokobanRegexpMove(tt.action); re != tt.dir && !(re == "quirk" && tt.dir == "") {
				t.Errorf("regexp reads %q as %q, the table says %q", tt.action, re, tt.dir)
			}
		})
	}
}

func TestSokobanInstructions(t *testing.T) {
	for _, maxTurns := range []int{20, 50} {
		for _, dir := range sokobanDirections {
			env := newTestEnv(t, sokobanEasyID, fmt.Sprintf(`{"max_turns": %d}`, maxTurns), fmt.Sprintf(`{"example": %q}`, dir))
			want := "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n" +
				"When you are right next to a box, you can push it by moving in the same direction.\n" +
				"You cannot push a box through a wall or another box, and you cannot pull a box.\n" +
				fmt.Sprintf("you have to complete the puzzle within %d turns.\n", maxTurns) +
				"On the board, objects are represented as:\n" +
				"- The player (you) appears as 'P'\n" +
				"- Walls are represented with '#'\n" +
				"- Boxes are marked as 'X'\n" +
				"- Empty goals are shown with 'O'\n" +
				"- Boxes on goals are visualized with '√'\n" +
				"- Empty floor is shown as '_'\n" +
				"\n" +
				"To submit your move, type the command in \\boxed{}.\n" +
				fmt.Sprintf("For example: \\boxed{%s} to move %s.\n", dir, dir) +
				"Use logic and deduction to push all boxes onto the target positions!"
			if got := env.Instructions(); got != want {
				t.Errorf("%d turns, %s:\n got %q\nwant %q", maxTurns, dir, got, want)
			}
		}
	}
}

func TestSokobanRender(t *testing.T) {
	rows := []string{"# # # # # # #", "# _ X √ O X #", "# _ _ + _ _ _", "# # # # # # #", "# # # # # # #"}
	env := newTestEnv(t, sokobanEasyID, "", sokobanPicture(t, rows...))
	want := "Here is the current board layout:\n" +
		"# # # # # # #\n# _ X √ O X #\n# _ _ P _ _ _\n# # # # # # #\n# # # # # # #\n" +
		"\nEnter your move."
	if got := env.Info(); got["suffix"] != want || len(got) != 1 {
		t.Errorf("info %q, want suffix %q", got, want)
	}
}

// sokobanKey is a search state: the player's cell, then the boxes' cells in
// increasing order, as row-major indices.
type sokobanKey [16]uint8

// sokobanSolve is an independent solver: an A* search over single moves
// (indices into up, down, left, right) for a shortest sequence that puts
// every box on a target using at most maxMoves moves. Its heuristic, the sum
// of each box's push distance to the nearest target ignoring the other
// boxes, never overestimates and changes by at most one a move, so the first
// goal taken from the queue is optimal; a box on a cell from which no target
// can be reached ends the branch. complete is false when the search stopped
// at maxStates states before deciding.
func sokobanSolve(fixed [][]int, boxes []sokobanPos, player sokobanPos, maxMoves, maxStates int) (moves []int, found, complete bool) {
	rows, cols := len(fixed), len(fixed[0])
	n := len(boxes)
	drs, dcs := [4]int{-1, 1, 0, 0}, [4]int{0, 0, -1, 1}
	wall := func(r, c int) bool { return r < 0 || r >= rows || c < 0 || c >= cols || fixed[r][c] == sokobanWall }
	// dist[cell] is the fewest pushes that bring a lone box from cell to a
	// target, -1 for never: a breadth-first search back from the targets
	// through pushes whose box and player cells are not walls.
	dist := make([]int, rows*cols)
	for i := range dist {
		dist[i] = -1
	}
	var queue []int
	for r := range rows {
		for c := range cols {
			if fixed[r][c] == sokobanTarget {
				dist[r*cols+c] = 0
				queue = append(queue, r*cols+c)
			}
		}
	}
	for len(queue) > 0 {
		y := queue[0]
		queue = queue[1:]
		for m := range 4 {
			// A push in direction m moved the box from x to y, the player from x-m to x.
			xr, xc := y/cols-drs[m], y%cols-dcs[m]
			if wall(xr, xc) || wall(xr-drs[m], xc-dcs[m]) || dist[xr*cols+xc] >= 0 {
				continue
			}
			dist[xr*cols+xc] = dist[y] + 1
			queue = append(queue, xr*cols+xc)
		}
	}
	h := func(k sokobanKey) int {
		sum := 0
		for _, v := range k[1 : 1+n] {
			if dist[v] < 0 {
				return -1
			}
			sum += dist[v]
		}
		return sum
	}
	var start sokobanKey
	start[0] = uint8(player[0]*cols + player[1])
	idx := make([]int, n)
	for i, b := range boxes {
		idx[i] = b[0]*cols + b[1]
	}
	slices.Sort(idx)
	for i, v := range idx {
		start[1+i] = uint8(v)
	}
	// seen holds the fewest moves found to each state and the last of them.
	type visit struct {
		prev sokobanKey
		g    int32
		move int8
	}
	type node struct {
		key sokobanKey
		g   int
	}
	seen := map[sokobanKey]visit{start: {move: -1}}
	buckets := make([][]node, maxMoves+1) // by f = g + h, which never decreases along a path
	if f := h(start); f >= 0 && f <= maxMoves {
		buckets[f] = append(buckets[f], node{start, 0})
	}
	for f := range buckets {
		// Last in, first out: among equal f the deepest state goes first,
		// which reaches a goal much sooner and, with this heuristic, still
		// takes every state at its fewest moves.
		for len(buckets[f]) > 0 {
			cur := buckets[f][len(buckets[f])-1]
			buckets[f] = buckets[f][:len(buckets[f])-1]
			if int(seen[cur.key].g) < cur.g {
				continue // reached more cheaply since
			}
			if h(cur.key) == 0 {
				for v := seen[cur.key]; v.move >= 0; v = seen[v.prev] {
					moves = append(moves, int(v.move))
				}
				slices.Reverse(moves)
				return moves, true, true
			}
			pr, pc := int(cur.key[0])/cols, int(cur.key[0])%cols
			for m := range 4 {
				r, c := pr+drs[m], pc+dcs[m]
				if wall(r, c) {
					continue
				}
				next := cur.key
				next[0] = uint8(r*cols + c)
				if j := slices.Index(cur.key[1:1+n], uint8(r*cols+c)); j >= 0 {
					br, bc := r+drs[m], c+dcs[m]
					if wall(br, bc) || slices.Contains(cur.key[1:1+n], uint8(br*cols+bc)) {
						continue
					}
					next[1+j] = uint8(br*cols + bc)
					slices.Sort(next[1 : 1+n])
				}
				nh := h(next)
				if nh < 0 || cur.g+1+nh > maxMoves {
					continue
				}
				if v, ok := seen[next]; ok && int(v.g) <= cur.g+1 {
					continue
				}
				if len(seen) >= maxStates {
					return nil, false, false
				}
				seen[next] = visit{cur.key, int32(cur.g + 1), int8(m)}
				buckets[cur.g+1+nh] = append(buckets[cur.g+1+nh], node{next, cur.g + 1})
			}
		}
	}
	return nil, false, true
}

// sokobanCheckRoom checks the shape of a room: the size, walls on the whole
// border, num_boxes targets and boxes, the boxes on distinct floor cells off
// the targets and out of dead corners, and the player on a free cell.
func sokobanCheckRoom(t *testing.T, what string, s sokobanState, rows, cols int) {
	t.Helper()
	if err := s.validate(); err != nil {
		t.Fatalf("%s: invalid state: %v", what, err)
	}
	if len(s.RoomFixed) != rows || len(s.RoomFixed[0]) != cols {
		t.Fatalf("%s: room is %dx%d, want %dx%d", what, len(s.RoomFixed), len(s.RoomFixed[0]), rows, cols)
	}
	wall := func(p sokobanPos) bool { return s.RoomFixed[p[0]][p[1]] == sokobanWall }
	for r, row := range s.RoomFixed {
		for c := range row {
			if (r == 0 || r == rows-1 || c == 0 || c == cols-1) && !wall(sokobanPos{r, c}) {
				t.Fatalf("%s: border cell (%d, %d) is not a wall", what, r, c)
			}
		}
	}
	for _, b := range s.Boxes {
		if s.RoomFixed[b[0]][b[1]] == sokobanTarget {
			t.Fatalf("%s: box %v starts on a target", what, b)
		}
		vertical := wall(b.add(sokobanSteps[0])) || wall(b.add(sokobanSteps[1]))
		horizontal := wall(b.add(sokobanSteps[2])) || wall(b.add(sokobanSteps[3]))
		if vertical && horizontal {
			t.Fatalf("%s: box %v is in a dead corner", what, b)
		}
	}
}

// sokobanSolveAndPlay solves env's room with sokobanSolve within limit moves
// and plays the solution through Step, which must end in a win. It reports
// false when the solver hit its state cap.
func sokobanSolveAndPlay(t *testing.T, what string, env Env, limit int) bool {
	t.Helper()
	s := env.(*sokoban).s
	moves, found, complete := sokobanSolve(s.RoomFixed, s.Boxes, s.Player, limit, 2_000_000)
	if !complete {
		return false
	}
	if !found {
		t.Fatalf("%s: no solution within %d moves:\n%s", what, limit, env.Info()["suffix"])
	}
	if len(moves) == 0 {
		t.Fatalf("%s: solved at the start", what)
	}
	for i, m := range moves {
		r := env.Step(sokobanBox(sokobanDirections[m]))
		if last := i == len(moves)-1; last != (r.Observation == sokobanWin) || last && (r.Reward != 1 || !r.Won) {
			t.Fatalf("%s: move %d of the solution %v gave %+v", what, i+1, moves, r)
		}
	}
	return true
}

// TestSokobanGeneratedSolvable is the generator's property test: over many
// seeds for every registered shape and a few overrides, the room has the
// right size, walls on the whole border and the right number of boxes off
// their targets, and an independent solver solves it within the turn limit;
// the solution, played through Step, wins.
func TestSokobanGeneratedSolvable(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 40
	}
	configs := []struct {
		id, opts        string
		rows, cols, box int
		seeds           uint64
	}{
		{sokobanEasyID, "", 6, 6, 2, seeds},
		{sokobanHardID, "", 8, 8, 4, seeds},
		// The random variant's large draw; its searches are the longest.
		{sokobanRandomID, `{"dim_room": [8, 8], "num_boxes": 5, "max_turns": 50}`, 8, 8, 5, seeds / 3},
		{sokobanEasyID, `{"dim_room": [5, 7], "num_boxes": 1, "max_turns": 10}`, 5, 7, 1, seeds},
		{sokobanEasyID, `{"dim_room": [7, 5], "num_boxes": 3, "max_turns": 30}`, 7, 5, 3, seeds},
	}
	for _, cfg := range configs {
		t.Run(cfg.id+cfg.opts, func(t *testing.T) {
			env := newTestEnv(t, cfg.id, cfg.opts, "")
			distinct, capped := map[string]bool{}, 0
			for seed := range cfg.seeds {
				env.Reset(NewRNG(seed))
				what := fmt.Sprintf("seed %d", seed)
				s := env.(*sokoban).s
				if s.NumBoxes != cfg.box || len(s.Boxes) != cfg.box {
					t.Fatalf("%s: %d boxes, want %d", what, len(s.Boxes), cfg.box)
				}
				sokobanCheckRoom(t, what, s, cfg.rows, cfg.cols)
				distinct[env.Info()["suffix"]] = true
				if !sokobanSolveAndPlay(t, what, env, env.MaxTurns()) {
					capped++
				}
			}
			if capped > 0 {
				t.Errorf("the solver gave up on %d of %d rooms", capped, cfg.seeds)
			}
			if len(distinct) < int(cfg.seeds)*3/4 {
				t.Errorf("only %d distinct rooms from %d seeds", len(distinct), cfg.seeds)
			}
		})
	}
}

// TestSokobanFallbackRare: on the registered shapes the generator itself
// succeeds; the fixed fallback room stays a safety net.
func TestSokobanFallbackRare(t *testing.T) {
	for _, c := range []sokobanConfig{{6, 6, 2, 20}, {8, 8, 4, 50}, {8, 8, 5, 50}} {
		fallbacks := 0
		for seed := range uint64(500) {
			if _, _, _, generated := sokobanGenerate(NewRNG(seed), c.rows, c.cols, c.numBoxes, c.maxTurns); !generated {
				fallbacks++
			}
		}
		if fallbacks > 5 {
			t.Errorf("%+v: %d fallback rooms in 500 resets", c, fallbacks)
		}
	}
}

// TestSokobanFallback: when no walk can uncover the targets (a turn limit of
// one move cannot pull two boxes), Reset still ends, with the fallback room.
// In both orientations it is solved by pushing each box once, in
// 3*num_boxes-2 moves, and the solver finds nothing shorter.
func TestSokobanFallback(t *testing.T) {
	for _, c := range []sokobanConfig{{6, 6, 2, 1}, {5, 5, 3, 1}, {8, 5, 5, 1}, {5, 16, 14, 1}, {16, 16, 14, 1}} {
		what := fmt.Sprintf("%+v", c)
		fixed, boxes, player, generated := sokobanGenerate(NewRNG(1), c.rows, c.cols, c.numBoxes, c.maxTurns)
		wantFixed, wantBoxes, wantPlayer := sokobanFallback(c.rows, c.cols, c.numBoxes)
		if generated || !slices.EqualFunc(fixed, wantFixed, slices.Equal) || !slices.Equal(boxes, wantBoxes) || player != wantPlayer {
			t.Fatalf("%s: not the fallback room: generated %v, %v %v", what, generated, boxes, player)
		}
		env := newTestEnv(t, sokobanEasyID, "", "")
		state, _ := json.Marshal(sokobanState{NumBoxes: c.numBoxes, MaxTurns: 100, RoomFixed: fixed, Boxes: boxes, Player: player, Example: "up"})
		mustRestore(t, env, string(state))
		sokobanCheckRoom(t, what, env.(*sokoban).s, c.rows, c.cols)
		if c.numBoxes <= 5 {
			s := env.(*sokoban).s
			if moves, found, complete := sokobanSolve(s.RoomFixed, s.Boxes, s.Player, 3*c.numBoxes-2, 1_000_000); !complete || !found || len(moves) != 3*c.numBoxes-2 {
				t.Fatalf("%s: solver found %v (found %v, complete %v)", what, moves, found, complete)
			}
		}
		// Push toward the targets, then step back, across and toward them again.
		toward, back, across := "up", "down", "right"
		if c.numBoxes > c.cols-2 {
			toward, back, across = "left", "right", "down"
		}
		plan := []string{toward}
		for range c.numBoxes - 1 {
			plan = append(plan, back, across, toward)
		}
		for i, dir := range plan {
			r := env.Step(sokobanBox(dir))
			if last := i == len(plan)-1; last != (r.Observation == sokobanWin) {
				t.Fatalf("%s: move %d (%s) of %v gave %+v", what, i+1, dir, plan, r)
			}
		}
	}
}

// TestSokobanResetTiming: resets that try every room they may before they
// fall back, the slowest kind, still end quickly.
func TestSokobanResetTiming(t *testing.T) {
	for _, maxTurns := range []int{1, 50, 1000} {
		env := newTestEnv(t, sokobanEasyID, fmt.Sprintf(`{"dim_room": [16, 16], "num_boxes": 14, "max_turns": %d}`, maxTurns), "")
		start := time.Now()
		env.Reset(NewRNG(3))
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("max_turns %d: reset took %v", maxTurns, d)
		}
		t.Logf("max_turns %d: reset took %v", maxTurns, time.Since(start))
	}
}

// TestSokobanRandomReset checks the drawn parameters over many seeds.
func TestSokobanRandomReset(t *testing.T) {
	configs := map[sokobanConfig]int{}
	examples := map[string]int{}
	for seed := range uint64(400) {
		env := newTestEnv(t, sokobanRandomID, "", "")
		obs, info := env.Reset(NewRNG(seed))
		s := env.(*sokoban).s
		c := sokobanConfig{len(s.RoomFixed), len(s.RoomFixed[0]), s.NumBoxes, s.MaxTurns}
		if !slices.Contains(sokobanRandomConfigs[:], c) || env.MaxTurns() != s.MaxTurns || !s.Random || s.TurnCount != 0 {
			t.Fatalf("seed %d: drew %+v: %s", seed, c, env.Snapshot())
		}
		sokobanCheckRoom(t, fmt.Sprintf("seed %d", seed), s, c.rows, c.cols)
		configs[c]++
		examples[s.Example]++
		if !strings.Contains(obs, fmt.Sprintf("\nyou have to complete the puzzle within %d turns.\n", s.MaxTurns)) ||
			!strings.Contains(obs, fmt.Sprintf("For example: \\boxed{%s} to move %s.\n", s.Example, s.Example)) {
			t.Fatalf("seed %d: instructions do not show the drawn values:\n%s", seed, obs)
		}
		if !maps.Equal(info, env.Info()) {
			t.Fatalf("seed %d: reset info %q", seed, info)
		}
	}
	if len(configs) != 2 || len(examples) != 4 {
		t.Errorf("draws not spread: configs %v, examples %v", configs, examples)
	}
	for c, k := range configs {
		if k < 150 {
			t.Errorf("config %+v drawn %d times of 400", c, k)
		}
	}
}

// TestSokobanSameSeed checks that a seed fixes the whole episode, for every id.
func TestSokobanSameSeed(t *testing.T) {
	for _, id := range sokobanIDs {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(seed uint64, _ Env) []string {
				acts := make([]string, 60)
				for i := range acts {
					acts[i] = sokobanBox(sokobanDirections[(i*7+int(seed))%4])
				}
				return acts
			})
			if len(distinct) < 15 {
				t.Errorf("only %d distinct episodes from 20 seeds", len(distinct))
			}
		})
	}
}

// TestSokobanSnapshotRoundTrip restores a mid-game snapshot into a fresh env
// and checks both behave identically from there on.
func TestSokobanSnapshotRoundTrip(t *testing.T) {
	for _, id := range sokobanIDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := newTestEnv(t, id, "", "")
				a.Reset(NewRNG(seed))
				a.Step(sokobanBox("left"))
				a.Step(sokobanBox("up"))

				b := newTestEnv(t, id, "", "")
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				if !maps.Equal(a.Info(), b.Info()) {
					t.Fatalf("info differs: %q vs %q", a.Info(), b.Info())
				}
				for i := range 30 {
					stepBoth(t, a, b, sokobanBox(sokobanDirections[(i*5+int(seed))%4]))
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

func TestSokobanSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, sokobanEasyID, "", sokobanWithState(t, sokobanPicture(t, sokobanTranscriptRoom...), `{"example": "up"}`))
	room := `"room_fixed":[[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]]`
	want := `{"num_boxes":2,"max_turns":20,` + room + `,"boxes":[[2,2],[3,3]],"player":[1,3],"turn_count":0,"example":"up","random":false}`
	wantSnapshot(t, env, "after restore", want)
	env.Step(sokobanBox("down"))
	env.Step(sokobanBox("down"))
	env.Step(sokobanBox("left"))
	env.Step(sokobanBox("up"))
	env.Step(sokobanBox("up"))
	// The box pushed onto (0-based) row 1 now comes first.
	want = `{"num_boxes":2,"max_turns":20,` + room + `,"boxes":[[1,2],[4,3]],"player":[2,2],"turn_count":5,"example":"up","random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, sokobanRandomID)
}

func TestSokobanRestore(t *testing.T) {
	base := sokobanWithState(t, sokobanPicture(t, sokobanTranscriptRoom...), `{"example": "up"}`) // on -easy
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "boxes in any order are sorted", state: `{"boxes": [[3,3],[2,2]]}`, check: func(t *testing.T, env Env) {
			if got := env.(*sokoban).s.Boxes; !slices.Equal(got, []sokobanPos{{2, 2}, {3, 3}}) {
				t.Errorf("boxes %v", got)
			}
		}},
		{name: "player alone", state: `{"player": [4,1]}`, check: func(t *testing.T, env Env) {
			sokobanPlay(t, env, nil, []sokobanStep{{sokobanBox("up"), sokobanMoved(1, "up"), 0, false, false,
				[]string{"# # # # # #", "# _ _ _ _ #", "# _ X O _ #", "# P _ X _ #", "# _ _ O _ #", "# # # # # #"}}})
		}},
		{name: "turn count and limit", state: `{"turn_count": 3, "max_turns": 4}`, check: func(t *testing.T, env Env) {
			if env.Turn() != 3 || env.MaxTurns() != 4 || !strings.Contains(env.Instructions(), "within 4 turns.") {
				t.Errorf("turn %d of %d", env.Turn(), env.MaxTurns())
			}
		}},
		{name: "a larger room with more boxes", state: sokobanPicture(t,
			"# # # # # # # #", "# _ _ _ _ _ _ #", "# _ X O _ X O #", "# _ _ P _ _ _ #", "# # # # # # # #"), check: func(t *testing.T, env Env) {
			if s := env.(*sokoban).s; s.NumBoxes != 2 || len(s.RoomFixed) != 5 || len(s.RoomFixed[0]) != 8 {
				t.Errorf("state %s", env.Snapshot())
			}
			env.Reset(NewRNG(1)) // the next room has the restored size
			sokobanCheckRoom(t, "reset", env.(*sokoban).s, 5, 8)
		}},
		{name: "random flag", state: `{"random": true}`},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "num_boxes without boxes", state: `{"num_boxes": 3}`, wantErr: "num_boxes"},
		{name: "num_boxes zero", state: `{"num_boxes": 0, "boxes": [], "room_fixed": [[0,0,0,0,0],[0,1,1,1,0],[0,1,1,1,0],[0,1,1,1,0],[0,0,0,0,0]]}`, wantErr: "num_boxes"},
		{name: "too many boxes for the room", state: sokobanPicture(t,
			"# # # # #", "# √ √ √ #", "# √ P _ #", "# _ _ _ #", "# # # # #"), wantErr: "num_boxes"},
		{name: "room too small", state: sokobanPicture(t, "# # # #", "# P X #", "# O _ #", "# # # #"), wantErr: "room_fixed"},
		{name: "room too wide", state: sokobanWallRoom(6, 17), wantErr: "room_fixed"},
		{name: "room too narrow", state: sokobanWallRoom(6, 4), wantErr: "room_fixed"},
		{name: "room too tall", state: sokobanWallRoom(17, 6), wantErr: "room_fixed"},
		{name: "ragged room", state: `{"room_fixed": [[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,1,1,1,1],[0,1,1,2,1,0],[0,0,0,0,0,0]]}`, wantErr: "room_fixed"},
		{name: "null row", state: `{"room_fixed": [[0,0,0,0,0,0],null,[0,1,1,2,1,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]]}`, wantErr: "room_fixed"},
		{name: "unknown cell code", state: `{"room_fixed": [[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,1,1,3,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]]}`, wantErr: "room_fixed"},
		{name: "missing target", state: `{"room_fixed": [[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,1,1,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]]}`, wantErr: "room_fixed"},
		{name: "null room", state: `{"room_fixed": null}`, wantErr: "room_fixed"},
		{name: "no rows", state: `{"room_fixed": []}`, wantErr: "room_fixed"},
		{name: "box on a wall", state: `{"boxes": [[0,0],[3,3]]}`, wantErr: "boxes"},
		{name: "box off the room", state: `{"boxes": [[2,2],[3,6]]}`, wantErr: "boxes"},
		{name: "two boxes on one cell", state: `{"boxes": [[2,2],[2,2]]}`, wantErr: "boxes"},
		{name: "one box too few", state: `{"boxes": [[2,2]]}`, wantErr: "boxes"},
		{name: "box not a pair", state: `{"boxes": [[2,2],[3,3,1]]}`, wantErr: "boxes"},
		{name: "null box", state: `{"boxes": [[2,2],null]}`, wantErr: "boxes"},
		{name: "null boxes", state: `{"boxes": null}`, wantErr: "boxes"},
		{name: "player on a box", state: `{"player": [2,2]}`, wantErr: "player"},
		{name: "player on a wall", state: `{"player": [0,3]}`, wantErr: "player"},
		{name: "player off the room", state: `{"player": [-1,3]}`, wantErr: "player"},
		{name: "player not a pair", state: `{"player": [1]}`, wantErr: "player"},
		{name: "unknown example", state: `{"example": "north"}`, wantErr: "example"},
		{name: "upper-case example", state: `{"example": "UP"}`, wantErr: "example"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"dim_room": [6,6]}`, wantErr: "dim_room"},
		{name: "not an object", state: `[7]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, sokobanEasyID, "", base)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

// sokobanWallRoom is a room_fixed state of the given size, all wall.
func sokobanWallRoom(rows, cols int) string {
	row := "[" + strings.TrimSuffix(strings.Repeat("0,", cols), ",") + "]"
	return `{"room_fixed": [` + strings.TrimSuffix(strings.Repeat(row+",", rows), ",") + `]}`
}

// TestSokobanRestoreDoesNotAlias: a restored env and the env whose snapshot
// it took share no room or boxes, and a failed restore leaves the live state alone.
func TestSokobanRestoreDoesNotAlias(t *testing.T) {
	a := newTestEnv(t, sokobanEasyID, "", sokobanPicture(t, sokobanTranscriptRoom...))
	before := a.Snapshot()
	b := newTestEnv(t, sokobanEasyID, "", "")
	if err := b.Restore(before); err != nil {
		t.Fatal(err)
	}
	b.Step(sokobanBox("down"))
	b.Step(sokobanBox("down"))
	if after := a.Snapshot(); !bytes.Equal(after, before) {
		t.Errorf("stepping the restored env changed the original:\n%s\n%s", before, after)
	}
	wantRestore(t, a, `{"room_fixed": [[0,0,0,0,0,0],[0,2,2,2,2,0],[0,2,2,2,2,0],[0,2,2,2,2,0],[0,2,2,2,2,0],[0,0,0,0,0,0]]}`, "room_fixed")
	wantRestore(t, a, `{"boxes": [[4,4],[4,3]], "turn_count": -1}`, "turn_count")
}

func TestSokobanOptions(t *testing.T) {
	tests := []struct {
		name, id, opts                   string
		wantRandom                       bool
		wantRows, wantCols, wantBoxes, m int
	}{
		{name: "easy", id: sokobanEasyID, wantRows: 6, wantCols: 6, wantBoxes: 2, m: 20},
		{name: "hard", id: sokobanHardID, opts: `{}`, wantRows: 8, wantCols: 8, wantBoxes: 4, m: 50},
		{name: "max_turns", id: sokobanEasyID, opts: `{"max_turns": 7}`, wantRows: 6, wantCols: 6, wantBoxes: 2, m: 7},
		{name: "num_boxes", id: sokobanHardID, opts: `{"num_boxes": 3}`, wantRows: 8, wantCols: 8, wantBoxes: 3, m: 50},
		{name: "dim_room", id: sokobanEasyID, opts: `{"dim_room": [7, 9]}`, wantRows: 7, wantCols: 9, wantBoxes: 2, m: 20},
		{name: "unknown keys ignored", id: sokobanEasyID, opts: `{"seed": 3, "room_size": null}`, wantRows: 6, wantCols: 6, wantBoxes: 2, m: 20},
		{name: "null num_boxes makes it random", id: sokobanEasyID, opts: `{"num_boxes": null}`, wantRandom: true},
		{name: "null max_turns makes it random", id: sokobanHardID, opts: `{"max_turns": null}`, wantRandom: true},
		{name: "fixed on the random id keeps the default room size", id: sokobanRandomID, opts: `{"num_boxes": 3, "max_turns": 9}`,
			wantRows: 6, wantCols: 6, wantBoxes: 3, m: 9},
		{name: "one given stays random", id: sokobanRandomID, opts: `{"num_boxes": 3}`, wantRandom: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			s := env.(*sokoban).s
			if s.Random != tt.wantRandom {
				t.Fatalf("state %s", env.Snapshot())
			}
			if tt.wantRandom {
				// Reset drew the parameters; values given were overwritten, as in GEM.
				c := sokobanConfig{len(s.RoomFixed), len(s.RoomFixed[0]), s.NumBoxes, s.MaxTurns}
				if !slices.Contains(sokobanRandomConfigs[:], c) {
					t.Errorf("drew %+v", c)
				}
				return
			}
			if env.MaxTurns() != tt.m || !strings.Contains(env.Instructions(), fmt.Sprintf("within %d turns.", tt.m)) {
				t.Errorf("max turns %d, want %d", env.MaxTurns(), tt.m)
			}
			sokobanCheckRoom(t, tt.name, s, tt.wantRows, tt.wantCols)
			if s.NumBoxes != tt.wantBoxes {
				t.Errorf("%d boxes, want %d", s.NumBoxes, tt.wantBoxes)
			}
		})
	}
}

func TestSokobanBadOptions(t *testing.T) {
	tests := []badOption{
		{"max_turns zero", sokobanEasyID, `{"max_turns": 0}`, "max_turns"},
		{"max_turns string", sokobanEasyID, `{"max_turns": "20"}`, "max_turns"},
		{"max_turns fractional", sokobanHardID, `{"max_turns": 2.5}`, "max_turns"},
		{"num_boxes zero", sokobanEasyID, `{"num_boxes": 0}`, "num_boxes"},
		{"num_boxes too many", sokobanEasyID, `{"num_boxes": 5}`, "num_boxes"},
		{"num_boxes bad type on the random id", sokobanRandomID, `{"num_boxes": true}`, "num_boxes"},
		{"dim_room too small", sokobanEasyID, `{"dim_room": [4, 6]}`, "dim_room"},
		{"dim_room too large", sokobanEasyID, `{"dim_room": [6, 17]}`, "dim_room"},
		{"dim_room not a pair", sokobanEasyID, `{"dim_room": [6]}`, "dim_room"},
		{"dim_room a number", sokobanEasyID, `{"dim_room": 6}`, "dim_room"},
		{"dim_room null", sokobanHardID, `{"dim_room": null}`, "dim_room"},
		{"not an object", sokobanEasyID, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

func TestSokobanRegistry(t *testing.T) {
	want := map[string]specWant{
		sokobanEasyID:   {map[string]any{"dim_room": [2]int{6, 6}, "num_boxes": 2, "max_turns": 20}, 20},
		sokobanHardID:   {map[string]any{"dim_room": [2]int{8, 8}, "num_boxes": 4, "max_turns": 50}, 50},
		sokobanRandomID: {map[string]any{"dim_room": [2]int{6, 6}, "num_boxes": nil, "max_turns": nil}, 0},
	}
	var got []string
	for _, id := range IDs() {
		if strings.HasPrefix(id, "game:Sokoban-") {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("Sokoban ids %v", got)
	}
	wantSpecs(t, "Sokoban", "", want)
}

// TestSokobanBeforeReset: New leaves the fallback room, so an env used
// before Reset plays and does not panic.
func TestSokobanBeforeReset(t *testing.T) {
	for _, id := range sokobanIDs {
		env := mustNew(t, id)
		s := env.(*sokoban).s
		if err := s.validate(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if r := env.Step(sokobanBox("up")); r.Observation != sokobanPushed(1, "up") {
			t.Errorf("%s: %+v", id, r)
		}
		for _, act := range []string{sokobanBox("left"), "x", sokobanBox("rıght")} {
			env.Step(act)
		}
		_ = env.Instructions()
		_ = env.Snapshot()
	}
}

// TestSokobanHugeAction steps 1 MB actions: the parser is linear, so each
// completes well within a generous deadline.
func TestSokobanHugeAction(t *testing.T) {
	for name, action := range directionHugeActions() {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, sokobanEasyID, "", sokobanPicture(t, sokobanTranscriptRoom...))
			if r := stepWithin(t, env, action, time.Minute); r.Observation != sokobanCollide(1, "up") {
				t.Errorf("observation %q", r.Observation)
			}
		})
	}
}

// FuzzSokobanStep feeds arbitrary action text to Step: it must never panic,
// the parser must agree with GEM's regexp, every observation must be one of
// GEM's lines with its reward and flags, and the state must stay valid.
func FuzzSokobanStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{up}`, `\BOXED{Down}`, `\\boxed{left}`, `\boxed{right}`, `\boxed{rİght}`, `\boxed{rıght}`,
		`\boxed{north}`, `\boxed{ up}`, `\boxed{}`, `first \boxed{up} then \boxed{left}`, "\\boxed{up}\xff", "",
		`\boxed{up} \boxed{RİGHT}`, `\boxed[up]`,
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		want := sokobanRegexpMove(action)
		got := ""
		if d, ok := sokobanParseMove(action); ok {
			got = sokobanDirections[d]
		}
		if got != want && !(want == "quirk" && got == "") {
			t.Fatalf("parsed %q as %q, the regexp as %q", action, got, want)
		}
		env := fuzzEnv(t, sokobanIDs, which, seed)
		// Step past the turn limit to reach every branch, including the permissive after-done ones.
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn := env.Turn()
			switch obs := r.Observation; {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), sokobanInvalid(turn), turnLimitMessage):
			case obs == sokobanWin:
				if r.Reward != 1 || !r.Terminated || r.Truncated || !r.Won {
					t.Fatalf("win result %+v", r)
				}
			case strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you ", turn)):
				if r.Reward != 0 || r.Terminated || r.Truncated {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", obs)
			}
			s := env.(*sokoban).s
			if err := s.validate(); err != nil {
				t.Fatalf("state after step: %v", err)
			}
			if r.Info["suffix"] != "Here is the current board layout:\n"+s.render()+"\nEnter your move." || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
		}
	})
}

// BenchmarkSokobanReset measures Reset, which generates a room, for each id.
func BenchmarkSokobanReset(b *testing.B) {
	for _, id := range sokobanIDs {
		b.Run(id, func(b *testing.B) {
			env := mustNew(b, id)
			seed := uint64(0)
			for b.Loop() {
				env.Reset(NewRNG(seed))
				seed++
			}
		})
	}
}
