package envs

import (
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
	hanoiEasy   = "game:TowerofHanoi-v0-easy"
	hanoiHard   = "game:TowerofHanoi-v0-hard"
	hanoiRandom = "game:TowerofHanoi-v0-random"

	hanoiNoAction = "You did not provide a valid action."
	hanoiWin      = "Congratulations! You solved the Tower of Hanoi Puzzle"
)

var hanoiIDs = []string{hanoiEasy, hanoiHard, hanoiRandom}

// hanoiStep is one action, the result GEM gives for it, and the board after
// it as "A|B|C" with disks bottom to top (e.g. "32||1"); an empty board skips
// the board check.
type hanoiStep struct {
	action      string
	obs         string
	reward      float64
	term, trunc bool
	board       string
}

// hanoiSuffixFor builds GEM's suffix for a board written as "A|B|C".
func hanoiSuffixFor(t testing.TB, board string) string {
	t.Helper()
	towers := strings.Split(board, "|")
	if len(towers) != 3 {
		t.Fatalf("bad board %q", board)
	}
	var sb strings.Builder
	sb.WriteString("Here is the current state of the tower of hanoi:\n")
	for i, tw := range towers {
		var disks []string
		for _, d := range tw {
			disks = append(disks, string(d))
		}
		fmt.Fprintf(&sb, "%c: [%s]\n", 'A'+i, strings.Join(disks, ", "))
	}
	sb.WriteString("\nEnter your move.")
	return sb.String()
}

// hanoiPlay applies each action and compares the whole StepResult.
func hanoiPlay(t *testing.T, env Env, steps []hanoiStep) {
	t.Helper()
	for i, s := range steps {
		got := env.Step(s.action)
		if got.Observation != s.obs || got.Reward != s.reward || got.Terminated != s.term || got.Truncated != s.trunc {
			t.Fatalf("step %d (%.60q):\n got %+v\nwant %q %v %v %v", i+1, s.action, got, s.obs, s.reward, s.term, s.trunc)
		}
		if len(got.Info) != 1 {
			t.Fatalf("step %d: info %v", i+1, got.Info)
		}
		if s.board != "" {
			if want := hanoiSuffixFor(t, s.board); got.Info["suffix"] != want {
				t.Fatalf("step %d: suffix\n got %q\nwant %q", i+1, got.Info["suffix"], want)
			}
		}
	}
}

func hanoiMoved(turn, disk int, src, dst string) string {
	return fmt.Sprintf("At turn %d, you moved disk %d from tower %s to tower %s.", turn, disk, src, dst)
}

func hanoiEmpty(turn int, src string) string {
	return fmt.Sprintf("At turn %d, you tried to move from tower %s, which is empty.", turn, src)
}

func hanoiLarger(turn int, src, dst string) string {
	return fmt.Sprintf("At turn %d, you tried to move from tower %s to tower %s, but the top disk on tower %s is larger than the top disk on tower %s.", turn, src, dst, src, dst)
}

func hanoiBox(src, dst string) string { return `\boxed{` + src + " " + dst + `}` }

// hanoiFixtureCases gives the id each GEM transcript was produced with; the
// game has no hidden state to restore beyond the registered parameters.
var hanoiFixtureCases = map[string]struct {
	id    string
	state string
}{
	"th-01.jsonl": {hanoiEasy, ""},
	"th-02.jsonl": {hanoiEasy, ""},
	"th-03.jsonl": {hanoiEasy, ""},
}

// TestTowerofHanoiFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestTowerofHanoiFixtures(t *testing.T) {
	replayFixtures(t, "hanoi", hanoiFixtureCases, func(t *testing.T, fc struct{ id, state string }, reset fixtureReset) Env {
		env := mustNew(t, fc.id)
		obs, info := env.Reset(NewRNG(7))
		if fc.state != "" {
			mustRestore(t, env, fc.state)
			obs = env.Instructions()
		}
		if obs != reset.Observation || env.Instructions() != obs {
			t.Errorf("instructions:\n got %q\nwant %q", obs, reset.Observation)
		}
		if !maps.Equal(info, reset.Info) {
			t.Errorf("reset info = %q, want %q", info, reset.Info)
		}
		return env
	})
}

