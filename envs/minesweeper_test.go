package envs

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	msEasy   = "game:Minesweeper-v0-easy"
	msHard   = "game:Minesweeper-v0-hard"
	msRandom = "game:Minesweeper-v0-random"

	// msLayout is the hidden layout of GEM's transcripts MS-1 to MS-4.
	msLayout = `{"mines": [[0,4],[1,4],[3,0],[4,3],[4,4]], "reveal_example": [1,4], "flag_example": [0,2]}`
)

var msIDs = []string{msEasy, msHard, msRandom}

// msReference is GEM's action pattern as a Go regexp, with Python's Unicode
// \s spelled out; the hand-written parser must agree with it.
var msReference = regexp.MustCompile(`\\boxed\{([A-Za-z]+)` + msSpace + `(\p{Nd}+)` + msSpace + `(\p{Nd}+)\}`)

const msSpace = `[\t-\r\x{1c}-\x{1f} \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

// msReferenceParse is parseMinesweeperAction by way of msReference.
func msReferenceParse(action string) (word, row, col string, ok bool) {
	matches := msReference.FindAllStringSubmatchIndex(action, -1)
	if len(matches) == 0 {
		return "", "", "", false
	}
	m := matches[len(matches)-1]
	row, rowOK := pyInt(action[m[4]:m[5]])
	col, colOK := pyInt(action[m[6]:m[7]])
	if !rowOK || !colOK {
		return "", "", "", false
	}
	return strings.ToLower(action[m[2]:m[3]]), row, col, true
}

// TestMinesweeperIsSpace checks the whitespace class against the reference
// regexp's; no Python whitespace lies above U+3000.
func TestMinesweeperIsSpace(t *testing.T) {
	class := regexp.MustCompile(`^` + msSpace + `$`)
	for r := rune(0); r <= 0x10ffff; r++ {
		want := r <= 0x3000 && class.MatchString(string(r))
		if got := isPySpace(r); got != want {
			t.Errorf("isPySpace(%U) = %v, want %v", r, got, want)
		}
	}
}

// msFixtureCases gives the id, constructor overrides and hidden state each GEM transcript was produced with.
var msFixtureCases = map[string]struct{ id, opts, state string }{
	"ms-01.jsonl": {msEasy, "", msLayout},
	"ms-02.jsonl": {msEasy, "", msLayout},
	"ms-03.jsonl": {msEasy, `{"max_turns": 8}`, msLayout},
	"ms-04.jsonl": {msEasy, "", msLayout},
}

// TestMinesweeperFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestMinesweeperFixtures(t *testing.T) {
	replayFixtures(t, "minesweeper", msFixtureCases, func(t *testing.T, fc struct{ id, opts, state string }, reset fixtureReset) Env {
		var opts json.RawMessage
		if fc.opts != "" {
			opts = json.RawMessage(fc.opts)
		}
		env, err := New(fc.id, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, info := env.Reset(NewRNG(7))
		if !maps.Equal(info, reset.Info) {
			t.Errorf("reset info = %q, want %q", info, reset.Info)
		}
		mustRestore(t, env, fc.state)
		return env
	})
}

// msStep is one action and the result GEM gives for it; board, when set, is
// the expected board part of the suffix.
type msStep struct {
	action      string
	obs         string
	reward      float64
	term, trunc bool
	board       string
}

// msPlay applies each action and compares the result.
func msPlay(t *testing.T, env Env, steps []msStep) {
	t.Helper()
	for i, s := range steps {
		got := env.Step(s.action)
		if got.Observation != s.obs || got.Reward != s.reward || got.Terminated != s.term || got.Truncated != s.trunc {
			t.Fatalf("step %d (%.60q):\n got %q %v %v %v\nwant %q %v %v %v", i+1, s.action,
				got.Observation, got.Reward, got.Terminated, got.Truncated, s.obs, s.reward, s.term, s.trunc)
		}
		suffix := got.Info["suffix"]
		if len(got.Info) != 1 || !strings.HasPrefix(suffix, "Here is the current board layout:\n") ||
			!strings.HasSuffix(suffix, "\n\nEnter your guess.") {
			t.Fatalf("step %d: info %q", i+1, got.Info)
		}
		if s.board != "" && suffix != "Here is the current board layout:\n"+s.board+"\nEnter your guess." {
			t.Fatalf("step %d: board\n%s\nwant\n%s", i+1, suffix, s.board)
		}
	}
}

func msReveal(r, c int) string { return fmt.Sprintf(`\boxed{reveal %d %d}`, r, c) }
func msFlag(r, c int) string   { return fmt.Sprintf(`\boxed{flag %d %d}`, r, c) }

func msRevealed(turn, r, c int) string {
	return fmt.Sprintf("At turn %d, you successfully revealed cell (%d, %d).", turn, r, c)
}

func msAlready(turn, r, c int) string {
	return fmt.Sprintf("At turn %d, you chose to reveal cell (%d, %d), which has already been revealed.", turn, r, c)
}

func msFlagRevealed(turn, r, c int) string {
	return fmt.Sprintf("At turn %d, you chose to flag cell (%d, %d), which has already been revealed.", turn, r, c)
}

func msAdded(turn, r, c int) string {
	return fmt.Sprintf("At turn %d, you added a flag on cell (%d, %d).", turn, r, c)
}

func msRemoved(turn, r, c int) string {
	return fmt.Sprintf("At turn %d, you removed a flag on cell (%d, %d).", turn, r, c)
}

func msOutside(turn int, r, c string) string {
	return fmt.Sprintf("At turn %d, you chose cell (%s, %s), which is outside the bounds of the grid.", turn, r, c)
}

func msInvalid(turn int, word string) string {
	return fmt.Sprintf("At turn %d, you chose an invalid action '%s'. Valid actions are 'reveal' or 'flag'.", turn, word)
}

func msMine(r, c int) string { return fmt.Sprintf("Game over! You hit a mine at (%d, %d)", r, c) }

const msWin = "Congratulations! You have successfully cleared the Minesweeper board."

// TestMinesweeperBranches covers every branch of Step. Unless stated, the
// layout is msLayout on the 5x5 easy board:
//
//	. . . . M
//	. . . . M
//	. . . . .
//	M . . . .
//	. . . M M
func TestMinesweeperBranches(t *testing.T) {
	const afterFlood = "    0  1  2  3  4\n" +
		" 0  0  0  0  2  . \n" +
		" 1  0  0  0  2  . \n" +
		" 2  1  1  0  1  . \n" +
		" 3  .  1  1  2  . \n" +
		" 4  .  .  .  .  . \n"
	tests := []struct {
		name, id, opts, state string
		steps                 []msStep
	}{
		{name: "easy/flood reveal", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(0, 0), msRevealed(1, 0, 0), 0.75, false, false, afterFlood},
		}},
		{name: "easy/numbered cell reveals one", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(2, 3), msRevealed(1, 2, 3), 0.05, false, false, "" +
				"    0  1  2  3  4\n" +
				" 0  .  .  .  .  . \n" +
				" 1  .  .  .  .  . \n" +
				" 2  .  .  .  1  . \n" +
				" 3  .  .  .  .  . \n" +
				" 4  .  .  .  .  . \n"},
		}},
		{name: "easy/flags block the flood", id: msEasy, state: msLayout, steps: []msStep{
			{msFlag(0, 1), msAdded(1, 0, 1), 0, false, false, ""},
			{msFlag(1, 1), msAdded(2, 1, 1), 0, false, false, ""},
			{msFlag(1, 0), msAdded(3, 1, 0), 0, false, false, ""},
			{msReveal(0, 0), msRevealed(4, 0, 0), 0.05, false, false, "" + // walled in by flags: 1 cell
				"    0  1  2  3  4\n" +
				" 0  0  F  .  .  . \n" +
				" 1  F  F  .  .  . \n" +
				" 2  .  .  .  .  . \n" +
				" 3  .  .  .  .  . \n" +
				" 4  .  .  .  .  . \n"},
			{msReveal(1, 1), msAlready(5, 1, 1), 0, false, false, ""}, // a flagged safe cell "has already been revealed"
			{msFlag(1, 1), msRemoved(6, 1, 1), 0, false, false, ""},
			{msReveal(1, 1), msRevealed(7, 1, 1), 0.6, false, false, "" + // 12 more cells; flagged cells stay hidden
				"    0  1  2  3  4\n" +
				" 0  0  F  0  2  . \n" +
				" 1  F  0  0  2  . \n" +
				" 2  1  1  0  1  . \n" +
				" 3  .  1  1  2  . \n" +
				" 4  .  .  .  .  . \n"},
		}},
		{name: "easy/mine on the first reveal", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(4, 4), msMine(4, 4), 0, true, false, "" +
				"    0  1  2  3  4\n" +
				" 0  .  .  .  .  . \n" +
				" 1  .  .  .  .  . \n" +
				" 2  .  .  .  .  . \n" +
				" 3  .  .  .  .  . \n" +
				" 4  .  .  .  .  . \n"},
		}},
		{name: "easy/flagged mine is still game over", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(0, 0), msRevealed(1, 0, 0), 0.75, false, false, ""},
			{msFlag(3, 0), msAdded(2, 3, 0), 0, false, false, ""},
			{msReveal(3, 0), msMine(3, 0), 0, true, false, ""},
		}},
		{name: "easy/mine on the last turn beats the turn limit", id: msEasy, state: msLayout, opts: `{"max_turns": 2}`, steps: []msStep{
			{msFlag(0, 0), msAdded(1, 0, 0), 0, false, false, ""},
			{msReveal(0, 4), msMine(0, 4), 0, true, false, ""},
		}},
		{name: "easy/win on the last turn beats the turn limit", id: msEasy, state: msLayout, opts: `{"max_turns": 11}`, steps: []msStep{
			{msReveal(1, 1), msRevealed(1, 1, 1), 0.75, false, false, afterFlood},
			{msFlag(0, 4), msAdded(2, 0, 4), 0, false, false, ""},
			{msFlag(1, 4), msAdded(3, 1, 4), 0, false, false, ""},
			{msFlag(3, 0), msAdded(4, 3, 0), 0, false, false, ""},
			{msFlag(4, 3), msAdded(5, 4, 3), 0, false, false, ""},
			{msFlag(4, 4), msAdded(6, 4, 4), 0, false, false, ""},
			{msReveal(2, 4), msRevealed(7, 2, 4), 0.05, false, false, ""},
			{msReveal(3, 4), msRevealed(8, 3, 4), 0.05, false, false, ""},
			{msReveal(4, 0), msRevealed(9, 4, 0), 0.05, false, false, ""},
			{msReveal(4, 1), msRevealed(10, 4, 1), 0.05, false, false, ""},
			{msReveal(4, 2), msWin, 0.05, true, false, "" +
				"    0  1  2  3  4\n" +
				" 0  0  0  0  2  F \n" +
				" 1  0  0  0  2  F \n" +
				" 2  1  1  0  1  1 \n" +
				" 3  F  1  1  2  2 \n" +
				" 4  1  1  1  F  F \n"},
		}},
		{name: "easy/flagging the last mine does not win", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(1, 1), msRevealed(1, 1, 1), 0.75, false, false, ""},
			{msReveal(2, 4), msRevealed(2, 2, 4), 0.05, false, false, ""},
			{msReveal(3, 4), msRevealed(3, 3, 4), 0.05, false, false, ""},
			{msReveal(4, 0), msRevealed(4, 4, 0), 0.05, false, false, ""},
			{msReveal(4, 1), msRevealed(5, 4, 1), 0.05, false, false, ""},
			{msReveal(4, 2), msRevealed(6, 4, 2), 0.05, false, false, ""},
			{msFlag(0, 4), msAdded(7, 0, 4), 0, false, false, ""},
			{msFlag(1, 4), msAdded(8, 1, 4), 0, false, false, ""},
			{msFlag(3, 0), msAdded(9, 3, 0), 0, false, false, ""},
			{msFlag(4, 3), msAdded(10, 4, 3), 0, false, false, ""},
			{msFlag(4, 4), msAdded(11, 4, 4), 0, false, false, ""},
			{msReveal(0, 0), msAlready(12, 0, 0), 0, false, false, ""},
		}},
		{name: "easy/turn limit keeps the reveal reward", id: msEasy, state: msLayout, opts: `{"max_turns": 2}`, steps: []msStep{
			{msFlag(0, 0), msAdded(1, 0, 0), 0, false, false, ""},
			{msReveal(2, 2), turnLimit, 0.7, true, true, "" + // 14 cells: the flagged (0,0) stays hidden
				"    0  1  2  3  4\n" +
				" 0  F  0  0  2  . \n" +
				" 1  0  0  0  2  . \n" +
				" 2  1  1  0  1  . \n" +
				" 3  .  1  1  2  . \n" +
				" 4  .  .  .  .  . \n"},
		}},
		{name: "easy/turn limit on every non-returning branch", id: msEasy, state: msLayout, opts: `{"max_turns": 1}`, steps: []msStep{
			{`\boxed{dig 1 1}`, turnLimit, 0, true, true, ""},
			{`\boxed{dig 9 9}`, turnLimit, 0, true, true, ""},
			{msFlag(1, 1), turnLimit, 0, true, true, ""},
			{msReveal(1, 1), turnLimit, 0, true, true, ""}, // flagged by the previous step
			{msFlag(1, 1), turnLimit, 0, true, true, ""},
			{msReveal(1, 1), turnLimit, 0.75, true, true, ""},
			{msFlag(1, 1), turnLimit, 0, true, true, ""},
			{msReveal(1, 1), turnLimit, 0, true, true, ""},
			{"x", noGuess(9), -0.1, true, false, ""}, // after done: "== max_turns" no longer holds
			{msReveal(0, 4), msMine(0, 4), 0, true, false, ""},
		}},
		{name: "easy/format error on the last turn", id: msEasy, state: msLayout, opts: `{"max_turns": 2}`, steps: []msStep{
			{msFlag(0, 0), msAdded(1, 0, 0), 0, false, false, ""},
			{`\boxed{reveal 1 1 1}`, noGuess(2), -0.1, true, true, "" +
				"    0  1  2  3  4\n" +
				" 0  F  .  .  .  . \n" +
				" 1  .  .  .  .  . \n" +
				" 2  .  .  .  .  . \n" +
				" 3  .  .  .  .  . \n" +
				" 4  .  .  .  .  . \n"},
		}},
		{name: "easy/bounds come before the command word", id: msEasy, state: msLayout, steps: []msStep{
			{`\boxed{dig 9 9}`, msOutside(1, "9", "9"), 0, false, false, ""},
			{`\boxed{dig 4 4}`, msInvalid(2, "dig"), 0, false, false, ""},
			{`\boxed{DIG 0 0}`, msInvalid(3, "dig"), 0, false, false, ""},
			{`\boxed{Flag 0 5}`, msOutside(4, "0", "5"), 0, false, false, ""},
			{`\boxed{reveal 05 0}`, msOutside(5, "5", "0"), 0, false, false, ""},
			{`\boxed{reveal 123456789012345678901234567890 0}`, msOutside(6, "123456789012345678901234567890", "0"), 0, false, false, ""},
			{`\boxed{FLAG 4 4}`, msAdded(7, 4, 4), 0, false, false, ""},
			{`\boxed{fLaG 4 4}`, msRemoved(8, 4, 4), 0, false, false, ""},
		}},
		{name: "easy/flag on a revealed cell", id: msEasy, state: msLayout, steps: []msStep{
			{msReveal(0, 0), msRevealed(1, 0, 0), 0.75, false, false, ""},
			{msFlag(2, 2), msFlagRevealed(2, 2, 2), 0, false, false, afterFlood},
			{msFlag(2, 0), msFlagRevealed(3, 2, 0), 0, false, false, ""},
		}},

		// The first in-bounds reveal places the mines from the drawn order
		// (identity here), outside the 3x3 block around the revealed cell.
		{name: "drawn/first reveal places the mines even when rejected", id: msEasy,
			state: `{"mine_order": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24]}`, steps: []msStep{
				{msFlag(0, 0), msAdded(1, 0, 0), 0, false, false, ""},
				{msReveal(5, 0), msOutside(2, "5", "0"), 0, false, false, ""}, // out of bounds: no placement
				{msReveal(0, 0), msAlready(3, 0, 0), 0, false, false, ""},     // placement: (0,2) (0,3) (0,4) (1,2) (1,3)
				{msReveal(0, 2), msMine(0, 2), 0, true, false, ""},
			}},
		{name: "drawn/placement skips the block", id: msEasy,
			state: `{"mine_order": [12,6,7,8,11,13,16,17,18,24,0,1,2,3,4,5,9,10,14,15,19,20,21,22,23]}`, steps: []msStep{
				{msReveal(2, 2), msRevealed(1, 2, 2), 0.95, false, false, "" + // mines: 24, 0, 1, 2, 3
					"    0  1  2  3  4\n" +
					" 0  .  .  .  .  . \n" +
					" 1  2  3  3  2  1 \n" +
					" 2  0  0  0  0  0 \n" +
					" 3  0  0  0  1  1 \n" +
					" 4  0  0  0  1  . \n"},
				{msReveal(0, 3), msMine(0, 3), 0, true, false, ""},
			}},

		// A custom board with no mines: one reveal clears it.
		{name: "custom/no mines", id: msEasy, opts: `{"rows": 2, "cols": 3, "num_mines": 0}`, steps: []msStep{
			{msReveal(1, 2), msWin, 1, true, false, "" +
				"    0  1  2\n" +
				" 0  0  0  0 \n" +
				" 1  0  0  0 \n"},
		}},
		{name: "custom/wide board header", id: msEasy, opts: `{"rows": 1, "cols": 12, "num_mines": 1}`,
			state: `{"mines": [[0,11]]}`, steps: []msStep{
				{msFlag(0, 11), msAdded(1, 0, 11), 0, false, false, "" +
					"    0  1  2  3  4  5  6  7  8  9 10 11\n" +
					" 0  .  .  .  .  .  .  .  .  .  .  .  F \n"},
				{msReveal(0, 0), msWin, 1, true, false, ""}, // 11 of 11 safe cells
			}},
		{name: "hard/reward denominator", id: msHard,
			state: `{"mines": [[7,0],[7,1],[7,2],[7,3],[7,4],[7,5],[7,6],[7,7],[6,0],[6,1],[6,2],[6,3]]}`, steps: []msStep{
				{msReveal(6, 7), msRevealed(1, 6, 7), 0.019230769230769232, false, false, ""}, // 1/52
				{msReveal(0, 0), msRevealed(2, 0, 0), 0.9807692307692307, false, false, ""},   // 51/52
			}},
		{name: "random/drawn size", id: msRandom,
			state: `{"rows": 6, "cols": 6, "num_mines": 1, "max_turns": 3, "mines": [[5,5]], "mine_order": [], "reveal_example": [0,0], "flag_example": [5,5]}`, steps: []msStep{
				{msReveal(5, 4), msRevealed(1, 5, 4), 0.02857142857142857, false, false, ""}, // 1/35
				{msReveal(0, 0), msRevealed(2, 0, 0), 0.9714285714285714, false, false, ""},  // 34/35, but the mine is unflagged
				{msReveal(5, 5), msMine(5, 5), 0, true, false, ""},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msPlay(t, newTestEnv(t, tt.id, tt.opts, tt.state), tt.steps)
		})
	}
}

// TestMinesweeperParsing covers the action parser through Step: GEM's regex
// semantics, Python whitespace and int() conversion. msLayout on -easy.
func TestMinesweeperParsing(t *testing.T) {
	big4300 := "1" + strings.Repeat("0", 4299)
	tests := []struct {
		name, action, obs string
	}{
		{"plain", `\boxed{reveal 2 3}`, msRevealed(1, 2, 3)},
		{"capitalised", `\boxed{Reveal 2 3}`, msRevealed(1, 2, 3)},
		{"upper case", `\boxed{REVEAL 2 3}`, msRevealed(1, 2, 3)},
		{"tab", "\\boxed{reveal\t2\t3}", msRevealed(1, 2, 3)},
		{"newline", "\\boxed{reveal\n2\r3}", msRevealed(1, 2, 3)},
		{"vertical tab and form feed", "\\boxed{reveal\v2\f3}", msRevealed(1, 2, 3)},
		{"file separator", "\\boxed{reveal\x1c2\x1f3}", msRevealed(1, 2, 3)},
		{"next line", "\\boxed{reveal\u00852\u00a03}", msRevealed(1, 2, 3)},
		{"ogham and en quad", "\\boxed{reveal\u16802\u20003}", msRevealed(1, 2, 3)},
		{"hair space and line separator", "\\boxed{reveal\u200a2\u20283}", msRevealed(1, 2, 3)},
		{"paragraph and narrow space", "\\boxed{reveal\u20292\u202f3}", msRevealed(1, 2, 3)},
		{"math and ideographic space", "\\boxed{reveal\u205f2\u30003}", msRevealed(1, 2, 3)},
		{"zero width space is not whitespace", "\\boxed{reveal\u200b2 3}", noGuess(1)},
		{"byte order mark is not whitespace", "\\boxed{reveal\ufeff2 3}", noGuess(1)},
		{"two spaces", `\boxed{reveal  2 3}`, noGuess(1)},
		{"comma", `\boxed{reveal 1, 2}`, noGuess(1)},
		{"parenthesised", `\boxed{reveal (1,2)}`, noGuess(1)},
		{"leading space", `\boxed{ reveal 2 3}`, noGuess(1)},
		{"trailing space", `\boxed{reveal 2 3 }`, noGuess(1)},
		{"no word", `\boxed{2 3}`, noGuess(1)},
		{"one number", `\boxed{reveal 2}`, noGuess(1)},
		{"negative", `\boxed{reveal -1 2}`, noGuess(1)},
		{"non-ascii letter", `\boxed{révéler 2 3}`, noGuess(1)},
		{"digit in word", `\boxed{reveal2 2 3}`, noGuess(1)},
		{"upper case box", `\BOXED{reveal 2 3}`, noGuess(1)},
		{"no backslash", `boxed{reveal 2 3}`, noGuess(1)},
		{"empty", ``, noGuess(1)},
		{"arabic-indic", `\boxed{reveal ٢ ٣}`, msRevealed(1, 2, 3)},
		{"mathematical bold", `\boxed{reveal 𝟐 𝟑}`, msRevealed(1, 2, 3)},
		{"fullwidth out of bounds", `\boxed{reveal １２ ３}`, msOutside(1, "12", "3")},
		{"superscript", `\boxed{reveal ² 3}`, noGuess(1)},
		{"leading zeros", `\boxed{reveal 0002 03}`, msRevealed(1, 2, 3)},
		{"zero is a valid row", `\boxed{reveal 0 0}`, msRevealed(1, 0, 0)},
		{"4300 digits", `\boxed{reveal ` + big4300 + ` 0}`, msOutside(1, big4300, "0")},
		{"4300 zeros then a digit", `\boxed{reveal 0 ` + strings.Repeat("0", 4299) + `3}`, msRevealed(1, 0, 3)},
		{"4301 digits", `\boxed{reveal ` + big4300 + `0 0}`, noGuess(1)},
		{"4301 digits in col", `\boxed{reveal 0 ` + strings.Repeat("0", 4300) + `3}`, noGuess(1)},
		{"doubled backslash", `\\boxed{reveal 2 3}`, msRevealed(1, 2, 3)},
		{"last match wins", `\boxed{reveal 4 4} no, \boxed{reveal 2 3}`, msRevealed(1, 2, 3)},
		{"non-matching box skipped", `\boxed{reveal 2 3} then \boxed{reveal 4, 4}`, msRevealed(1, 2, 3)},
		{"last match too long", `\boxed{reveal 2 3} \boxed{reveal ` + big4300 + `0 0}`, noGuess(1)},
		{"last match unknown word", `\boxed{reveal 2 3} \boxed{Dig 0 0}`, msInvalid(1, "dig")},
		{"invalid utf-8", "\\boxed{reveal 2 3}\xff\\boxed{\xff 1 1}", msRevealed(1, 2, 3)},
		{"invalid utf-8 as space", "\\boxed{reveal\xff2 3}", noGuess(1)},
		{"nested box", `\boxed{\boxed{reveal 2 3}}`, msRevealed(1, 2, 3)},
		{"unclosed box before a match", `\boxed{reveal 4 4 \boxed{reveal 2 3}`, msRevealed(1, 2, 3)},
		{"match then unclosed box", `\boxed{reveal 2 3} \boxed{reveal 4 4`, msRevealed(1, 2, 3)},
		{"box inside a word", `x\boxed{reveal 2 3}y`, msRevealed(1, 2, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, msEasy, "", msLayout).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %.80q, want %.80q", tt.action, got.Observation, tt.obs)
			}
			w, r, c, ok := parseMinesweeperAction(tt.action)
			if rw, rr, rc, rok := msReferenceParse(tt.action); w != rw || r != rr || c != rc || ok != rok {
				t.Errorf("parser and regexp disagree on %.60q", tt.action)
			}
		})
	}
}

// msSnapshot decodes an env's snapshot.
func msSnapshot(t testing.TB, env Env) minesweeperState {
	t.Helper()
	var s minesweeperState
	if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMinesweeperRandomReset checks the drawn parameters and examples over many seeds.
func TestMinesweeperRandomReset(t *testing.T) {
	sizes := map[int]int{}
	for seed := range uint64(2000) {
		env := mustNew(t, msRandom)
		obs, info := env.Reset(NewRNG(seed))
		s := msSnapshot(t, env)
		n := s.Rows
		wantMines := map[int]int{5: 5, 6: 7, 7: 9, 8: 12}[n]
		switch {
		case n < 5 || n > 8 || s.Cols != n:
			t.Fatalf("seed %d: board %dx%d", seed, s.Rows, s.Cols)
		case s.NumMines != wantMines || s.MaxTurns != n*n || env.MaxTurns() != n*n:
			t.Fatalf("seed %d: %d mines, %d turns on %dx%d", seed, s.NumMines, s.MaxTurns, n, n)
		case !s.inBounds(s.RevealExample) || !s.inBounds(s.FlagExample):
			t.Fatalf("seed %d: examples %v %v", seed, s.RevealExample, s.FlagExample)
		case len(s.MineOrder) != n*n || !s.FirstReveal || len(s.Mines)+len(s.Revealed)+len(s.Flagged) != 0 || s.Turn != 0:
			t.Fatalf("seed %d: not a fresh episode: %s", seed, env.Snapshot())
		case !s.Random:
			t.Fatalf("seed %d: random flag lost", seed)
		}
		if err := s.validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		ex := fmt.Sprintf(`- \boxed{reveal %d %d} to reveal the cell in Row %d, Column %d.`, s.RevealExample[0], s.RevealExample[1], s.RevealExample[0], s.RevealExample[1])
		if !strings.Contains(obs, ex) {
			t.Fatalf("seed %d: instructions lack %q", seed, ex)
		}
		if got := strings.Count(info["suffix"], "\n"); got != n+3 {
			t.Fatalf("seed %d: suffix has %d lines for %d rows:\n%s", seed, got, n, info["suffix"])
		}
		sizes[n]++
	}
	if len(sizes) != 4 {
		t.Errorf("sizes drawn: %v, want all of 5..8", sizes)
	}
}

// TestMinesweeperMinePlacement checks, over many seeds and first reveals, that
// the drawn layout has num_mines distinct mines, none in the 3x3 block around
// the first reveal (so the first reveal is never a mine), and that every
// cell outside the block can get a mine.
func TestMinesweeperMinePlacement(t *testing.T) {
	for _, id := range msIDs {
		t.Run(id, func(t *testing.T) {
			hit := map[[3]int]bool{} // (size, cell, first reveal cell)
			for seed := range uint64(300) {
				env := newTestEnv(t, id, "", "")
				env.Reset(NewRNG(seed))
				s := msSnapshot(t, env)
				r, c := 0, 0 // every other episode starts in the corner
				if seed%2 == 1 {
					r, c = int(seed/2)%s.Rows, int(seed/16)%s.Cols
				}
				if res := env.Step(msReveal(r, c)); strings.HasPrefix(res.Observation, "Game over!") {
					t.Fatalf("seed %d: first reveal (%d, %d) hit a mine", seed, r, c)
				}
				after := msSnapshot(t, env)
				if after.FirstReveal || len(after.Mines) != s.NumMines {
					t.Fatalf("seed %d: %d mines placed, want %d", seed, len(after.Mines), s.NumMines)
				}
				if err := after.validate(); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				for _, m := range after.Mines {
					if m[0] >= r-1 && m[0] <= r+1 && m[1] >= c-1 && m[1] <= c+1 {
						t.Fatalf("seed %d: mine %v next to the first reveal (%d, %d)", seed, m, r, c)
					}
					if r == 0 && c == 0 {
						hit[[3]int{s.Rows, m[0], m[1]}] = true
					}
				}
			}
			if id == msEasy && len(hit) != 25-4 {
				t.Errorf("corner first reveals put mines on %d cells, want all 21 outside the block", len(hit))
			}
		})
	}
}

// TestMinesweeperRewardSum plays random games: an episode's rewards sum to at
// most 1 (the share of safe cells revealed), and to 1 when every safe cell is revealed.
func TestMinesweeperRewardSum(t *testing.T) {
	for seed := range uint64(200) {
		env := newTestEnv(t, msRandom, "", "")
		env.Reset(NewRNG(seed))
		rng := NewRNG(seed + 1)
		sum := 0.0
		for {
			s := msSnapshot(t, env)
			r, c := uniformInt(rng, 0, s.Rows-1), uniformInt(rng, 0, s.Cols-1)
			if res := env.Step(msReveal(r, c)); res.Reward >= 0 {
				sum += res.Reward
				if res.Done() {
					break
				}
			}
		}
		s := msSnapshot(t, env)
		if sum > 1+1e-9 {
			t.Fatalf("seed %d: rewards sum to %v", seed, sum)
		}
		if safe := s.Rows*s.Cols - s.NumMines; len(s.Revealed) == safe && sum < 1-1e-9 {
			t.Fatalf("seed %d: all %d safe cells revealed, rewards sum to %v", seed, safe, sum)
		}
	}
}

// TestMinesweeperSameSeed checks that a seed fixes the whole episode, for every id.
func TestMinesweeperSameSeed(t *testing.T) {
	actions := []string{msReveal(2, 2), msFlag(0, 0), msReveal(0, 1), msReveal(4, 4), msReveal(1, 3), msReveal(3, 0), msFlag(0, 0), msReveal(0, 0)}
	for _, id := range msIDs {
		t.Run(id, func(t *testing.T) {
			distinct := map[string]bool{}
			for seed := range uint64(20) {
				a, b := resetPair(t, id, seed)
				stepBothUntilDone(t, a, b, actions)
				distinct[string(a.Snapshot())] = true
			}
			if len(distinct) < 2 {
				t.Error("every seed gave the same episode")
			}
		})
	}
}

// TestMinesweeperSnapshotRoundTrip restores snapshots taken before the first
// reveal (mines still to be placed) and mid-game into a fresh env and checks
// both behave identically from there on.
func TestMinesweeperSnapshotRoundTrip(t *testing.T) {
	for _, id := range msIDs {
		for _, before := range [][]string{nil, {msFlag(0, 0)}, {msFlag(1, 1), msReveal(2, 2)}, {msReveal(0, 4), msFlag(4, 0)}} {
			t.Run(fmt.Sprintf("%s/%d steps", id, len(before)), func(t *testing.T) {
				for seed := range uint64(5) {
					a := newTestEnv(t, id, "", "")
					a.Reset(NewRNG(seed))
					for _, act := range before {
						a.Step(act)
					}
					b := newTestEnv(t, id, "", "")
					b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
					restoreCopy(t, a, b)
					for r := range 5 {
						for c := range 5 {
							for _, act := range []string{msReveal(r, c), msFlag(c, r)} {
								stepBoth(t, a, b, act)
							}
						}
					}
					// Reset keeps the restored configuration: the same seed gives the same episode.
					resetBoth(t, a, b, seed)
				}
			})
		}
	}
}

func TestMinesweeperSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, msEasy, `{"rows": 2, "cols": 4, "num_mines": 1, "max_turns": 5}`,
		`{"mine_order": [7,6,5,4,3,2,1,0], "reveal_example": [1,2], "flag_example": [0,3]}`)
	want := `{"rows":2,"cols":4,"num_mines":1,"max_turns":5,"turn_count":0,"first_reveal":true,"mines":[],"revealed":[],"flagged":[],` +
		`"mine_order":[7,6,5,4,3,2,1,0],"reveal_example":[1,2],"flag_example":[0,3],"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(msFlag(1, 0))
	env.Step(msReveal(0, 0)) // mine at cell 7 = (1, 3); the flag at (1, 0) stays hidden
	want = `{"rows":2,"cols":4,"num_mines":1,"max_turns":5,"turn_count":2,"first_reveal":false,"mines":[[1,3]],"revealed":[[0,0],[0,1],[0,2],[1,1],[1,2]],"flagged":[[1,0]],` +
		`"mine_order":[7,6,5,4,3,2,1,0],"reveal_example":[1,2],"flag_example":[0,3],"random":false}`
	wantSnapshot(t, env, "after steps", want)
	if !msSnapshot(t, newTestEnv(t, msRandom, "", "")).Random {
		t.Error("random variant snapshot lacks random:true")
	}
}

func TestMinesweeperRestore(t *testing.T) {
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "examples re-render instructions", state: `{"reveal_example": [4,0], "flag_example": [3,2]}`, check: func(t *testing.T, env Env) {
			in := env.Instructions()
			if !strings.Contains(in, `- \boxed{reveal 4 0} to reveal the cell in Row 4, Column 0.`) ||
				!strings.Contains(in, `- \boxed{flag 3 2} to place or remove a flag on the cell in Row 3, Column 2.`) {
				t.Errorf("instructions: %s", in)
			}
		}},
		{name: "mid-game state", state: `{"first_reveal": false, "turn_count": 3, "revealed": [[2,3]], "flagged": [[4,4],[0,4]]}`,
			check: func(t *testing.T, env Env) {
				if env.Turn() != 3 {
					t.Errorf("Turn() = %d", env.Turn())
				}
				msPlay(t, env, []msStep{
					{msFlag(2, 3), msFlagRevealed(4, 2, 3), 0, false, false, "" +
						"    0  1  2  3  4\n" +
						" 0  .  .  .  .  F \n" +
						" 1  .  .  .  .  . \n" +
						" 2  .  .  .  1  . \n" +
						" 3  .  .  .  .  . \n" +
						" 4  .  .  .  .  F \n"},
					{msReveal(4, 4), msMine(4, 4), 0, true, false, ""},
				})
			}},
		{name: "cells are sorted", state: `{"flagged": [[3,3],[0,1],[3,0]]}`, check: func(t *testing.T, env Env) {
			if !strings.Contains(string(env.Snapshot()), `"flagged":[[0,1],[3,0],[3,3]]`) {
				t.Errorf("snapshot %s", env.Snapshot())
			}
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "zero rows", state: `{"rows": 0}`, wantErr: "rows"},
		{name: "zero cols", state: `{"cols": 0}`, wantErr: "cols"},
		{name: "too many cells", state: `{"rows": 1000, "cols": 1000}`, wantErr: "rows"},
		{name: "negative mines", state: `{"num_mines": -1}`, wantErr: "num_mines"},
		{name: "mines do not fit", state: `{"num_mines": 17}`, wantErr: "num_mines"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "reveal example off the board", state: `{"reveal_example": [5,0]}`, wantErr: "reveal_example"},
		{name: "flag example off the board", state: `{"flag_example": [0,-1]}`, wantErr: "flag_example"},
		{name: "mine off the board", state: `{"mines": [[0,4],[1,4],[3,0],[4,3],[4,5]]}`, wantErr: "mines"},
		{name: "mine twice", state: `{"mines": [[0,4],[1,4],[3,0],[4,3],[4,3]]}`, wantErr: "mines"},
		{name: "too few mines", state: `{"mines": [[0,4]]}`, wantErr: "mines"},
		{name: "placed state needs mines", state: `{"first_reveal": false, "mines": []}`, wantErr: "mines"},
		{name: "pending draw needs an order", state: `{"mines": [], "mine_order": []}`, wantErr: "mine_order"},
		{name: "order too short", state: `{"mine_order": [0,1,2]}`, wantErr: "mine_order"},
		{name: "order repeats", state: `{"mine_order": [0,0,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24]}`, wantErr: "mine_order"},
		{name: "order out of range", state: `{"mine_order": [25,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24]}`, wantErr: "mine_order"},
		{name: "revealed before the first reveal", state: `{"revealed": [[2,2]]}`, wantErr: "revealed"},
		{name: "revealed mine", state: `{"first_reveal": false, "revealed": [[0,4]]}`, wantErr: "revealed"},
		{name: "revealed twice", state: `{"first_reveal": false, "revealed": [[2,2],[2,2]]}`, wantErr: "revealed"},
		{name: "flagged and revealed", state: `{"first_reveal": false, "revealed": [[2,2]], "flagged": [[2,2]]}`, wantErr: "flagged"},
		{name: "cell not a pair", state: `{"flagged": [[1,2,3]]}`, wantErr: "flagged"},
		{name: "cell too short", state: `{"reveal_example": [1]}`, wantErr: "reveal_example"},
		{name: "cell not numbers", state: `{"mines": [["a","b"]]}`, wantErr: "mines"},
		{name: "string value", state: `{"rows": "5"}`, wantErr: "rows"},
		{name: "null value", state: `{"mines": null}`, wantErr: "mines"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"board": []}`, wantErr: "board"},
		{name: "not an object", state: `[1]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, msEasy, "", msLayout)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

func TestMinesweeperSpecs(t *testing.T) {
	want := map[string]specWant{
		msEasy:   {map[string]any{"rows": 5, "cols": 5, "num_mines": 5, "max_turns": 25}, 25},
		msHard:   {map[string]any{"rows": 8, "cols": 8, "num_mines": 12, "max_turns": 64}, 64},
		msRandom: {map[string]any{"rows": nil, "cols": nil, "num_mines": nil, "max_turns": nil}, 0},
	}
	wantSpecs(t, "Minesweeper", "", want)
	for id, w := range want {
		env := newTestEnv(t, id, "", "")
		if st := msSnapshot(t, env); id != msRandom && (st.Rows != w.params["rows"] || st.NumMines != w.params["num_mines"] || env.MaxTurns() != w.maxTurns) {
			t.Errorf("%s: state %s", id, env.Snapshot())
		}
	}
	n := 0
	for _, s := range Specs() {
		if s.Family == "Minesweeper" {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d Minesweeper ids registered, want %d", n, len(want))
	}
}

func TestMinesweeperNewOptions(t *testing.T) {
	tests := []struct {
		name, id, opts string
		wantRandom     bool
		rows, cols     int
		mines, turns   int
	}{
		{name: "no opts", id: msEasy, rows: 5, cols: 5, mines: 5, turns: 25},
		{name: "max_turns", id: msHard, opts: `{"max_turns": 3}`, rows: 8, cols: 8, mines: 12, turns: 3},
		{name: "unknown keys ignored", id: msEasy, opts: `{"seed": 3, "size": "x"}`, rows: 5, cols: 5, mines: 5, turns: 25},
		{name: "historical very-easy", id: msEasy, opts: `{"rows": 3, "cols": 3, "num_mines": 0, "max_turns": 10}`, rows: 3, cols: 3, turns: 10},
		{name: "null makes it random", id: msEasy, opts: `{"num_mines": null}`, wantRandom: true},
		{name: "fixed on the random id", id: msRandom, opts: `{"rows": 4, "cols": 6, "num_mines": 3, "max_turns": 9}`, rows: 4, cols: 6, mines: 3, turns: 9},
		{name: "one null keeps it random", id: msRandom, opts: `{"rows": 4, "cols": 6, "num_mines": 3}`, wantRandom: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := msSnapshot(t, newTestEnv(t, tt.id, tt.opts, ""))
			if s.Random != tt.wantRandom {
				t.Fatalf("random = %v, want %v", s.Random, tt.wantRandom)
			}
			if tt.wantRandom {
				if s.Rows < 5 || s.Rows > 8 || s.MaxTurns != s.Rows*s.Rows {
					t.Errorf("drawn state out of bounds: %+v", s)
				}
				return
			}
			if s.Rows != tt.rows || s.Cols != tt.cols || s.NumMines != tt.mines || s.MaxTurns != tt.turns {
				t.Errorf("state %+v", s)
			}
		})
	}
	wantBadOptions(t, []badOption{
		{"string rows", msEasy, `{"rows": "5"}`, "rows"},
		{"fractional cols", msEasy, `{"cols": 2.5}`, "cols"},
		{"zero rows", msEasy, `{"rows": 0}`, "rows"},
		{"huge board", msEasy, `{"rows": 100000, "cols": 100000}`, "rows"},
		{"negative mines", msEasy, `{"num_mines": -1}`, "num_mines"},
		{"historical 3x3 with a mine could hang", msEasy, `{"rows": 3, "cols": 3, "num_mines": 1}`, "num_mines"},
		{"zero max_turns", msEasy, `{"max_turns": 0}`, "max_turns"},
		{"not an object", msEasy, `[1]`, "object"},
	})
}

// TestMinesweeperBeforeReset: an env used before Reset must not panic, and a
// fixed-size one plays a valid (if not random) game.
func TestMinesweeperBeforeReset(t *testing.T) {
	for _, id := range msIDs {
		env := mustNew(t, id)
		for _, act := range []string{msFlag(0, 0), msReveal(0, 0), msReveal(4, 4), "x", msReveal(2, 2)} {
			env.Step(act)
		}
		_ = env.Instructions()
		if id != msRandom {
			if s := msSnapshot(t, env); s.validate() != nil {
				t.Errorf("%s: %v", id, s.validate())
			}
		}
	}
}

// TestMinesweeperHugeAction steps a 1 MB action; the parser is linear, so
// this takes milliseconds; the deadline only catches a pathological slowdown.
func TestMinesweeperHugeAction(t *testing.T) {
	actions := []string{
		strings.Repeat(`\boxed{reveal 1 1}`, hugeLen()/18) + `\boxed{flag 0 0}`,
		`\boxed{reveal ` + strings.Repeat("9", hugeLen()) + ` 0}`,
		strings.Repeat(`\boxed{reveal 1 `, hugeLen()/16),
		strings.Repeat("\u3000", hugeLen()/3),
	}
	wants := []string{msAdded(1, 0, 0), noGuess(1), noGuess(1), noGuess(1)}
	for i, act := range actions {
		env := newTestEnv(t, msEasy, "", msLayout)
		if got := stepWithin(t, env, act, 10*time.Second); got.Observation != wants[i] {
			t.Errorf("action %d: %q, want %q", i, got.Observation, wants[i])
		}
	}
}

// FuzzMinesweeperStep feeds arbitrary action text to Step: it must never
// panic, the observation must be one of GEM's lines, the state must stay
// valid and the reward must be -0.1, 0 or a reveal share in (0, 1].
func FuzzMinesweeperStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{reveal 2 2}`, `\boxed{Flag 0 4}`, `\boxed{dig 9 9}`, `\boxed{reveal ٢ ٣}`, "\\boxed{reveal\u30002\u00853}",
		`\boxed{reveal 1, 2}`, `\boxed{reveal  1 2}`, `\\boxed{reveal 0 0}`, `\boxed{reveal 99999999999999999999 0}`,
		`\boxed{reveal 4 4} no, \boxed{reveal 2 3}`, "\\boxed{reveal 1 1}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, msIDs, which, seed)
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn := env.Turn()
			switch obs := r.Observation; {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), noGuess(turn), turnLimit):
			case obs == msWin:
				if r.Reward <= 0 || !r.Terminated || r.Truncated {
					t.Fatalf("win result %+v", r)
				}
			case strings.HasPrefix(obs, "Game over! You hit a mine at ("):
				if r.Reward != 0 || !r.Terminated || r.Truncated {
					t.Fatalf("mine result %+v", r)
				}
			case strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you successfully revealed", turn)):
				if r.Reward <= 0 || r.Reward > 1 || r.Done() {
					t.Fatalf("reveal result %+v", r)
				}
			case strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you chose ", turn)),
				strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you added a flag", turn)),
				strings.HasPrefix(obs, fmt.Sprintf("At turn %d, you removed a flag", turn)):
				if r.Reward != 0 || r.Done() {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", obs)
			}
			if !strings.HasSuffix(r.Info["suffix"], "\nEnter your guess.") || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
			if s := msSnapshot(t, env); s.validate() != nil {
				t.Fatalf("state after %q: %v", action, s.validate())
			}
		}
		// The parser agrees with GEM's regex; row and col are always canonical
		// ASCII decimal, the word lowercase ASCII.
		word, row, col, ok := parseMinesweeperAction(action)
		if rw, rr, rc, rok := msReferenceParse(action); word != rw || row != rr || col != rc || ok != rok {
			t.Fatalf("parse %q = %q %q %q %v, regexp gives %q %q %q %v", action, word, row, col, ok, rw, rr, rc, rok)
		}
		if ok {
			for _, n := range []string{row, col} {
				if n == "" || (n[0] == '0' && n != "0") || strings.Trim(n, "0123456789") != "" {
					t.Fatalf("parsed %q from %q", n, action)
				}
			}
			if word == "" || strings.Trim(word, "abcdefghijklmnopqrstuvwxyz") != "" {
				t.Fatalf("parsed word %q from %q", word, action)
			}
		}
	})
}
