package envs

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
)

const (
	gtnAlias  = "game:GuessTheNumber-v0"
	gtnEasy   = "game:GuessTheNumber-v0-easy"
	gtnHard   = "game:GuessTheNumber-v0-hard"
	gtnRandom = "game:GuessTheNumber-v0-random"

	turnLimit = "You have reached the maximum number of turns."
)

// higher and lower build GEM's hint lines.
func higher(turn, g int) string {
	return fmt.Sprintf("At turn %d, you guessed %d, and the target number is higher than %d.", turn, g, g)
}

func lower(turn, g int) string {
	return fmt.Sprintf("At turn %d, you guessed %d, and the target number is lower than %d.", turn, g, g)
}

func boxed(n int) string { return fmt.Sprintf(`\boxed{%d}`, n) }

func noGuess(turn int) string {
	return fmt.Sprintf("At turn %d, you did not provide a valid guess.", turn)
}

func outside(turn int, g string) string {
	return fmt.Sprintf("At turn %d, you guessed %s, which is outside the range specified.", turn, g)
}

func repeated(turn, g int) string {
	return fmt.Sprintf("At turn %d, you guessed %d, which has been already guessed before.", turn, g)
}

func congrats(target, turn int) string {
	return fmt.Sprintf("Congratulations! You guessed the correct number %d in %d turns.", target, turn)
}

// fixtureCases gives the hidden state each GEM transcript was produced with.
var fixtureCases = map[string]struct {
	id    string
	state string
}{
	"gtn-01.jsonl": {gtnAlias, `{"game_number": 13, "example": 14}`},
	"gtn-02.jsonl": {gtnAlias, `{"game_number": 13, "example": 5}`},
	"gtn-03.jsonl": {gtnEasy, `{"game_number": 7, "example": 3}`},
	"gtn-04.jsonl": {gtnEasy, `{"game_number": 3, "example": 8}`},
	"gtn-05.jsonl": {gtnEasy, `{"game_number": 6, "example": 1}`},
	"gtn-06.jsonl": {gtnEasy, `{"game_number": 9, "example": 10}`},
	"gtn-07.jsonl": {gtnHard, `{"game_number": 50, "example": 25}`},
	"gtn-08.jsonl": {gtnAlias, `{"game_number": 7, "example": 12}`},
	"gtn-09.jsonl": {gtnRandom, `{"min_number": 4, "max_number": 30, "max_turns": 7, "game_number": 17, "example": 22}`},
	"gtn-10.jsonl": {gtnHard, `{"game_number": 1, "example": 30}`},
	"gtn-11.jsonl": {gtnEasy, `{"game_number": 4, "example": 2}`},
}

// TestGuessTheNumberFixtures replays the byte-exact transcripts produced by GEM's Python code.
func TestGuessTheNumberFixtures(t *testing.T) {
	replayFixtures(t, "gtn", fixtureCases, func(t *testing.T, fc struct{ id, state string }, reset fixtureReset) Env {
		env := mustNew(t, fc.id)
		_, info := env.Reset(NewRNG(7))
		if !maps.Equal(info, reset.Info) {
			t.Errorf("reset info = %v, want %v", info, reset.Info)
		}
		mustRestore(t, env, fc.state)
		return env
	})
}

