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
	mastermindEasy   = "game:Mastermind-v0-easy"
	mastermindHard   = "game:Mastermind-v0-hard"
	mastermindRandom = "game:Mastermind-v0-random"
)

var mastermindIDs = []string{mastermindEasy, mastermindHard, mastermindRandom}

// Builders for GEM's feedback lines; g is the guess as GEM prints it.
func mmPegs(turn int, g string, black, white int) string {
	return fmt.Sprintf("At turn %d, you guessed %s. This guess receives %d black peg(s) and %d white peg(s).", turn, g, black, white)
}

func mmLength(turn int, g string, n, length int) string {
	return fmt.Sprintf("At turn %d, you guessed %s which has %d entries but the code has length %d.", turn, g, n, length)
}

func mmRange(turn int, g string, n int) string {
	return fmt.Sprintf("At turn %d, you guessed %s, which has numbers outside the range 1 to %d.", turn, g, n)
}

func mmRepeated(turn int, g string) string {
	return fmt.Sprintf("At turn %d, you guessed %s, which has been already guessed before.", turn, g)
}

func mmWin(code string, turn int) string {
	return fmt.Sprintf("Congratulations! You guessed the correct code %s in %d turns.", code, turn)
}

func mmNoGuess(turn int) string {
	return fmt.Sprintf("At turn %d, you did not provide a valid guess.", turn)
}

// mastermindFixtureCases gives the hidden state each GEM transcript was produced with.
var mastermindFixtureCases = map[string]struct {
	id    string
	state string
}{
	"mm-01.jsonl": {mastermindHard, `{"code": [1, 2, 3, 4], "example": [2, 4, 7, 6]}`},
	"mm-02.jsonl": {mastermindEasy, `{"code": [3, 5], "example": [4, 1]}`},
	"mm-03.jsonl": {mastermindEasy, `{"code": [1, 2], "example": [6, 2]}`},
}

// TestMastermindFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestMastermindFixtures(t *testing.T) {
	replayFixtures(t, "mastermind", mastermindFixtureCases, func(t *testing.T, fc struct{ id, state string }, reset fixtureReset) Env {
		env := mustNew(t, fc.id)
		_, info := env.Reset(NewRNG(7))
		if info == nil || len(info) != 0 || len(reset.Info) != 0 {
			t.Errorf("reset info = %v, fixture %v; want both empty", info, reset.Info)
		}
		mustRestore(t, env, fc.state)
		return env
	})
}