// TestTowerofHanoiBranches covers every branch of Step for every registered id.
func TestTowerofHanoiBranches(t *testing.T) {
	tests := []struct {
		name, id, opts, state string
		steps                 []hanoiStep
	}{
		// -easy: 3 disks, 10 turns.
		{name: "easy/empty sources", id: hanoiEasy, steps: []hanoiStep{
			{hanoiBox("B", "A"), hanoiEmpty(1, "B"), 0, false, false, "321||"},
			{hanoiBox("C", "C"), hanoiEmpty(2, "C"), 0, false, false, "321||"}, // same tower, but empty
			{hanoiBox("A", "B"), hanoiMoved(3, 1, "A", "B"), 0, false, false, "32|1|"},
		}},
		{name: "easy/larger onto smaller, every pair", id: hanoiEasy, state: `{"board": {"A": [3], "B": [2], "C": [1]}}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), hanoiLarger(1, "A", "B"), 0, false, false, "3|2|1"},
			{hanoiBox("A", "C"), hanoiLarger(2, "A", "C"), 0, false, false, "3|2|1"},
			{hanoiBox("B", "C"), hanoiLarger(3, "B", "C"), 0, false, false, "3|2|1"},
			{hanoiBox("C", "B"), hanoiMoved(4, 1, "C", "B"), 0, false, false, "3|21|"},
			{hanoiBox("A", "C"), hanoiMoved(5, 3, "A", "C"), 0, false, false, "|21|3"}, // onto an empty tower
		}},
		{name: "easy/same-tower moves are legal no-ops", id: hanoiEasy, steps: []hanoiStep{
			{hanoiBox("A", "A"), hanoiMoved(1, 1, "A", "A"), 0, false, false, "321||"},
			{hanoiBox("a", "a"), hanoiMoved(2, 1, "A", "A"), 0, false, false, "321||"},
			{hanoiBox("A", "C"), hanoiMoved(3, 1, "A", "C"), 0, false, false, "32||1"},
			{hanoiBox("C", "C"), hanoiMoved(4, 1, "C", "C"), 0, false, false, "32||1"},
		}},
		{name: "easy/same-tower move on the full target tower wins", id: hanoiEasy, state: `{"board": {"A": [], "C": [3, 2, 1]}}`, steps: []hanoiStep{
			{hanoiBox("C", "C"), hanoiWin, 1, true, false, "||321"},
		}},
		{name: "easy/a full tower on B is no win", id: hanoiEasy, state: `{"board": {"A": [1], "B": [3, 2]}, "turn_count": 8}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), hanoiMoved(9, 1, "A", "B"), 0, false, false, "|321|"},
			{hanoiBox("B", "C"), turnLimit, 1.0 / 3, true, true, "|32|1"},
		}},
		{name: "easy/win on the last turn beats the turn limit", id: hanoiEasy, state: `{"board": {"A": [1], "C": [3, 2]}, "turn_count": 9}`, steps: []hanoiStep{
			{hanoiBox("A", "C"), hanoiWin, 1, true, false, "||321"},
		}},
		{name: "easy/turn limit after a valid move", id: hanoiEasy, state: `{"board": {"A": [1], "C": [3, 2]}, "turn_count": 9}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), turnLimit, 2.0 / 3, true, true, "|1|32"},
		}},
		{name: "easy/turn limit after an empty-source move", id: hanoiEasy, state: `{"board": {"A": [1], "C": [3, 2]}, "turn_count": 9}`, steps: []hanoiStep{
			{hanoiBox("B", "A"), turnLimit, 0.6666666666666666, true, true, "1||32"},
		}},
		{name: "easy/turn limit after a larger-disk move", id: hanoiEasy, state: `{"board": {"A": [2], "B": [1], "C": [3]}, "turn_count": 9}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), turnLimit, 0.3333333333333333, true, true, "2|1|3"},
		}},
		{name: "easy/turn limit with nothing on C", id: hanoiEasy, state: `{"turn_count": 9}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), turnLimit, 0, true, true, "32|1|"},
		}},
		{name: "easy/format error mid-game", id: hanoiEasy, steps: []hanoiStep{
			{hanoiBox("A", "C"), hanoiMoved(1, 1, "A", "C"), 0, false, false, "32||1"},
			{`\boxed{A to C}`, hanoiNoAction, -0.1, true, false, "32||1"}, // the board is unchanged
		}},
		{name: "easy/format error on the last turn", id: hanoiEasy, state: `{"turn_count": 9}`, steps: []hanoiStep{
			{"move A to C", hanoiNoAction, -0.1, true, true, "321||"},
		}},
		{name: "easy/max_turns override", id: hanoiEasy, opts: `{"max_turns": 2}`, steps: []hanoiStep{
			{hanoiBox("A", "C"), hanoiMoved(1, 1, "A", "C"), 0, false, false, "32||1"},
			{hanoiBox("A", "B"), turnLimit, 1.0 / 3, true, true, "3|2|1"},
		}},
		{name: "easy/num_disks override", id: hanoiEasy, opts: `{"num_disks": 1}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), hanoiMoved(1, 1, "A", "B"), 0, false, false, "|1|"},
			{hanoiBox("B", "C"), hanoiWin, 1, true, false, "||1"},
		}},

		// -hard: 5 disks, 35 turns.
		{name: "hard/turn limit with two of five on C", id: hanoiHard, state: `{"board": {"A": [3, 2, 1], "C": [5, 4]}, "turn_count": 34}`, steps: []hanoiStep{
			{hanoiBox("A", "A"), turnLimit, 0.4, true, true, "321||54"},
		}},
		{name: "hard/larger disk, then a format error on the last turn", id: hanoiHard, state: `{"turn_count": 33}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), hanoiMoved(34, 1, "A", "B"), 0, false, false, "5432|1|"},
			{`\boxed{A D}`, hanoiNoAction, -0.1, true, true, "5432|1|"},
		}},
		{name: "hard/win", id: hanoiHard, state: `{"board": {"A": [1], "B": [], "C": [5, 4, 3, 2]}}`, steps: []hanoiStep{
			{hanoiBox("A", "B"), hanoiMoved(1, 1, "A", "B"), 0, false, false, "|1|5432"},
			{hanoiBox("B", "C"), hanoiWin, 1, true, false, "||54321"},
		}},

		// -random after a reset that drew (4, 20).
		{name: "random/turn limit with three of four on C", id: hanoiRandom,
			state: `{"num_disks": 4, "max_turns": 20, "board": {"A": [1], "B": [], "C": [4, 3, 2]}, "turn_count": 19}`, steps: []hanoiStep{
				{hanoiBox("A", "B"), turnLimit, 0.75, true, true, "|1|432"},
			}},
		{name: "random/win", id: hanoiRandom,
			state: `{"num_disks": 4, "max_turns": 20, "board": {"A": [], "B": [1], "C": [4, 3, 2]}}`, steps: []hanoiStep{
				{hanoiBox("B", "C"), hanoiWin, 1, true, false, "||4321"},
			}},

		// GEM does not guard against stepping after done; neither do we.
		{name: "after done/keeps counting", id: hanoiEasy, opts: `{"max_turns": 3}`, steps: []hanoiStep{
			{"no move", hanoiNoAction, -0.1, true, false, "321||"},
			{hanoiBox("A", "C"), hanoiMoved(2, 1, "A", "C"), 0, false, false, "32||1"},
			{hanoiBox("A", "B"), turnLimit, 1.0 / 3, true, true, "3|2|1"},
			{hanoiBox("C", "B"), turnLimit, 0, true, true, "3|21|"}, // still ">= max_turns"
			{"none", hanoiNoAction, -0.1, true, false, "3|21|"},     // "== max_turns" no longer holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hanoiPlay(t, newTestEnv(t, tt.id, tt.opts, tt.state), tt.steps)
		})
	}
}

// TestTowerofHanoiParsing covers the action parser through Step, from the
// starting board of -easy.
func TestTowerofHanoiParsing(t *testing.T) {
	ac, ab := hanoiMoved(1, 1, "A", "C"), hanoiMoved(1, 1, "A", "B")
	tests := []struct {
		name, action, obs string
	}{
		// The forms GEM's documentation lists.
		{"space", `\boxed{A C}`, ac},
		{"no separator", `\boxed{AC}`, ac},
		{"lower case and comma", `\boxed{a,b}`, ab},
		{"space before comma", `\boxed{A ,C}`, ac},
		{"comma and spaces", `\boxed{A , C}`, ac},
		{"words", `\boxed{A to C}`, hanoiNoAction},
		{"no tower D", `\boxed{A D}`, hanoiNoAction},
		{"two commas", `\boxed{A,,C}`, hanoiNoAction},

		// Python's Unicode whitespace class.
		{"many spaces", `\boxed{A    ,     C}`, ac},
		{"tab and newline", "\\boxed{A\t\n,\r\nC}", ac},
		{"vertical tab and form feed", "\\boxed{A\v\fC}", ac},
		{"file separator U+001C", "\\boxed{A\x1cC}", ac},
		{"unit separator U+001F", "\\boxed{A\x1fC}", ac},
		{"next line U+0085", "\\boxed{A\u0085C}", ac},
		{"no-break space", "\\boxed{A\u00a0C}", ac},
		{"ogham space", "\\boxed{A\u1680C}", ac},
		{"en quad", "\\boxed{A\u2000C}", ac},
		{"hair space", "\\boxed{A\u200aC}", ac},
		{"line separator", "\\boxed{A\u2028C}", ac},
		{"paragraph separator", "\\boxed{A\u2029C}", ac},
		{"narrow no-break space", "\\boxed{A\u202fC}", ac},
		{"medium mathematical space", "\\boxed{A\u205fC}", ac},
		{"ideographic space", "\\boxed{A\u3000,\u3000C}", ac},
		{"zero width space is not whitespace", "\\boxed{A\u200bC}", hanoiNoAction},
		{"mongolian vowel separator is not whitespace", "\\boxed{A\u180eC}", hanoiNoAction},
		{"byte order mark is not whitespace", "\\boxed{A\ufeffC}", hanoiNoAction},
		{"information separator 0x1b is not whitespace", "\\boxed{A\x1bC}", hanoiNoAction},

		// Case rules: only the tower letters are case-insensitive.
		{"mixed case", `\boxed{a C}`, ac},
		{"upper-case boxed", `\BOXED{A C}`, hanoiNoAction},
		{"capital B in boxed", `\Boxed{A C}`, hanoiNoAction},
		{"fullwidth letters", `\boxed{Ａ Ｃ}`, hanoiNoAction},
		{"dotless i is no letter", `\boxed{ı C}`, hanoiNoAction},

		// The exact shape of the box.
		{"leading space", `\boxed{ A C}`, hanoiNoAction},
		{"trailing space", `\boxed{A C }`, hanoiNoAction},
		{"comma first", `\boxed{,A C}`, hanoiNoAction},
		{"three letters", `\boxed{A B C}`, hanoiNoAction},
		{"one letter", `\boxed{A}`, hanoiNoAction},
		{"semicolon", `\boxed{A;C}`, hanoiNoAction},
		{"dash", `\boxed{A-C}`, hanoiNoAction},
		{"double braces", `\boxed{{A C}}`, hanoiNoAction},
		{"space before brace", `\boxed {A C}`, hanoiNoAction},
		{"no backslash", `boxed{A C}`, hanoiNoAction},
		{"empty box", `\boxed{}`, hanoiNoAction},
		{"empty action", ``, hanoiNoAction},
		{"doubled backslash", `\\boxed{A C}`, ac},
		{"inside math", `$\boxed{A, C}$.`, ac},
		{"surrounding text", "I will move the smallest disk: \\boxed{A C}\nDone.", ac},

		// The last match wins; boxes that do not match are skipped.
		{"last match wins", `\boxed{A B} no, \boxed{A C}`, ac},
		{"last match is an illegal move", `\boxed{A C} or \boxed{B C}`, hanoiEmpty(1, "B")},
		{"later non-matching box skipped", `\boxed{A C} then \boxed{A D}`, ac},
		{"invalid utf-8", "\\boxed{A C}\xff\\boxed{\xff C}", ac},
		{"invalid utf-8 between letters", "\\boxed{A\xffC}", hanoiNoAction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, hanoiEasy, "", "").Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%q) = %q, want %q", tt.action, got.Observation, tt.obs)
			}
		})
	}
}

// hanoiSolve appends the optimal moves for n disks from src to dst.
func hanoiSolve(n int, src, via, dst string, moves []string) []string {
	if n == 0 {
		return moves
	}
	moves = hanoiSolve(n-1, src, dst, via, moves)
	moves = append(moves, hanoiBox(src, dst))
	return hanoiSolve(n-1, via, src, dst, moves)
}

// TestTowerofHanoiOptimalSolution plays the 2^n - 1 optimal moves with the
// turn limit set to exactly that: the last move wins rather than truncates.
func TestTowerofHanoiOptimalSolution(t *testing.T) {
	for n := 1; n <= 8; n++ {
		optimal := 1<<n - 1
		env := newTestEnv(t, hanoiEasy, fmt.Sprintf(`{"num_disks": %d, "max_turns": %d}`, n, optimal), "")
		moves := hanoiSolve(n, "A", "B", "C", nil)
		if len(moves) != optimal {
			t.Fatalf("%d disks: %d moves", n, len(moves))
		}
		for i, m := range moves {
			r := env.Step(m)
			if i < len(moves)-1 {
				if r.Done() || r.Reward != 0 || !strings.HasPrefix(r.Observation, fmt.Sprintf("At turn %d, you moved disk ", i+1)) {
					t.Fatalf("%d disks, move %d: %+v", n, i+1, r)
				}
				continue
			}
			if r.Observation != hanoiWin || r.Reward != 1 || !r.Terminated || r.Truncated {
				t.Fatalf("%d disks, last move: %+v", n, r)
			}
		}
	}
	for _, id := range []string{hanoiEasy, hanoiHard} {
		env := newTestEnv(t, id, "", "")
		var s hanoiState
		if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		var last StepResult
		for _, m := range hanoiSolve(s.NumDisks, "A", "B", "C", nil) {
			last = env.Step(m)
		}
		if last.Observation != hanoiWin || env.Turn() != 1<<s.NumDisks-1 {
			t.Errorf("%s: optimal solution ended with %+v at turn %d", id, last, env.Turn())
		}
	}
}

// TestTowerofHanoiInstructions checks the template for each disk count.
func TestTowerofHanoiInstructions(t *testing.T) {
	const rest = "You have to move the disks from tower A to tower C.\n" +
		"To move a disk, type the source tower and the target tower (e.g., '\\boxed{A C}').\n" +
		"Note that you can only move the top disk of a tower, and that a bigger disk cannot be placed on a smaller disk.\n" +
		"As you play, the history of your moves will be displayed.\n"
	for id, n := range map[string]int{hanoiEasy: 3, hanoiHard: 5} {
		env := mustNew(t, id)
		obs, info := env.Reset(NewRNG(1))
		want := fmt.Sprintf("You are playing Tower of Hanoi with %d disks.\n", n) + rest
		if obs != want || env.Instructions() != want {
			t.Errorf("%s: instructions\n got %q\nwant %q", id, obs, want)
		}
		board := ""
		for d := n; d >= 1; d-- {
			board += fmt.Sprint(d)
		}
		if wantInfo := (Info{"suffix": hanoiSuffixFor(t, board+"||")}); !maps.Equal(info, wantInfo) {
			t.Errorf("%s: reset info %q, want %q", id, info, wantInfo)
		}
	}
}

// TestTowerofHanoiRandomReset checks the drawn parameters over many seeds.
func TestTowerofHanoiRandomReset(t *testing.T) {
	counts := map[[2]int]int{}
	const seeds = 3000
	env := mustNew(t, hanoiRandom)
	for seed := range uint64(seeds) {
		obs, info := env.Reset(NewRNG(seed))
		var s hanoiState
		if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		pair := [2]int{s.NumDisks, s.MaxTurns}
		if !slices.Contains(hanoiCandidates, pair) || env.MaxTurns() != s.MaxTurns {
			t.Fatalf("seed %d: drew %v (MaxTurns() %d), want one of %v", seed, pair, env.MaxTurns(), hanoiCandidates)
		}
		if !s.Random || s.TurnCount != 0 || env.Turn() != 0 || !slices.Equal(s.Board.A, hanoiStack(s.NumDisks)) ||
			len(s.Board.B) != 0 || len(s.Board.C) != 0 {
			t.Fatalf("seed %d: not a fresh episode: %s", seed, env.Snapshot())
		}
		if !strings.HasPrefix(obs, fmt.Sprintf("You are playing Tower of Hanoi with %d disks.\n", s.NumDisks)) ||
			!strings.Contains(info["suffix"], fmt.Sprintf("A: %s\n", strings.ReplaceAll(fmt.Sprint(hanoiStack(s.NumDisks)), " ", ", "))) {
			t.Fatalf("seed %d: reset does not show the drawn values:\n%s\n%s", seed, obs, info["suffix"])
		}
		env.Step(`\boxed{A C}`) // the next Reset must start afresh
		counts[pair]++
	}
	for _, c := range hanoiCandidates {
		if n := counts[c]; n < seeds/3-150 || n > seeds/3+150 {
			t.Errorf("candidate %v drawn %d times in %d, want about a third", c, n, seeds)
		}
	}
}

// TestTowerofHanoiSameSeed checks that a seed fixes the whole episode, for every id.
func TestTowerofHanoiSameSeed(t *testing.T) {
	actions := []string{`\boxed{A C}`, `\boxed{A B}`, `\boxed{C B}`, `\boxed{A C}`, `\boxed{B A}`, `\boxed{B C}`, `\boxed{A C}`,
		`\boxed{A B}`, `\boxed{C A}`, `\boxed{B C}`, `\boxed{A C}`}
	for _, id := range hanoiIDs {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(uint64, Env) []string { return actions })
			// Only the drawn variant has anything random.
			if want := map[bool]int{true: len(hanoiCandidates), false: 1}[id == hanoiRandom]; len(distinct) != want {
				t.Errorf("%d distinct episodes over 20 seeds, want %d", len(distinct), want)
			}
		})
	}
}

// TestTowerofHanoiSnapshotRoundTrip restores a mid-game snapshot into a
// fresh env and checks both behave identically from there on.
func TestTowerofHanoiSnapshotRoundTrip(t *testing.T) {
	moves := hanoiSolve(5, "A", "B", "C", nil)
	for _, id := range hanoiIDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := mustNew(t, id)
				a.Reset(NewRNG(seed))
				a.Step(`\boxed{A C}`)
				a.Step(`\boxed{A B}`)
				a.Step(`\boxed{B C}`) // rejected: disk 2 onto disk 1

				b := mustNew(t, id)
				b.Reset(NewRNG(seed + 1000))
				b.Step(`\boxed{A B}`) // different state, all overridden below
				restoreCopy(t, a, b)
				for _, m := range append(slices.Clone(moves), `\boxed{C C}`, "x", `\boxed{b,a}`) {
					stepBoth(t, a, b, m)
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

func TestTowerofHanoiSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, hanoiEasy, "", "")
	want := `{"num_disks":3,"max_turns":10,"board":{"A":[3,2,1],"B":[],"C":[]},"turn_count":0,"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(`\boxed{A C}`)
	env.Step(`\boxed{A B}`)
	env.Step(`\boxed{A B}`)
	want = `{"num_disks":3,"max_turns":10,"board":{"A":[3],"B":[2],"C":[1]},"turn_count":3,"random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, hanoiRandom)
}

func TestTowerofHanoiRestore(t *testing.T) {
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "one tower keeps the others", state: `{"board": {"A": [3, 1], "B": [2]}}`, check: func(t *testing.T, env Env) {
			hanoiPlay(t, env, []hanoiStep{{hanoiBox("A", "B"), hanoiMoved(1, 1, "A", "B"), 0, false, false, "3|21|"}})
		}},
		{name: "num_disks re-renders instructions", state: `{"num_disks": 4, "board": {"A": [4, 3, 2, 1]}}`, check: func(t *testing.T, env Env) {
			if !strings.HasPrefix(env.Instructions(), "You are playing Tower of Hanoi with 4 disks.\n") {
				t.Errorf("instructions: %s", env.Instructions())
			}
		}},
		{name: "turn count and turn limit", state: `{"turn_count": 3, "max_turns": 4}`, check: func(t *testing.T, env Env) {
			if env.Turn() != 3 || env.MaxTurns() != 4 {
				t.Errorf("Turn() = %d, MaxTurns() = %d", env.Turn(), env.MaxTurns())
			}
			hanoiPlay(t, env, []hanoiStep{{hanoiBox("A", "C"), turnLimit, 1.0 / 3, true, true, "32||1"}})
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "empty board object", state: `{"board": {}}`},
		{name: "num_disks alone leaves the board short", state: `{"num_disks": 4}`, wantErr: "board"},
		{name: "zero disks", state: `{"num_disks": 0, "board": {"A": []}}`, wantErr: "num_disks"},
		{name: "too many disks", state: `{"num_disks": 1001}`, wantErr: "num_disks"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "disk missing", state: `{"board": {"A": [3, 2]}}`, wantErr: "board"},
		{name: "disk twice", state: `{"board": {"A": [3, 2], "C": [2]}}`, wantErr: "board.C"},
		{name: "disk out of range", state: `{"board": {"A": [3, 2], "B": [4]}}`, wantErr: "board.B"},
		{name: "disk zero", state: `{"board": {"A": [3, 2, 0]}}`, wantErr: "board.A"},
		{name: "larger on smaller", state: `{"board": {"A": [3, 1, 2]}}`, wantErr: "board.A"},
		{name: "unknown tower", state: `{"board": {"D": []}}`, wantErr: "board.D"},
		{name: "null tower", state: `{"board": {"B": null}}`, wantErr: "board.B"},
		{name: "null board", state: `{"board": null}`, wantErr: "board"},
		{name: "board not an object", state: `{"board": [[3, 2, 1], [], []]}`, wantErr: "board"},
		{name: "string disk", state: `{"board": {"A": [3, 2, "1"]}}`, wantErr: "board.A"},
		{name: "string value", state: `{"num_disks": "3"}`, wantErr: "num_disks"},
		{name: "fractional value", state: `{"max_turns": 7.5}`, wantErr: "max_turns"},
		{name: "null value", state: `{"max_turns": null}`, wantErr: "max_turns"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"towers": {}}`, wantErr: "towers"},
		{name: "not an object", state: `[3]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, hanoiEasy, "", "")
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

// TestTowerofHanoiRestoreKeepsLiveBoard guards against decoding into the live
// towers when a later key fails validation.
func TestTowerofHanoiRestoreKeepsLiveBoard(t *testing.T) {
	env := newTestEnv(t, hanoiEasy, "", "")
	env.Step(`\boxed{A C}`)
	wantRestore(t, env, `{"board": {"A": [1, 2]}, "turn_count": -1}`, "turn_count")
}

func TestTowerofHanoiRegistry(t *testing.T) {
	want := map[string]specWant{
		hanoiEasy:   {map[string]any{"num_disks": 3, "max_turns": 10}, 10},
		hanoiHard:   {map[string]any{"num_disks": 5, "max_turns": 35}, 35},
		hanoiRandom: {map[string]any{"num_disks": nil, "max_turns": nil}, 0},
	}
	var got []string
	for _, id := range IDs() {
		if strings.HasPrefix(id, "game:TowerofHanoi") {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("registered Hanoi ids %v", got)
	}
	wantSpecs(t, "TowerofHanoi", "", want)
	for id, w := range want {
		env := newTestEnv(t, id, "", "")
		if w.maxTurns != 0 && env.MaxTurns() != w.maxTurns {
			t.Errorf("%s: MaxTurns() = %d", id, env.MaxTurns())
		}
	}
}

func TestTowerofHanoiNewOverrides(t *testing.T) {
	tests := []struct {
		name, id, opts string
		wantRandom     bool
		wantDisks      int
		wantMaxTurns   int
	}{
		{name: "no opts", id: hanoiEasy, wantDisks: 3, wantMaxTurns: 10},
		{name: "null opts", id: hanoiHard, opts: `null`, wantDisks: 5, wantMaxTurns: 35},
		{name: "max_turns", id: hanoiEasy, opts: `{"max_turns": 6}`, wantDisks: 3, wantMaxTurns: 6},
		{name: "num_disks", id: hanoiHard, opts: `{"num_disks": 7}`, wantDisks: 7, wantMaxTurns: 35},
		{name: "unknown keys ignored", id: hanoiEasy, opts: `{"seed": 3, "foo": "bar", "max_turns": 5}`, wantDisks: 3, wantMaxTurns: 5},
		{name: "null max_turns makes it random", id: hanoiEasy, opts: `{"max_turns": null}`, wantRandom: true},
		{name: "null num_disks makes it random", id: hanoiHard, opts: `{"num_disks": null}`, wantRandom: true},
		{name: "fixed parameters on the random id", id: hanoiRandom, opts: `{"num_disks": 2, "max_turns": 3}`, wantDisks: 2, wantMaxTurns: 3},
		{name: "one parameter stays random", id: hanoiRandom, opts: `{"num_disks": 2}`, wantRandom: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			var s hanoiState
			if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
				t.Fatal(err)
			}
			if s.Random != tt.wantRandom {
				t.Fatalf("random = %v, want %v", s.Random, tt.wantRandom)
			}
			if tt.wantRandom {
				// Reset drew both; a value given is overwritten, as in GEM.
				if !slices.Contains(hanoiCandidates, [2]int{s.NumDisks, s.MaxTurns}) {
					t.Errorf("drawn state not a candidate: %s", env.Snapshot())
				}
				return
			}
			if s.NumDisks != tt.wantDisks || s.MaxTurns != tt.wantMaxTurns || env.MaxTurns() != tt.wantMaxTurns ||
				!slices.Equal(s.Board.A, hanoiStack(tt.wantDisks)) {
				t.Errorf("state %s, want %d disks and max_turns %d", env.Snapshot(), tt.wantDisks, tt.wantMaxTurns)
			}
			if !strings.HasPrefix(env.Instructions(), fmt.Sprintf("You are playing Tower of Hanoi with %d disks.\n", tt.wantDisks)) {
				t.Errorf("instructions: %s", env.Instructions())
			}
		})
	}
}

func TestTowerofHanoiNewBadOption(t *testing.T) {
	tests := []badOption{
		{"string max_turns", hanoiEasy, `{"max_turns": "6"}`, "max_turns"},
		{"fractional num_disks", hanoiEasy, `{"num_disks": 2.5}`, "num_disks"},
		{"zero max_turns", hanoiEasy, `{"max_turns": 0}`, "max_turns"},
		{"zero disks", hanoiHard, `{"num_disks": 0}`, "num_disks"},
		{"negative disks", hanoiHard, `{"num_disks": -3}`, "num_disks"},
		{"too many disks", hanoiEasy, `{"num_disks": 100000}`, "num_disks"},
		{"bad type on the random id", hanoiRandom, `{"max_turns": true}`, "max_turns"},
		{"not an object", hanoiEasy, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

// TestTowerofHanoiBeforeReset: an env used before Reset is GEM's constructed
// env (GEM resets in the constructor), and must not panic.
func TestTowerofHanoiBeforeReset(t *testing.T) {
	for _, id := range hanoiIDs {
		env := mustNew(t, id)
		if r := env.Step(`\boxed{A C}`); r.Observation != hanoiMoved(1, 1, "A", "C") {
			t.Errorf("%s: first step before Reset: %+v", id, r)
		}
		if err := env.Restore(env.Snapshot()); err != nil {
			t.Errorf("%s: state before Reset does not restore: %v", id, err)
		}
	}
}

// TestTowerofHanoiHugeAction steps a 1 MB action; the parser is linear, so it
// must finish well within a generous deadline.
func TestTowerofHanoiHugeAction(t *testing.T) {
	for _, action := range []string{
		strings.Repeat(`\boxed{A C}`, hugeLen()/len(`\boxed{A C}`)) + `\boxed{A B}`, // many matches
		`\boxed{A` + strings.Repeat("\u3000", hugeLen()/3) + `B}`,                   // one long whitespace run
		strings.Repeat(`\boxed{A `, hugeLen()/9),                                    // many failing candidates
	} {
		r := stepWithin(t, newTestEnv(t, hanoiEasy, "", ""), action, time.Minute)
		if r.Observation != hanoiMoved(1, 1, "A", "B") && r.Observation != hanoiNoAction {
			t.Errorf("1 MB action (%.30q...): %q", action, r.Observation)
		}
	}
}

// hanoiAllMoves is GEM's pattern unanchored, for finding every match as Python's finditer does.
var hanoiAllMoves = regexp.MustCompile(strings.TrimPrefix(hanoiMove.String(), "^"))

// hanoiParseAll is the straightforward parser: the last of all matches, upper-cased.
func hanoiParseAll(action string) (src, dst byte, ok bool) {
	all := hanoiAllMoves.FindAllStringSubmatch(action, -1)
	if len(all) == 0 {
		return 0, 0, false
	}
	last := all[len(all)-1]
	return strings.ToUpper(last[1])[0], strings.ToUpper(last[2])[0], true
}

// FuzzTowerofHanoiStep feeds arbitrary action text to Step: it must never
// panic, the observation must be one of GEM's lines, the reward must match
// it, and the board must stay a legal arrangement of every disk.
func FuzzTowerofHanoiStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{A C}`, `\boxed{AC}`, `\boxed{a,b}`, `\boxed{B ,C}`, `\boxed{A , C}`, `\boxed{A to C}`, `\boxed{A D}`,
		`\boxed{A,,C}`, `\boxed{A A}`, "\\boxed{A\u3000C}", "\\boxed{A\u200bC}", `\\boxed{c b}`, `\BOXED{A C}`,
		`\boxed{A B} no, \boxed{A C}`, "\\boxed{A C}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, hanoiIDs, which, seed)
		// Step past the turn limit to reach every branch, including the permissive after-done ones.
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn := env.Turn()
			switch {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), hanoiNoAction, turnLimit):
			case r.Observation == hanoiWin:
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
			if len(r.Info) != 1 || !strings.HasPrefix(r.Info["suffix"], "Here is the current state of the tower of hanoi:\nA: [") {
				t.Fatalf("info %v", r.Info)
			}
			var s hanoiState
			if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
				t.Fatal(err)
			}
			if err := s.validate(); err != nil {
				t.Fatalf("illegal board after %q: %v", action, err)
			}
		}
		// The right-to-left parser agrees with GEM's "last of all matches".
		src, dst, ok := hanoiParse(action)
		wantSrc, wantDst, wantOK := hanoiParseAll(action)
		if src != wantSrc || dst != wantDst || ok != wantOK {
			t.Fatalf("hanoiParse(%q) = %q %q %v, last of all matches gives %q %q %v", action, src, dst, ok, wantSrc, wantDst, wantOK)
		}
	})
}