// TestGuessTheNumberBranches covers every branch of Step for every registered id.
func TestGuessTheNumberBranches(t *testing.T) {
	tests := []struct {
		name, id, opts, state string
		steps                 []step
	}{
		// game:GuessTheNumber-v0: 1..20, 10 turns.
		{name: "alias/win on turn 1", id: gtnAlias, state: `{"game_number": 13}`, steps: []step{
			{boxed(13), congrats(13, 1), 1, true, false},
		}},
		{name: "alias/hints, repeat and out of range continue", id: gtnAlias, state: `{"game_number": 13}`, steps: []step{
			{boxed(10), higher(1, 10), 0, false, false},
			{boxed(15), lower(2, 15), 0, false, false},
			{boxed(10), repeated(3, 10), 0, false, false},
			{boxed(21), outside(4, "21"), 0, false, false},
			{boxed(21), outside(5, "21"), 0, false, false}, // out-of-range guesses are not recorded
			{boxed(20), lower(6, 20), 0, false, false},
			{boxed(1), higher(7, 1), 0, false, false},
			{boxed(13), congrats(13, 8), 1, true, false},
		}},
		{name: "alias/ten turns then soft reward", id: gtnAlias, state: `{"game_number": 13}`, steps: []step{
			{boxed(1), higher(1, 1), 0, false, false},
			{boxed(2), higher(2, 2), 0, false, false},
			{boxed(3), higher(3, 3), 0, false, false},
			{boxed(4), higher(4, 4), 0, false, false},
			{boxed(5), higher(5, 5), 0, false, false},
			{boxed(6), higher(6, 6), 0, false, false},
			{boxed(7), higher(7, 7), 0, false, false},
			{boxed(8), higher(8, 8), 0, false, false},
			{boxed(9), higher(9, 9), 0, false, false},
			{boxed(20), turnLimit, 0.631578947368421, true, true}, // 1 - 7/19
		}},
		{name: "alias/format error mid-game", id: gtnAlias, state: `{"game_number": 13}`, steps: []step{
			{boxed(10), higher(1, 10), 0, false, false},
			{boxed(11), higher(2, 11), 0, false, false},
			{"thirteen", noGuess(3), -0.1, true, false},
		}},
		{name: "alias/format error on the last turn", id: gtnAlias, state: `{"game_number": 13, "turn_count": 9}`, steps: []step{
			{`\boxed{}`, noGuess(10), -0.1, true, true},
		}},
		{name: "alias/repeat on the last turn gets soft reward", id: gtnAlias, state: `{"game_number": 13, "turn_count": 8}`, steps: []step{
			{boxed(12), higher(9, 12), 0, false, false},
			{boxed(12), turnLimit, 0.9473684210526316, true, true}, // 1 - 1/19
		}},
		{name: "alias/out of range on the last turn", id: gtnAlias, state: `{"game_number": 13, "turn_count": 9}`, steps: []step{
			{boxed(25), turnLimit, 0, true, true},
		}},
		{name: "alias/win on the last turn", id: gtnAlias, state: `{"game_number": 13, "turn_count": 9}`, steps: []step{
			{boxed(13), congrats(13, 10), 1, true, false},
		}},
		{name: "alias/far end gives exactly zero", id: gtnAlias, state: `{"game_number": 20, "turn_count": 9}`, steps: []step{
			{boxed(1), turnLimit, 0, true, true},
		}},

		// game:GuessTheNumber-v0-easy: 1..10, 4 turns.
		{name: "easy/soft reward", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(5), higher(1, 5), 0, false, false},
			{boxed(8), lower(2, 8), 0, false, false},
			{boxed(6), higher(3, 6), 0, false, false},
			{boxed(9), turnLimit, 0.7777777777777778, true, true}, // 1 - 2/9
		}},
		{name: "easy/win", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(5), higher(1, 5), 0, false, false},
			{boxed(7), congrats(7, 2), 1, true, false},
		}},
		{name: "easy/format error on turn 2", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(5), higher(1, 5), 0, false, false},
			{`\boxed{0}`, noGuess(2), -0.1, true, false},
		}},
		{name: "easy/format error on the last turn", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(5), higher(1, 5), 0, false, false},
			{boxed(6), higher(2, 6), 0, false, false},
			{boxed(8), lower(3, 8), 0, false, false},
			{"7", noGuess(4), -0.1, true, true},
		}},
		{name: "easy/out of range on the last turn", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(11), outside(1, "11"), 0, false, false},
			{boxed(11), outside(2, "11"), 0, false, false},
			{boxed(11), outside(3, "11"), 0, false, false},
			{boxed(11), turnLimit, 0, true, true},
		}},
		{name: "easy/max_turns override", id: gtnEasy, opts: `{"max_turns": 6}`, state: `{"game_number": 7}`, steps: []step{
			{boxed(1), higher(1, 1), 0, false, false},
			{boxed(2), higher(2, 2), 0, false, false},
			{boxed(3), higher(3, 3), 0, false, false},
			{boxed(4), higher(4, 4), 0, false, false},
			{boxed(10), lower(5, 10), 0, false, false},
			{boxed(8), turnLimit, 0.8888888888888888, true, true}, // 1 - 1/9
		}},
		{name: "easy/range override", id: gtnEasy, opts: `{"min_number": 3, "max_number": 5}`, state: `{"game_number": 4}`, steps: []step{
			{boxed(2), outside(1, "2"), 0, false, false},
			{boxed(6), outside(2, "6"), 0, false, false},
			{boxed(3), higher(3, 3), 0, false, false},
			{boxed(5), turnLimit, 0.5, true, true}, // 1 - 1/2
		}},

		// game:GuessTheNumber-v0-hard: 1..50, 7 turns.
		{name: "hard/soft reward after every kind of turn", id: gtnHard, state: `{"game_number": 26}`, steps: []step{
			{boxed(25), higher(1, 25), 0, false, false},
			{boxed(38), lower(2, 38), 0, false, false},
			{boxed(30), lower(3, 30), 0, false, false},
			{boxed(30), repeated(4, 30), 0, false, false},
			{boxed(51), outside(5, "51"), 0, false, false},
			{boxed(27), lower(6, 27), 0, false, false},
			{boxed(28), turnLimit, 0.9591836734693877, true, true}, // 1 - 2/49
		}},
		{name: "hard/win at the top of the range", id: gtnHard, state: `{"game_number": 50}`, steps: []step{
			{boxed(50), congrats(50, 1), 1, true, false},
		}},
		{name: "hard/format error", id: gtnHard, state: `{"game_number": 50}`, steps: []step{
			{`\boxed{-5}`, noGuess(1), -0.1, true, false},
		}},
		{name: "hard/far end gives exactly zero", id: gtnHard, state: `{"game_number": 50, "turn_count": 6}`, steps: []step{
			{boxed(1), turnLimit, 0, true, true},
		}},

		// game:GuessTheNumber-v0-random after a reset that drew 4..30 and 7 turns.
		{name: "random/both sides out of range, then soft reward at min", id: gtnRandom,
			state: `{"min_number": 4, "max_number": 30, "max_turns": 7, "example": 10, "game_number": 17}`, steps: []step{
				{boxed(3), outside(1, "3"), 0, false, false},
				{boxed(31), outside(2, "31"), 0, false, false},
				{boxed(30), lower(3, 30), 0, false, false},
				{boxed(30), repeated(4, 30), 0, false, false},
				{boxed(10), higher(5, 10), 0, false, false},
				{boxed(20), lower(6, 20), 0, false, false},
				{boxed(4), turnLimit, 0.5, true, true}, // 1 - 13/26
			}},
		{name: "random/win", id: gtnRandom,
			state: `{"min_number": 4, "max_number": 30, "max_turns": 7, "example": 10, "game_number": 4}`, steps: []step{
				{boxed(4), congrats(4, 1), 1, true, false},
			}},
		{name: "random/format error on the last turn", id: gtnRandom,
			state: `{"min_number": 4, "max_number": 30, "max_turns": 7, "example": 10, "game_number": 17, "turn_count": 6}`, steps: []step{
				{`\boxed{٠}`, noGuess(7), -0.1, true, true},
			}},
		{name: "random/out of range on the last turn", id: gtnRandom,
			state: `{"min_number": 4, "max_number": 30, "max_turns": 7, "example": 10, "game_number": 17, "turn_count": 6}`, steps: []step{
				{boxed(3), turnLimit, 0, true, true},
			}},

		// GEM does not guard against stepping after done; neither do we.
		{name: "after done/keeps counting", id: gtnEasy, state: `{"game_number": 7}`, steps: []step{
			{boxed(7), congrats(7, 1), 1, true, false},
			{boxed(7), repeated(2, 7), 0, false, false},
			{boxed(6), higher(3, 6), 0, false, false},
			{boxed(6), turnLimit, 0.8888888888888888, true, true},
			{boxed(8), turnLimit, 0.8888888888888888, true, true}, // still ">= max_turns"
			{"none", noGuess(6), -0.1, true, false},               // "== max_turns" no longer holds
		}},
		{name: "soft reward is correctly rounded beyond 2^53", id: gtnEasy,
			opts:  `{"min_number": 1, "max_number": 9007199254740994, "max_turns": 1}`,
			state: `{"game_number": 1}`, steps: []step{
				{`\boxed{9007199254740993}`, turnLimit, 1.1102230246251565e-16, true, true}, // Python: 1 - 2**53/(2**53+1)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			play(t, newTestEnv(t, tt.id, tt.opts, tt.state), suffixInfo("Enter your next guess."), tt.steps)
		})
	}
}