// TestMastermindBranches covers every branch of Step for every registered id.
func TestMastermindBranches(t *testing.T) {
	// The -random id after a reset that drew (4, 6, 20).
	const random46 = `{"code_length": 4, "num_numbers": 6, "max_turns": 20, "code": [6, 5, 4, 3], "example": [1, 2, 3, 4]}`
	tests := []struct {
		name, id, opts, state string
		steps                 []step
	}{
		// -easy: 2 digits from 1..6, 10 turns.
		{name: "easy/win on turn 1 pays the whole reward", id: mastermindEasy, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{3 5}`, mmWin("[3, 5]", 1), 1, true, false},
		}},
		{name: "easy/milestones then win", id: mastermindEasy, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{5 3}`, mmPegs(1, "[5, 3]", 0, 2), 0, false, false},
			{`\boxed{3 1}`, mmPegs(2, "[3, 1]", 1, 0), 0.5, false, false},
			{`\boxed{2 5}`, mmPegs(3, "[2, 5]", 1, 0), 0, false, false}, // ties the milestone: no reward
			{`\boxed{3 5}`, mmWin("[3, 5]", 4), 0.5, true, false},
		}},
		{name: "easy/every invalid message continues", id: mastermindEasy, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{35}`, mmLength(1, "[35]", 1, 2), 0, false, false},
			{`\boxed{1 2 3}`, mmLength(2, "[1, 2, 3]", 3, 2), 0, false, false},
			{`\boxed{007 3 0}`, mmLength(3, "[7, 3, 0]", 3, 2), 0, false, false}, // length is checked before range
			{`\boxed{3 7}`, mmRange(4, "[3, 7]", 6), 0, false, false},
			{`\boxed{0 3}`, mmRange(5, "[0, 3]", 6), 0, false, false},
			{`\boxed{99999999999999999999 1}`, mmRange(6, "[99999999999999999999, 1]", 6), 0, false, false},
			{`\boxed{1 2}`, mmPegs(7, "[1, 2]", 0, 0), 0, false, false},
			{`\boxed{01  2}`, mmRepeated(8, "[1, 2]"), 0, false, false},
			{`\boxed{3 7}`, mmRange(9, "[3, 7]", 6), 0, false, false}, // invalid guesses are not recorded
		}},
		{name: "easy/repeated digits in a guess", id: mastermindEasy, state: `{"code": [1, 2]}`, steps: []step{
			{`\boxed{1 1}`, mmPegs(1, "[1, 1]", 1, 0), 0.5, false, false},
			{`\boxed{2 2}`, mmPegs(2, "[2, 2]", 1, 0), 0, false, false},
			{`\boxed{2 1}`, mmPegs(3, "[2, 1]", 0, 2), 0, false, false},
		}},
		{name: "easy/format error mid-game", id: mastermindEasy, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{1 2}`, mmPegs(1, "[1, 2]", 0, 0), 0, false, false},
			{`\boxed{1,2}`, mmNoGuess(2), -0.1, true, false},
		}},
		{name: "easy/format error on the last turn", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9}`, steps: []step{
			{`\boxed{ 1 2}`, mmNoGuess(10), -0.1, true, true},
		}},
		{name: "easy/length error on the last turn", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9}`, steps: []step{
			{`\boxed{3}`, turnLimit, 0, true, true},
		}},
		{name: "easy/range error on the last turn", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9}`, steps: []step{
			{`\boxed{3 9}`, turnLimit, 0, true, true},
		}},
		{name: "easy/repeat on the last turn", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9, "previous_guesses": [[3, 1]], "milestone": 1}`, steps: []step{
			{`\boxed{3 1}`, turnLimit, 0, true, true},
		}},
		{name: "easy/no new milestone on the last turn", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9, "milestone": 1}`, steps: []step{
			{`\boxed{3 1}`, turnLimit, 0, true, true},
		}},
		{name: "easy/new milestone on the last turn keeps its reward", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9}`, steps: []step{
			{`\boxed{3 1}`, turnLimit, 0.5, true, true},
		}},
		{name: "easy/win on the last turn beats the limit", id: mastermindEasy, state: `{"code": [3, 5], "turn_count": 9, "milestone": 1}`, steps: []step{
			{`\boxed{3 5}`, mmWin("[3, 5]", 10), 0.5, true, false},
		}},
		{name: "easy/max_turns override", id: mastermindEasy, opts: `{"max_turns": 2}`, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{1 2}`, mmPegs(1, "[1, 2]", 0, 0), 0, false, false},
			{`\boxed{1 5}`, turnLimit, 0.5, true, true},
		}},

		// -hard: 4 digits from 1..8, 30 turns.
		{name: "hard/quarter milestones sum to one", id: mastermindHard, state: `{"code": [1, 2, 3, 4]}`, steps: []step{
			{`\boxed{1 5 6 7}`, mmPegs(1, "[1, 5, 6, 7]", 1, 0), 0.25, false, false},
			{`\boxed{1 2 7 8}`, mmPegs(2, "[1, 2, 7, 8]", 2, 0), 0.25, false, false},
			{`\boxed{1 2 3 8}`, mmPegs(3, "[1, 2, 3, 8]", 3, 0), 0.25, false, false},
			{`\boxed{4 3 2 1}`, mmPegs(4, "[4, 3, 2, 1]", 0, 4), 0, false, false},
			{`\boxed{1 2 3 4}`, mmWin("[1, 2, 3, 4]", 5), 0.25, true, false},
		}},
		{name: "hard/jump of three milestones", id: mastermindHard, state: `{"code": [8, 6, 4, 2]}`, steps: []step{
			{`\boxed{8 6 4 1}`, mmPegs(1, "[8, 6, 4, 1]", 3, 0), 0.75, false, false},
			{`\boxed{1 2 3 5}`, mmPegs(2, "[1, 2, 3, 5]", 0, 1), 0, false, false},
			{`\boxed{8 6 4 9}`, mmRange(3, "[8, 6, 4, 9]", 8), 0, false, false},
			{`\boxed{8 6 4}`, mmLength(4, "[8, 6, 4]", 3, 4), 0, false, false},
			{`\boxed{8 6 4 2}`, mmWin("[8, 6, 4, 2]", 5), 0.25, true, false},
		}},
		{name: "hard/format error", id: mastermindHard, state: `{"code": [1, 2, 3, 4]}`, steps: []step{
			{`\boxed{1 2 3 4 }`, mmNoGuess(1), -0.1, true, false},
		}},
		{name: "hard/milestone on the last turn", id: mastermindHard, state: `{"code": [1, 2, 3, 4], "turn_count": 29, "milestone": 1}`, steps: []step{
			{`\boxed{1 2 3 5}`, turnLimit, 0.5, true, true},
		}},

		// -random after a reset that drew (4, 6, 20).
		{name: "random/range uses the drawn num_numbers", id: mastermindRandom, state: random46, steps: []step{
			{`\boxed{6 5 4 7}`, mmRange(1, "[6, 5, 4, 7]", 6), 0, false, false},
			{`\boxed{6 5}`, mmLength(2, "[6, 5]", 2, 4), 0, false, false},
			{`\boxed{3 4 5 6}`, mmPegs(3, "[3, 4, 5, 6]", 0, 4), 0, false, false},
			{`\boxed{6 5 4 3}`, mmWin("[6, 5, 4, 3]", 4), 1, true, false},
		}},

		// duplicate_numbers override: the code may repeat digits.
		{name: "duplicates/pegs with repeats in code and guess", id: mastermindHard, opts: `{"duplicate_numbers": true}`, state: `{"code": [1, 1, 2, 2]}`, steps: []step{
			{`\boxed{1 2 1 2}`, mmPegs(1, "[1, 2, 1, 2]", 2, 2), 0.5, false, false},
			{`\boxed{2 2 1 1}`, mmPegs(2, "[2, 2, 1, 1]", 0, 4), 0, false, false},
			{`\boxed{1 1 1 3}`, mmPegs(3, "[1, 1, 1, 3]", 2, 0), 0, false, false},
			{`\boxed{1 1 2 2}`, mmWin("[1, 1, 2, 2]", 4), 0.5, true, false},
		}},

		// GEM does not guard against stepping after done; neither do we.
		{name: "after done/keeps counting", id: mastermindEasy, opts: `{"max_turns": 3}`, state: `{"code": [3, 5]}`, steps: []step{
			{`\boxed{3 5}`, mmWin("[3, 5]", 1), 1, true, false},
			{`\boxed{3 5}`, mmRepeated(2, "[3, 5]"), 0, false, false},
			{`\boxed{3 1}`, turnLimit, 0, true, true}, // milestone is already 2
			{`\boxed{3 2}`, turnLimit, 0, true, true},
			{"none", mmNoGuess(5), -0.1, true, false}, // "== max_turns" no longer holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			play(t, newTestEnv(t, tt.id, tt.opts, tt.state), suffixInfo("Enter your guess."), tt.steps)
		})
	}
}

// TestMastermindRandomTurnLimit runs a drawn episode to its turn limit.
func TestMastermindRandomTurnLimit(t *testing.T) {
	env := newTestEnv(t, mastermindRandom, "", `{"code_length": 2, "num_numbers": 4, "max_turns": 10, "code": [4, 3], "example": [1, 2]}`)
	if env.MaxTurns() != 10 {
		t.Fatalf("MaxTurns() = %d", env.MaxTurns())
	}
	play(t, env, suffixInfo("Enter your guess."), []step{
		{`\boxed{5 5}`, mmRange(1, "[5, 5]", 4), 0, false, false},
		{`\boxed{1 2}`, mmPegs(2, "[1, 2]", 0, 0), 0, false, false},
		{`\boxed{2 1}`, mmPegs(3, "[2, 1]", 0, 0), 0, false, false},
		{`\boxed{1 3}`, mmPegs(4, "[1, 3]", 1, 0), 0.5, false, false},
		{`\boxed{3 1}`, mmPegs(5, "[3, 1]", 0, 1), 0, false, false},
		{`\boxed{2 3}`, mmPegs(6, "[2, 3]", 1, 0), 0, false, false},
		{`\boxed{3 2}`, mmPegs(7, "[3, 2]", 0, 1), 0, false, false},
		{`\boxed{1 4}`, mmPegs(8, "[1, 4]", 0, 1), 0, false, false},
		{`\boxed{4 1}`, mmPegs(9, "[4, 1]", 1, 0), 0, false, false},
		{`\boxed{3 4}`, turnLimit, 0, true, true},
	})
}

// TestMastermindParsing covers the action parser through Step: GEM's regex
// semantics, Python whitespace and int() conversion. -easy, code [3, 5].
func TestMastermindParsing(t *testing.T) {
	big4300 := "1" + strings.Repeat("0", 4299)
	tests := []struct {
		name, action, obs string
	}{
		{"plain", `\boxed{1 2}`, mmPegs(1, "[1, 2]", 0, 0)},
		{"several spaces", `\boxed{1    2}`, mmPegs(1, "[1, 2]", 0, 0)},
		{"newline", "\\boxed{1\n2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"tab", "\\boxed{1\t2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"vertical tab and form feed", "\\boxed{1\v\f2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"carriage return", "\\boxed{1\r\n2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"file separator", "\\boxed{1\x1c2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"unit separator", "\\boxed{1\x1f2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"next line", "\\boxed{1\u00852}", mmPegs(1, "[1, 2]", 0, 0)},
		{"no-break space", "\\boxed{1\u00a02}", mmPegs(1, "[1, 2]", 0, 0)},
		{"ogham space", "\\boxed{1\u16802}", mmPegs(1, "[1, 2]", 0, 0)},
		{"en quad", "\\boxed{1\u20002}", mmPegs(1, "[1, 2]", 0, 0)},
		{"hair space", "\\boxed{1\u200a2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"line separator", "\\boxed{1\u20282}", mmPegs(1, "[1, 2]", 0, 0)},
		{"paragraph separator", "\\boxed{1\u20292}", mmPegs(1, "[1, 2]", 0, 0)},
		{"narrow no-break space", "\\boxed{1\u202f2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"medium math space", "\\boxed{1\u205f2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"ideographic space", "\\boxed{1\u30002}", mmPegs(1, "[1, 2]", 0, 0)},
		{"mixed whitespace run", "\\boxed{1 \t\u3000\n2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"zero-width space is not whitespace", "\\boxed{1\u200b2}", mmNoGuess(1)},
		{"word joiner is not whitespace", "\\boxed{1\u20602}", mmNoGuess(1)},
		{"mongolian vowel separator is not whitespace", "\\boxed{1\u180e2}", mmNoGuess(1)},
		{"byte order mark is not whitespace", "\\boxed{1\ufeff2}", mmNoGuess(1)},
		{"arabic-indic", `\boxed{٣ ٥}`, mmWin("[3, 5]", 1)},
		{"mathematical bold", `\boxed{𝟑 𝟓}`, mmWin("[3, 5]", 1)},
		{"fullwidth in ideographic space", "\\boxed{３\u3000５}", mmWin("[3, 5]", 1)},
		{"mixed scripts in one number", `\boxed{١𝟐 3}`, mmRange(1, "[12, 3]", 6)},
		{"leading zeros", `\boxed{003 0005}`, mmWin("[3, 5]", 1)},
		{"zero", `\boxed{0 5}`, mmRange(1, "[0, 5]", 6)},
		{"zeros", `\boxed{000 5}`, mmRange(1, "[0, 5]", 6)},
		{"one entry", `\boxed{35}`, mmLength(1, "[35]", 1, 2)},
		{"three entries", `\boxed{3 5 1}`, mmLength(1, "[3, 5, 1]", 3, 2)},
		{"huge number", `\boxed{3 123456789012345678901234567890}`, mmRange(1, "[3, 123456789012345678901234567890]", 6)},
		{"beyond int64", `\boxed{9223372036854775808 1}`, mmRange(1, "[9223372036854775808, 1]", 6)},
		{"4300 digits", `\boxed{3 ` + big4300 + `}`, mmRange(1, "[3, "+big4300+"]", 6)},
		{"4300 digits mostly zeros", `\boxed{3 ` + strings.Repeat("0", 4299) + `5}`, mmWin("[3, 5]", 1)},
		{"4300 multibyte digits", `\boxed{3 ` + strings.Repeat("٠", 4299) + `٥}`, mmWin("[3, 5]", 1)},
		{"4301 digits", `\boxed{3 ` + big4300 + `0}`, mmNoGuess(1)},
		{"4301 digits mostly zeros", `\boxed{` + strings.Repeat("0", 4300) + `3 5}`, mmNoGuess(1)},
		{"4301 digits as a surplus entry", `\boxed{3 5 ` + big4300 + `0}`, mmNoGuess(1)},
		{"doubled backslash", `\\boxed{3 5}`, mmWin("[3, 5]", 1)},
		{"inside math", `$\boxed{1 2}$`, mmPegs(1, "[1, 2]", 0, 0)},
		{"no backslash", `boxed{3 5}`, mmNoGuess(1)},
		{"comma", `\boxed{3,5}`, mmNoGuess(1)},
		{"comma and space", `\boxed{3, 5}`, mmNoGuess(1)},
		{"leading space", `\boxed{ 3 5}`, mmNoGuess(1)},
		{"trailing space", `\boxed{3 5 }`, mmNoGuess(1)},
		{"space before brace", `\boxed {3 5}`, mmNoGuess(1)},
		{"negative", `\boxed{-3 5}`, mmNoGuess(1)},
		{"decimal", `\boxed{3.0 5}`, mmNoGuess(1)},
		{"brackets", `\boxed{[3, 5]}`, mmNoGuess(1)},
		{"double braces", `\boxed{{3 5}}`, mmNoGuess(1)},
		{"empty box", `\boxed{}`, mmNoGuess(1)},
		{"only whitespace", `\boxed{ }`, mmNoGuess(1)},
		{"superscript", `\boxed{² 3}`, mmNoGuess(1)},
		{"upper case", `\BOXED{3 5}`, mmNoGuess(1)},
		{"plain digits", `3 5`, mmNoGuess(1)},
		{"empty action", ``, mmNoGuess(1)},
		{"invalid utf-8", "\\boxed{1 2}\xff\\boxed{\xff 2}", mmPegs(1, "[1, 2]", 0, 0)},
		{"invalid utf-8 as separator", "\\boxed{3\xff5}", mmNoGuess(1)},
		{"last match wins", `First \boxed{1 2}, actually \boxed{3 5}`, mmWin("[3, 5]", 1)},
		{"last match invalid", `\boxed{3 5} or \boxed{9 9}`, mmRange(1, "[9, 9]", 6)},
		{"non-matching box skipped", `\boxed{1 2} then \boxed{x y}`, mmPegs(1, "[1, 2]", 0, 0)},
		{"failed box then match", `\boxed{1 2 x} \boxed{3 5}`, mmWin("[3, 5]", 1)},
		{"match then failed box", `\boxed{3 5} \boxed{1 2 x}`, mmWin("[3, 5]", 1)},
		{"nested open", `\boxed{1 \boxed{3 5}`, mmWin("[3, 5]", 1)},
		{"adjacent boxes", `\boxed{1 2}\boxed{3 5}`, mmWin("[3, 5]", 1)},
		{"box right after digits", `\boxed{12\boxed{3 5}}`, mmWin("[3, 5]", 1)},
		{"whitespace then brace", "\\boxed{3 5\u3000}", mmNoGuess(1)},
		{"last match too long", `\boxed{3 5} then \boxed{` + big4300 + `0 1}`, mmNoGuess(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, mastermindEasy, "", `{"code": [3, 5]}`).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %.80q, want %.80q", tt.action, got.Observation, tt.obs)
			}
			pieces, ok := mastermindParseGuess(tt.action)
			if wantPieces, wantOK := mastermindOracleParse(tt.action); ok != wantOK || !slices.Equal(pieces, wantPieces) {
				t.Errorf("parse(%.60q) = %.80q, %v; regexp gives %.80q, %v", tt.action, pieces, ok, wantPieces, wantOK)
			}
		})
	}
}

// mastermindOracle is GEM's action pattern as a Go regexp with Python's \d
// and \s classes spelled out: too slow on long actions for the game itself,
// it checks the hand-written scanner.
var mastermindOracle = regexp.MustCompile(`\\boxed\{(\p{Nd}+(?:[\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+\p{Nd}+)*)\}`)

// mastermindOracleRun finds the pieces str.split() yields from a match.
var mastermindOracleRun = regexp.MustCompile(`\p{Nd}+`)

// mastermindOracleParse is mastermindParseGuess by the regexp: last match,
// split into digit runs, each converted with pyInt.
func mastermindOracleParse(action string) ([]string, bool) {
	matches := mastermindOracle.FindAllStringSubmatch(action, -1)
	if len(matches) == 0 {
		return nil, false
	}
	var pieces []string
	for _, run := range mastermindOracleRun.FindAllString(matches[len(matches)-1][1], -1) {
		p, ok := pyInt(run)
		if !ok {
			return nil, false
		}
		pieces = append(pieces, p)
	}
	return pieces, true
}

// TestMastermindIsPySpace checks the whitespace class against the list in
// the spec (Python's str.isspace()) over every code point.
func TestMastermindIsPySpace(t *testing.T) {
	want := map[rune]bool{0x85: true, 0xa0: true, 0x1680: true, 0x2028: true, 0x2029: true, 0x202f: true, 0x205f: true, 0x3000: true}
	for r := rune(0x09); r <= 0x0d; r++ {
		want[r] = true
	}
	for r := rune(0x1c); r <= 0x20; r++ {
		want[r] = true
	}
	for r := rune(0x2000); r <= 0x200a; r++ {
		want[r] = true
	}
	for r := rune(0); r <= 0x10ffff; r++ {
		if got := isPySpace(r); got != want[r] {
			t.Errorf("isPySpace(%U) = %v", r, got)
		}
	}
}

// TestMastermindPegs checks GEM's peg rule, and that it equals the standard
// count (sum over digits of the smaller multiplicity, minus black) on random pairs.
func TestMastermindPegs(t *testing.T) {
	tests := []struct {
		code, guess  []int
		black, white int
	}{
		{[]int{1, 2, 3, 4}, []int{1, 2, 3, 4}, 4, 0},
		{[]int{1, 2, 3, 4}, []int{4, 3, 2, 1}, 0, 4},
		{[]int{1, 2, 3, 4}, []int{5, 6, 7, 8}, 0, 0},
		{[]int{1, 2, 3, 4}, []int{2, 1, 3, 4}, 2, 2},
		{[]int{1, 2}, []int{1, 1}, 1, 0},
		{[]int{1, 2}, []int{2, 2}, 1, 0},
		{[]int{1, 2, 3, 4}, []int{2, 2, 2, 2}, 1, 0},
		{[]int{1, 2, 3, 4}, []int{3, 3, 1, 1}, 0, 2},
		{[]int{1, 1, 2, 2}, []int{2, 2, 1, 1}, 0, 4},
		{[]int{1, 1, 2, 3}, []int{1, 3, 1, 1}, 1, 2},
	}
	for _, tt := range tests {
		if b, w := mastermindPegs(tt.code, tt.guess); b != tt.black || w != tt.white {
			t.Errorf("pegs(%v, %v) = %d, %d; want %d, %d", tt.code, tt.guess, b, w, tt.black, tt.white)
		}
	}
	rng := NewRNG(5)
	for range 20000 {
		n := uniformInt(rng, 1, 6)
		code, guess := make([]int, n), make([]int, n)
		for i := range n {
			code[i], guess[i] = uniformInt(rng, 1, 4), uniformInt(rng, 1, 4)
		}
		black, common := 0, 0
		for i := range n {
			if code[i] == guess[i] {
				black++
			}
		}
		for d := 1; d <= 4; d++ {
			common += min(mmCount(code, d), mmCount(guess, d))
		}
		if b, w := mastermindPegs(code, guess); b != black || w != common-black {
			t.Fatalf("pegs(%v, %v) = %d, %d; want %d, %d", code, guess, b, w, black, common-black)
		}
	}
}

func mmCount(ds []int, d int) int {
	n := 0
	for _, x := range ds {
		if x == d {
			n++
		}
	}
	return n
}

// TestMastermindInstructions checks the rendered text for every id and the
// duplicates wording.
func TestMastermindInstructions(t *testing.T) {
	env := newTestEnv(t, mastermindHard, `{"duplicate_numbers": true, "max_turns": 12}`, `{"example": [8, 1, 2, 7]}`)
	want := "You are playing Mastermind.\n" +
		"You have to guess the secret 4 digit code within 12 turns.\n" +
		"The code consists of digits from 1 to 8 (inclusive). Duplicate numbers are allowed.\n" +
		"After you enter your guess, I will say mark your guess with black and white pegs, where a black peg indicates a correct digit in the correct position, while a white peg indicates a correct digit in the wrong position.\n" +
		"After thinking, format your final answer inside \\boxed{...}, for example, \\boxed{8 1 2 7}.\n" +
		"As you play, the history of your guesses will be appended below. Use the information to complete the game before you run out of guesses.\n" +
		"Enter your first guess to start the game.\n"
	if got := env.Instructions(); got != want {
		t.Errorf("instructions:\n got %q\nwant %q", got, want)
	}
	for _, id := range mastermindIDs {
		env := mustNew(t, id)
		obs, info := env.Reset(NewRNG(3))
		if obs != env.Instructions() || info == nil || len(info) != 0 {
			t.Errorf("%s: Reset returned %q, %v; want the instructions and empty info", id, obs, info)
		}
		if !strings.Contains(obs, "Duplicate numbers are not allowed.") {
			t.Errorf("%s: instructions %q", id, obs)
		}
	}
}

// TestMastermindResetDraws checks codes and examples over many seeds: each is
// code_length distinct digits in range, and the -random variant draws only
// its candidate triples, all of them.
func TestMastermindResetDraws(t *testing.T) {
	for _, id := range mastermindIDs {
		t.Run(id, func(t *testing.T) {
			configs := map[[3]int]int{}
			firsts := map[int]bool{}
			for seed := range uint64(3000) {
				env := mustNew(t, id)
				obs, _ := env.Reset(NewRNG(seed))
				var s mastermindState
				if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
					t.Fatal(err)
				}
				if err := s.validate(); err != nil {
					t.Fatalf("seed %d: drawn state invalid: %v: %s", seed, err, env.Snapshot())
				}
				if s.DuplicateNumbers || s.TurnCount != 0 || s.Milestone != 0 || len(s.PreviousGuesses) != 0 || env.Turn() != 0 {
					t.Fatalf("seed %d: not a fresh episode: %s", seed, env.Snapshot())
				}
				c := [3]int{s.CodeLength, s.NumNumbers, s.MaxTurns}
				if env.MaxTurns() != s.MaxTurns {
					t.Fatalf("seed %d: MaxTurns() = %d, state %d", seed, env.MaxTurns(), s.MaxTurns)
				}
				head := fmt.Sprintf("secret %d digit code within %d turns.\nThe code consists of digits from 1 to %d ", c[0], c[2], c[1])
				if !strings.Contains(obs, head) || !strings.Contains(obs, "for example, "+mmBoxed(s.Example)+".\n") {
					t.Fatalf("seed %d: instructions do not show the drawn values:\n%s", seed, obs)
				}
				configs[c]++
				firsts[s.Code[0]] = true
			}
			want := map[string][][3]int{
				mastermindEasy:   {{2, 6, 10}},
				mastermindHard:   {{4, 8, 30}},
				mastermindRandom: mastermindRandomConfigs[:],
			}[id]
			if got := slices.SortedFunc(maps.Keys(configs), mmCompareConfigs); !slices.Equal(got, want) {
				t.Errorf("drawn configs %v, want %v", configs, want)
			}
			if len(firsts) < 4 {
				t.Errorf("first code digit took only %d values", len(firsts))
			}
		})
	}
}

func mmCompareConfigs(a, b [3]int) int { return slices.Compare(a[:], b[:]) }

func mmBoxed(ds []int) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprint(d)
	}
	return `\boxed{` + strings.Join(parts, " ") + `}`
}

// TestMastermindDuplicateCodes checks that with duplicates allowed the code
// digits are independent (repeats occur) while the example stays distinct.
func TestMastermindDuplicateCodes(t *testing.T) {
	repeats := 0
	for seed := range uint64(500) {
		env, err := New(mastermindHard, json.RawMessage(`{"duplicate_numbers": true}`))
		if err != nil {
			t.Fatal(err)
		}
		env.Reset(NewRNG(seed))
		var s mastermindState
		if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		if err := s.validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(s.Code)))) < len(s.Code) {
			repeats++
		}
	}
	// 1 - 8*7*6*5/8^4 of codes repeat a digit, about 59%.
	if repeats < 200 || repeats > 400 {
		t.Errorf("%d of 500 codes repeat a digit, want about 295", repeats)
	}
}

// TestMastermindSameSeed checks that a seed fixes the whole episode, for every id.
func TestMastermindSameSeed(t *testing.T) {
	actions := []string{`\boxed{1 2}`, `\boxed{1 2 3 4}`, `\boxed{2 1}`, `\boxed{3 4 5 6}`, `\boxed{3 4}`,
		`\boxed{5 6 7 8}`, `\boxed{5 6}`, `\boxed{2 1 4 3}`, `\boxed{4 3}`, `\boxed{6 5}`}
	for _, id := range mastermindIDs {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(uint64, Env) []string { return actions })
			if len(distinct) < 2 {
				t.Error("every seed gave the same episode")
			}
		})
	}
}

// TestMastermindSnapshotRoundTrip restores a mid-game snapshot into a fresh
// env and checks both behave identically from there on.
func TestMastermindSnapshotRoundTrip(t *testing.T) {
	for _, id := range mastermindIDs {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := mustNew(t, id)
				a.Reset(NewRNG(seed))
				a.Step(`\boxed{1 2 3 4}`)
				a.Step(`\boxed{2 1}`)
				a.Step(`\boxed{1 2}`)

				b := mustNew(t, id)
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				for x := 1; x <= 8; x++ {
					for _, act := range []string{fmt.Sprintf(`\boxed{%d %d}`, x, 9-x), fmt.Sprintf(`\boxed{%d %d %d %d}`, x, x%8+1, (x+1)%8+1, (x+2)%8+1)} {
						stepBoth(t, a, b, act)
					}
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

func TestMastermindSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, mastermindEasy, "", `{"code": [3, 5], "example": [4, 1]}`)
	want := `{"code_length":2,"num_numbers":6,"max_turns":10,"duplicate_numbers":false,"code":[3,5],"turn_count":0,"previous_guesses":[],"milestone":0,"example":[4,1],"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(`\boxed{3 1}`)
	env.Step(`\boxed{3 9}`)
	env.Step(`\boxed{5 3}`)
	want = `{"code_length":2,"num_numbers":6,"max_turns":10,"duplicate_numbers":false,"code":[3,5],"turn_count":3,"previous_guesses":[[3,1],[5,3]],"milestone":1,"example":[4,1],"random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, mastermindRandom)
}

func TestMastermindRestore(t *testing.T) {
	const base = `{"code": [3, 5], "example": [4, 1]}` // on -easy: 2 digits from 1..6, 10 turns
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "partial code only", state: `{"code": [6, 1]}`, check: func(t *testing.T, env Env) {
			play(t, env, suffixInfo("Enter your guess."), []step{{`\boxed{6 1}`, mmWin("[6, 1]", 1), 1, true, false}})
		}},
		{name: "example re-renders instructions", state: `{"example": [6, 5]}`, check: func(t *testing.T, env Env) {
			if !strings.Contains(env.Instructions(), `for example, \boxed{6 5}.`) {
				t.Errorf("instructions: %s", env.Instructions())
			}
		}},
		{name: "turn count, guesses and milestone", state: `{"turn_count": 8, "previous_guesses": [[3, 1], [2, 5]], "milestone": 1}`, check: func(t *testing.T, env Env) {
			if env.Turn() != 8 {
				t.Errorf("Turn() = %d", env.Turn())
			}
			play(t, env, suffixInfo("Enter your guess."), []step{
				{`\boxed{2 5}`, mmRepeated(9, "[2, 5]"), 0, false, false},
				{`\boxed{3 5}`, mmWin("[3, 5]", 10), 0.5, true, false},
			})
		}},
		{name: "whole size change", state: `{"code_length": 3, "num_numbers": 3, "max_turns": 1, "code": [3, 1, 2], "example": [1, 2, 3]}`, check: func(t *testing.T, env Env) {
			if env.MaxTurns() != 1 || !strings.Contains(env.Instructions(), "secret 3 digit code within 1 turns.\nThe code consists of digits from 1 to 3 ") {
				t.Errorf("MaxTurns() = %d, instructions: %s", env.MaxTurns(), env.Instructions())
			}
			play(t, env, suffixInfo("Enter your guess."), []step{{`\boxed{3 2 1}`, turnLimit, 1.0 / 3, true, true}})
		}},
		{name: "duplicates allow a repeating code", state: `{"duplicate_numbers": true, "code": [2, 2]}`, check: func(t *testing.T, env Env) {
			play(t, env, suffixInfo("Enter your guess."), []step{{`\boxed{2 2}`, mmWin("[2, 2]", 1), 1, true, false}})
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "code too short", state: `{"code": [3]}`, wantErr: "code"},
		{name: "code digit zero", state: `{"code": [0, 3]}`, wantErr: "code"},
		{name: "code digit too large", state: `{"code": [3, 7]}`, wantErr: "code"},
		{name: "code repeats without duplicates", state: `{"code": [3, 3]}`, wantErr: "code"},
		{name: "example repeats", state: `{"example": [4, 4]}`, wantErr: "example"},
		{name: "example too long", state: `{"example": [4, 1, 2]}`, wantErr: "example"},
		{name: "example out of range", state: `{"example": [4, 7]}`, wantErr: "example"},
		{name: "code_length change leaves code stale", state: `{"code_length": 3}`, wantErr: "code"},
		{name: "code_length zero", state: `{"code_length": 0, "code": [], "example": []}`, wantErr: "code_length"},
		{name: "num_numbers below code_length", state: `{"num_numbers": 1}`, wantErr: "num_numbers"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "negative milestone", state: `{"milestone": -1}`, wantErr: "milestone"},
		{name: "milestone above code_length", state: `{"milestone": 3}`, wantErr: "milestone"},
		{name: "guess of wrong length", state: `{"previous_guesses": [[1, 2, 3]]}`, wantErr: "previous_guesses"},
		{name: "guess out of range", state: `{"previous_guesses": [[1, 9]]}`, wantErr: "previous_guesses"},
		{name: "guess twice", state: `{"previous_guesses": [[1, 2], [1, 2]]}`, wantErr: "previous_guesses"},
		{name: "string value", state: `{"code": "35"}`, wantErr: "code"},
		{name: "fractional value", state: `{"milestone": 0.5}`, wantErr: "milestone"},
		{name: "null value", state: `{"max_turns": null}`, wantErr: "max_turns"},
		{name: "null list", state: `{"previous_guesses": null}`, wantErr: "previous_guesses"},
		{name: "bad duplicates", state: `{"duplicate_numbers": "yes"}`, wantErr: "duplicate_numbers"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"game_code": [3, 5]}`, wantErr: "game_code"},
		{name: "not an object", state: `[3, 5]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, mastermindEasy, "", base)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

// TestMastermindRestoreKeepsLiveState guards against decoding into the live
// slices when a later key fails validation.
func TestMastermindRestoreKeepsLiveState(t *testing.T) {
	env := newTestEnv(t, mastermindHard, "", `{"code": [1, 2, 3, 4], "example": [5, 6, 7, 8]}`)
	env.Step(`\boxed{1 5 6 7}`)
	wantRestore(t, env, `{"code": [4, 3, 2, 1], "example": [8, 7, 6, 5], "previous_guesses": [[2, 2, 2, 2]], "turn_count": -1}`, "turn_count")
}

func TestMastermindNewOverrides(t *testing.T) {
	tests := []struct {
		name, id, opts string
		wantRandom     bool
		want           [3]int // code_length, num_numbers, max_turns when not random
		wantDup        bool
	}{
		{name: "no opts", id: mastermindEasy, want: [3]int{2, 6, 10}},
		{name: "null opts", id: mastermindHard, opts: `null`, want: [3]int{4, 8, 30}},
		{name: "max_turns", id: mastermindEasy, opts: `{"max_turns": 6}`, want: [3]int{2, 6, 6}},
		{name: "size", id: mastermindHard, opts: `{"code_length": 5, "num_numbers": 9}`, want: [3]int{5, 9, 30}},
		{name: "duplicates", id: mastermindEasy, opts: `{"duplicate_numbers": true}`, want: [3]int{2, 6, 10}, wantDup: true},
		{name: "unknown keys ignored", id: mastermindEasy, opts: `{"seed": 3, "foo": "bar", "max_turns": 5}`, want: [3]int{2, 6, 5}},
		{name: "null code_length makes it random", id: mastermindEasy, opts: `{"code_length": null}`, wantRandom: true},
		{name: "null max_turns makes it random", id: mastermindHard, opts: `{"max_turns": null}`, wantRandom: true},
		{name: "fixed size on the random id", id: mastermindRandom, opts: `{"code_length": 3, "num_numbers": 5, "max_turns": 7}`, want: [3]int{3, 5, 7}},
		{name: "one null keeps the random id random", id: mastermindRandom, opts: `{"code_length": 3, "num_numbers": 5}`, wantRandom: true},
		{name: "duplicates on the random id", id: mastermindRandom, opts: `{"duplicate_numbers": true}`, wantRandom: true, wantDup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, tt.id, tt.opts, "")
			var s mastermindState
			if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
				t.Fatal(err)
			}
			if s.Random != tt.wantRandom || s.DuplicateNumbers != tt.wantDup {
				t.Fatalf("random %v, duplicates %v; want %v, %v", s.Random, s.DuplicateNumbers, tt.wantRandom, tt.wantDup)
			}
			if err := s.validate(); err != nil {
				t.Fatalf("state after reset invalid: %v", err)
			}
			got := [3]int{s.CodeLength, s.NumNumbers, s.MaxTurns}
			if tt.wantRandom {
				// Reset drew a whole triple; given values were overwritten, as in GEM.
				if !slices.Contains(mastermindRandomConfigs[:], got) {
					t.Errorf("drawn %v not a candidate", got)
				}
				return
			}
			if got != tt.want || env.MaxTurns() != tt.want[2] {
				t.Errorf("state %s, want %v", env.Snapshot(), tt.want)
			}
		})
	}
}

func TestMastermindNewBadOption(t *testing.T) {
	tests := []badOption{
		{"string max_turns", mastermindEasy, `{"max_turns": "6"}`, "max_turns"},
		{"zero max_turns", mastermindEasy, `{"max_turns": 0}`, "max_turns"},
		{"zero code_length", mastermindHard, `{"code_length": 0}`, "code_length"},
		{"code longer than the digit range", mastermindEasy, `{"code_length": 7}`, "num_numbers"},
		{"code longer than the digit range with duplicates", mastermindEasy, `{"code_length": 7, "duplicate_numbers": true}`, "num_numbers"},
		{"fractional num_numbers", mastermindHard, `{"num_numbers": 7.5}`, "num_numbers"},
		{"null duplicates", mastermindEasy, `{"duplicate_numbers": null}`, "duplicate_numbers"},
		{"string duplicates", mastermindEasy, `{"duplicate_numbers": "true"}`, "duplicate_numbers"},
		{"bad type on the random id", mastermindRandom, `{"code_length": "x"}`, "code_length"},
		{"not an object", mastermindEasy, `[1]`, "object"},
	}
	wantBadOptions(t, tests)
}

func TestMastermindSpecs(t *testing.T) {
	want := map[string]specWant{
		mastermindEasy:   {map[string]any{"code_length": 2, "num_numbers": 6, "max_turns": 10, "duplicate_numbers": false}, 10},
		mastermindHard:   {map[string]any{"code_length": 4, "num_numbers": 8, "max_turns": 30, "duplicate_numbers": false}, 30},
		mastermindRandom: {map[string]any{"code_length": nil, "num_numbers": nil, "max_turns": nil, "duplicate_numbers": false}, 0},
	}
	wantSpecs(t, "Mastermind", "Enter your guess.", want)
	for _, id := range IDs() {
		if strings.HasPrefix(id, "game:Mastermind") && !slices.Contains(mastermindIDs, id) {
			t.Errorf("unexpected id %s", id)
		}
	}
}

// TestMastermindBeforeReset: an env used before Reset must not panic, and a
// fixed-size one is already in a valid state.
func TestMastermindBeforeReset(t *testing.T) {
	for _, id := range mastermindIDs {
		env := mustNew(t, id)
		_ = env.Instructions()
		if id != mastermindRandom {
			if err := env.Restore(env.Snapshot()); err != nil {
				t.Errorf("%s: state before Reset is invalid: %v", id, err)
			}
		}
		for _, act := range []string{`\boxed{1 2}`, `\boxed{1 2 3 4}`, `x`, `\boxed{1 2}`} {
			env.Step(act)
		}
	}
}

// TestMastermindHugeAction steps 1 MB actions of several shapes: each must
// finish well within a generous deadline (the parser is linear).
func TestMastermindHugeAction(t *testing.T) {
	size := hugeLen()
	actions := map[string]string{
		"many entries":      `\boxed{` + strings.Repeat("1 ", size/2) + `1}`,
		"one long run":      `\boxed{` + strings.Repeat("7", size) + `}`,
		"unclosed box":      `\boxed{` + strings.Repeat("1 ", size/2),
		"many boxes":        strings.Repeat(`\boxed{1 2}`, size/11),
		"whitespace run":    `\boxed{1` + strings.Repeat("\u3000", size/3) + `2}`,
		"many short pieces": `\boxed{` + strings.Repeat("0000000001 ", size/11) + `1}`,
		"prose":             strings.Repeat("guess ", size/6),
	}
	for name, action := range actions {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, mastermindHard, "", `{"code": [1, 2, 3, 4]}`)
			if r := stepWithin(t, env, action, time.Minute); r.Observation == "" || !r.Terminated && r.Reward != 0 {
				t.Errorf("result %.80q %v", r.Observation, r.Reward)
			}
		})
	}
}

// FuzzMastermindStep feeds arbitrary action text to Step: it must never
// panic, the observation must be one of GEM's lines, and the reward must be
// -0.1 for a format error and otherwise a milestone increment in [0, 1], with
// a winning episode's rewards summing to 1.
func FuzzMastermindStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{1 2}`, `\boxed{1 2 3 4}`, `\boxed{٣ ٥}`, "\\boxed{1\u30002}", "\\boxed{1\x1c2}", `\\boxed{3 5}`,
		`\boxed{0 3}`, `\boxed{ 1 2}`, `\boxed{1 2 }`, `\boxed{1,2}`, `\boxed{35}`, `\boxed{² 3}`,
		`First \boxed{1 2}, actually \boxed{3 4}`, `\boxed{99999999999999999999 1}`, "\\boxed{1 2}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, mastermindIDs, which, seed)
		var s mastermindState
		if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		// Alternate the fuzzed action with the code itself, so winning and
		// repeated guesses are reached too; step past the turn limit to reach
		// the permissive after-done branches.
		total := 0.0
		for i := range env.MaxTurns() + 2 {
			act := action
			if i%2 == 1 {
				act = mmBoxed(s.Code)
			}
			r := env.Step(act)
			turn := env.Turn()
			switch {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), mmNoGuess(turn), turnLimit):
			case r.Observation == mmWin(mastermindList(s.Code), turn):
				if r.Reward < 0 || r.Reward > 1 || !r.Terminated || r.Truncated || total+r.Reward != 1 {
					t.Fatalf("win result %+v after total %v", r, total)
				}
			case strings.HasPrefix(r.Observation, fmt.Sprintf("At turn %d, you guessed [", turn)):
				if r.Reward < 0 || r.Reward > 1 || r.Terminated || r.Truncated {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", r.Observation)
			}
			if r.Reward > 0 {
				total += r.Reward
			}
			if r.Info["suffix"] != "Enter your guess." || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
		}
		// The scanner agrees with the regexp, and every piece is canonical ASCII decimal.
		pieces, ok := mastermindParseGuess(action)
		if wantPieces, wantOK := mastermindOracleParse(action); ok != wantOK || !slices.Equal(pieces, wantPieces) {
			t.Fatalf("parse(%q) = %q, %v; regexp gives %q, %v", action, pieces, ok, wantPieces, wantOK)
		}
		if ok && (!strings.Contains(action, `\boxed{`) || len(pieces) == 0) {
			t.Fatalf("parsed %q from %q", pieces, action)
		}
		for _, p := range pieces {
			if p == "" || (p[0] == '0' && p != "0") || strings.Trim(p, "0123456789") != "" {
				t.Fatalf("piece %q from %q is not canonical", p, action)
			}
		}
	})
}