// TestGuessTheNumberParsing covers the action parser through Step: GEM's
// regex semantics and Python int() conversion. Target 7 in 1..20.
func TestGuessTheNumberParsing(t *testing.T) {
	big4300 := "1" + strings.Repeat("0", 4299)
	tests := []struct {
		name, action, obs string
	}{
		{"arabic-indic", `\boxed{٥}`, higher(1, 5)},
		{"mathematical bold", `\boxed{𝟓}`, higher(1, 5)},
		{"fullwidth", `\boxed{１２}`, lower(1, 12)},
		{"mixed scripts", `\boxed{١𝟐}`, lower(1, 12)},
		{"mixed scripts and zeros", `\boxed{0٠𝟏5}`, lower(1, 15)},
		{"leading zeros", `\boxed{0005}`, higher(1, 5)},
		{"leading zeros to target", `\boxed{0007}`, congrats(7, 1)},
		{"thirty digits", `\boxed{123456789012345678901234567890}`, outside(1, "123456789012345678901234567890")},
		{"thirty digits with zeros", `\boxed{000123456789012345678901234567890}`, outside(1, "123456789012345678901234567890")},
		{"max int64", `\boxed{9223372036854775807}`, outside(1, "9223372036854775807")},
		{"beyond int64", `\boxed{9223372036854775808}`, outside(1, "9223372036854775808")},
		{"4300 digits", `\boxed{` + big4300 + `}`, outside(1, big4300)},
		{"4300 digits mostly zeros", `\boxed{` + strings.Repeat("0", 4299) + `5}`, higher(1, 5)},
		{"4300 multibyte digits", `\boxed{` + strings.Repeat("٠", 4299) + `٥}`, higher(1, 5)},
		{"4301 digits", `\boxed{` + big4300 + `0}`, noGuess(1)},
		{"4301 digits mostly zeros", `\boxed{` + strings.Repeat("0", 4300) + `5}`, noGuess(1)},
		{"zero", `\boxed{0}`, noGuess(1)},
		{"zeros", `\boxed{000}`, noGuess(1)},
		{"arabic-indic zero", `\boxed{٠}`, noGuess(1)},
		{"doubled backslash", `\\boxed{6}`, higher(1, 6)},
		{"inside math", `$\boxed{6}$`, higher(1, 6)},
		{"no backslash", `boxed{5}`, noGuess(1)},
		{"space inside", `\boxed{ 5}`, noGuess(1)},
		{"trailing space inside", `\boxed{5 }`, noGuess(1)},
		{"space before brace", `\boxed {5}`, noGuess(1)},
		{"negative", `\boxed{-5}`, noGuess(1)},
		{"decimal", `\boxed{5.0}`, noGuess(1)},
		{"thousands separator", `\boxed{1,000}`, noGuess(1)},
		{"double braces", `\boxed{{5}}`, noGuess(1)},
		{"empty box", `\boxed{}`, noGuess(1)},
		{"superscript", `\boxed{²}`, noGuess(1)},
		{"upper case", `\BOXED{5}`, noGuess(1)},
		{"plain number", `5`, noGuess(1)},
		{"empty action", ``, noGuess(1)},
		{"invalid utf-8", "\\boxed{5}\xff\\boxed{\xff}", higher(1, 5)},
		{"last match wins", `First \boxed{2}, actually \boxed{4}`, higher(1, 4)},
		{"last match out of range", `\boxed{5} or \boxed{99}`, outside(1, "99")},
		{"non-matching box skipped", `\boxed{3} then \boxed{x}`, higher(1, 3)},
		{"last match zero", `\boxed{4} then \boxed{0}`, noGuess(1)},
		{"last match too long", `\boxed{4} then \boxed{` + big4300 + `0}`, noGuess(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestEnv(t, gtnAlias, "", `{"game_number": 7}`).Step(tt.action)
			if got.Observation != tt.obs {
				t.Errorf("Step(%.60q) = %.80q, want %.80q", tt.action, got.Observation, tt.obs)
			}
		})
	}
}

// TestGuessTheNumberRandomReset checks the drawn parameters over many seeds.
func TestGuessTheNumberRandomReset(t *testing.T) {
	// The turn limit for each range width d, as tabulated from ceil(sqrt(d)) + 1.
	maxTurnsFor := func(d int) int {
		switch {
		case d <= 9:
			return 4
		case d <= 16:
			return 5
		case d <= 25:
			return 6
		case d <= 36:
			return 7
		case d <= 49:
			return 8
		default:
			return 9
		}
	}
	mins := map[int]bool{}
	widths := map[int]bool{}
	for seed := range uint64(5000) {
		env := mustNew(t, gtnRandom)
		obs, _ := env.Reset(NewRNG(seed))
		var s gtnState
		if err := json.Unmarshal(env.Snapshot(), &s); err != nil {
			t.Fatal(err)
		}
		d := s.MaxNumber - s.MinNumber
		switch {
		case s.MinNumber < 1 || s.MinNumber > 10:
			t.Fatalf("seed %d: min %d outside [1, 10]", seed, s.MinNumber)
		case d < 5 || d > 50:
			t.Fatalf("seed %d: max %d outside [min+5, min+50] for min %d", seed, s.MaxNumber, s.MinNumber)
		case s.MaxTurns != maxTurnsFor(d) || env.MaxTurns() != s.MaxTurns:
			t.Fatalf("seed %d: max_turns %d (MaxTurns() %d) for width %d, want %d", seed, s.MaxTurns, env.MaxTurns(), d, maxTurnsFor(d))
		case !s.inRange(s.GameNumber) || !s.inRange(s.Example):
			t.Fatalf("seed %d: target %d or example %d outside [%d, %d]", seed, s.GameNumber, s.Example, s.MinNumber, s.MaxNumber)
		case s.TurnCount != 0 || env.Turn() != 0 || len(s.PreviousGuesses) != 0:
			t.Fatalf("seed %d: not a fresh episode: %+v", seed, s)
		}
		head := fmt.Sprintf("between %d and %d (inclusive) within %d turns.", s.MinNumber, s.MaxNumber, s.MaxTurns)
		if !strings.Contains(obs, head) || !strings.Contains(obs, fmt.Sprintf(`example, \boxed{%d}.`, s.Example)) {
			t.Fatalf("seed %d: instructions do not show the drawn values:\n%s", seed, obs)
		}
		mins[s.MinNumber] = true
		widths[d] = true
	}
	if len(mins) != 10 || len(widths) != 46 {
		t.Errorf("draws not spread: %d distinct mins (want 10), %d distinct widths (want 46)", len(mins), len(widths))
	}
}

func TestCeilSqrt(t *testing.T) {
	for d, want := range map[int]int{0: 0, 1: 1, 2: 2, 4: 2, 5: 3, 9: 3, 10: 4, 16: 4, 17: 5, 25: 5, 26: 6, 49: 7, 50: 8} {
		if got := ceilSqrt(d); got != want {
			t.Errorf("ceilSqrt(%d) = %d, want %d", d, got, want)
		}
	}
}

// TestGuessTheNumberSameSeed checks that a seed fixes the whole episode, for every id.
func TestGuessTheNumberSameSeed(t *testing.T) {
	actions := []string{`\boxed{5}`, `\boxed{10}`, `\boxed{3}`, `\boxed{8}`, `\boxed{7}`, `\boxed{2}`, `\boxed{9}`, `\boxed{1}`, `\boxed{4}`, `\boxed{6}`}
	for _, id := range []string{gtnAlias, gtnEasy, gtnHard, gtnRandom} {
		t.Run(id, func(t *testing.T) {
			distinct := sameSeedEpisodes(t, id, 20, func(uint64, Env) []string { return actions })
			if len(distinct) < 2 {
				t.Error("every seed gave the same episode")
			}
		})
	}
}

// TestGuessTheNumberSnapshotRoundTrip restores a mid-game snapshot into a
// fresh env and checks both behave identically from there on.
func TestGuessTheNumberSnapshotRoundTrip(t *testing.T) {
	for _, id := range []string{gtnAlias, gtnEasy, gtnHard, gtnRandom} {
		t.Run(id, func(t *testing.T) {
			for seed := range uint64(10) {
				a := mustNew(t, id)
				a.Reset(NewRNG(seed))
				a.Step(`\boxed{2}`)
				a.Step(`\boxed{60}`)

				b := mustNew(t, id)
				b.Reset(NewRNG(seed + 1000)) // different hidden state, all overridden below
				restoreCopy(t, a, b)
				for g := 1; g <= 12; g++ {
					stepBoth(t, a, b, boxed(g))
				}
				// Reset keeps the restored configuration: the same seed gives the same episode.
				resetBoth(t, a, b, seed)
			}
		})
	}
}

func TestGuessTheNumberSnapshotKeys(t *testing.T) {
	env := newTestEnv(t, gtnEasy, "", `{"game_number": 7, "example": 3}`)
	want := `{"min_number":1,"max_number":10,"max_turns":4,"game_number":7,"turn_count":0,"previous_guesses":[],"example":3,"random":false}`
	wantSnapshot(t, env, "after reset", want)
	env.Step(`\boxed{5}`)
	env.Step(`\boxed{11}`)
	env.Step(`\boxed{2}`)
	want = `{"min_number":1,"max_number":10,"max_turns":4,"game_number":7,"turn_count":3,"previous_guesses":[5,2],"example":3,"random":false}`
	wantSnapshot(t, env, "after steps", want)
	wantRandomFlag(t, gtnRandom)
}

func TestGuessTheNumberRestore(t *testing.T) {
	const base = `{"game_number": 7, "example": 3}` // on -easy: 1..10, 4 turns
	tests := []struct {
		name    string
		state   string
		wantErr string // substring naming the key; empty for success
		check   func(t *testing.T, env Env)
	}{
		{name: "partial target only", state: `{"game_number": 9}`, check: func(t *testing.T, env Env) {
			play(t, env, suffixInfo("Enter your next guess."), []step{{boxed(9), congrats(9, 1), 1, true, false}})
		}},
		{name: "example re-renders instructions", state: `{"example": 10}`, check: func(t *testing.T, env Env) {
			if !strings.Contains(env.Instructions(), `for example, \boxed{10}.`) {
				t.Errorf("instructions: %s", env.Instructions())
			}
		}},
		{name: "turn count and previous guesses", state: `{"turn_count": 2, "previous_guesses": [4, 8]}`, check: func(t *testing.T, env Env) {
			if env.Turn() != 2 {
				t.Errorf("Turn() = %d", env.Turn())
			}
			play(t, env, suffixInfo("Enter your next guess."), []step{
				{boxed(8), repeated(3, 8), 0, false, false},
				{boxed(4), turnLimit, 0.6666666666666667, true, true}, // 1 - 3/9
			})
		}},
		{name: "range and turn limit", state: `{"min_number": 5, "max_number": 8, "max_turns": 2, "example": 6}`, check: func(t *testing.T, env Env) {
			if env.MaxTurns() != 2 || !strings.Contains(env.Instructions(), "between 5 and 8 (inclusive) within 2 turns.") {
				t.Errorf("MaxTurns() = %d, instructions: %s", env.MaxTurns(), env.Instructions())
			}
			play(t, env, suffixInfo("Enter your next guess."), []step{
				{boxed(4), outside(1, "4"), 0, false, false},
				{boxed(5), turnLimit, 0.33333333333333337, true, true}, // 1 - 2/3
			})
		}},
		{name: "empty object", state: `{}`},
		{name: "null", state: `null`},
		{name: "min above max", state: `{"min_number": 11}`, wantErr: "max_number"},
		{name: "target below range", state: `{"game_number": 0}`, wantErr: "game_number"},
		{name: "target above range", state: `{"game_number": 11}`, wantErr: "game_number"},
		{name: "shrunk range leaves target out", state: `{"max_number": 5}`, wantErr: "game_number"},
		{name: "example out of range", state: `{"example": 11}`, wantErr: "example"},
		{name: "max_turns zero", state: `{"max_turns": 0}`, wantErr: "max_turns"},
		{name: "negative turn count", state: `{"turn_count": -1}`, wantErr: "turn_count"},
		{name: "guess out of range", state: `{"previous_guesses": [3, 12]}`, wantErr: "previous_guesses"},
		{name: "guess twice", state: `{"previous_guesses": [3, 3]}`, wantErr: "previous_guesses"},
		{name: "string value", state: `{"game_number": "7"}`, wantErr: "game_number"},
		{name: "fractional value", state: `{"game_number": 7.5}`, wantErr: "game_number"},
		{name: "null value", state: `{"max_turns": null}`, wantErr: "max_turns"},
		{name: "null list", state: `{"previous_guesses": null}`, wantErr: "previous_guesses"},
		{name: "bad random", state: `{"random": 1}`, wantErr: "random"},
		{name: "unknown key", state: `{"target": 7}`, wantErr: "target"},
		{name: "not an object", state: `[7]`, wantErr: "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t, gtnEasy, "", base)
			if wantRestore(t, env, tt.state, tt.wantErr) && tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

// TestGuessTheNumberRestoreKeepsLiveGuesses guards against decoding into the
// live previous-guesses slice when a later key fails validation.
func TestGuessTheNumberRestoreKeepsLiveGuesses(t *testing.T) {
	env := newTestEnv(t, gtnEasy, "", `{"game_number": 7}`)
	env.Step(`\boxed{2}`)
	env.Step(`\boxed{3}`)
	wantRestore(t, env, `{"previous_guesses": [9], "turn_count": -1}`, "turn_count")
}

// TestGuessTheNumberBeforeReset: an env used before Reset must not panic.
func TestGuessTheNumberBeforeReset(t *testing.T) {
	for _, id := range IDs() {
		env := mustNew(t, id)
		for _, act := range []string{`\boxed{1}`, `\boxed{5}`, `x`, `\boxed{5}`} {
			env.Step(act)
		}
		_ = env.Instructions()
		_ = env.Snapshot()
	}
}

// FuzzGuessTheNumberStep feeds arbitrary action text to Step: it must never
// panic, the observation must be one of GEM's lines, and the reward must be
// -0.1, 0, 1 or, at the turn limit, a soft score in [0, 1].
func FuzzGuessTheNumberStep(f *testing.F) {
	for _, seed := range []string{
		`\boxed{5}`, `\boxed{٥}`, `\boxed{𝟓}`, `\\boxed{6}`, `\boxed{0}`, `\boxed{000}`, `\boxed{ 5}`,
		`\boxed{-5}`, `\boxed{5.0}`, `\boxed{²}`, `First \boxed{2}, actually \boxed{4}`,
		`\boxed{99999999999999999999}`, "\\boxed{5}\xff", "",
	} {
		f.Add(seed, uint64(1), uint8(0))
	}
	ids := []string{gtnAlias, gtnEasy, gtnHard, gtnRandom}
	f.Fuzz(func(t *testing.T, action string, seed uint64, which uint8) {
		env := fuzzEnv(t, ids, which, seed)
		// Step past the turn limit to reach every branch, including the permissive after-done ones.
		for range env.MaxTurns() + 2 {
			r := env.Step(action)
			turn := env.Turn()
			switch {
			case checkFormatOrLimit(t, r, turn, env.MaxTurns(), noGuess(turn), turnLimit):
			case strings.HasPrefix(r.Observation, "Congratulations! "):
				if r.Reward != 1 || !r.Terminated || r.Truncated {
					t.Fatalf("win result %+v", r)
				}
			case strings.HasPrefix(r.Observation, fmt.Sprintf("At turn %d, you guessed ", turn)):
				if r.Reward != 0 || r.Terminated || r.Truncated {
					t.Fatalf("feedback result %+v", r)
				}
			default:
				t.Fatalf("unexpected observation %q", r.Observation)
			}
			if r.Info["suffix"] != "Enter your next guess." || len(r.Info) != 1 {
				t.Fatalf("info %v", r.Info)
			}
		}
		// A guess needs a box, and is always printed as canonical ASCII decimal.
		g, ok := parseBoxedGuess(action)
		if ok && (!strings.Contains(action, `\boxed{`) || g == "0" || g[0] == '0' || strings.Trim(g, "0123456789") != "") {
			t.Fatalf("parsed %q from %q", g, action)
		}
	})
}
