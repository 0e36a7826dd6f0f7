package envs

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
)

const (
	gtnFamily     = "GuessTheNumber"
	gtnSuffix     = "Enter your next guess."
	gtnChatSuffix = `Enter your next guess within \boxed{}.`
)

// gtnInstructions is GEM's instruction text; its verbs are, in order, min,
// max, max_turns and the example guess.
const gtnInstructions = `You are playing Guess The Number.
You have to guess the number between %d and %d (inclusive) within %d turns.
As you enter your guess, the game will provide you with hints such as the target number is 'higher' or 'lower'.
You may provide your response in any manner. Only the number that is wrapped inside \boxed{} will be considered as your guess, for example, \boxed{%d}.
As you play, the history of your guesses will be appended below. Use the information to complete the game before you run out of guesses.
Enter your first guess to start the game.
`

// boxedNumber is GEM's action pattern. \p{Nd} stands for Python's Unicode \d;
// Go's \d would only match ASCII digits. Go's tables are Unicode 15, like
// Python 3.12+ (3.11 lacks the Kawi and Nag Mundari digits).
var boxedNumber = regexp.MustCompile(`\\boxed\{(\p{Nd}+)\}`)

// guessTheNumberSpec registers a fixed range and turn limit.
func guessTheNumberSpec(id string, minNumber, maxNumber, maxTurns int) Spec {
	return gtnSpec(id, map[string]any{"min_number": minNumber, "max_number": maxNumber, "max_turns": maxTurns}, maxTurns)
}

// guessTheNumberRandomSpec registers the variant that draws range and turn limit at every reset.
func guessTheNumberRandomSpec(id string) Spec {
	return gtnSpec(id, map[string]any{"min_number": nil, "max_number": nil, "max_turns": nil}, 0)
}

// gtnSpec builds a registry row; params are the registered values overrides apply to.
func gtnSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, gtnFamily, gtnChatSuffix, params, maxTurns, newGuessTheNumber)
}

// gtnState is the whole game state; its JSON form is the snapshot.
type gtnState struct {
	MinNumber       int   `json:"min_number"`
	MaxNumber       int   `json:"max_number"`
	MaxTurns        int   `json:"max_turns"`
	GameNumber      int   `json:"game_number"`
	TurnCount       int   `json:"turn_count"`
	PreviousGuesses []int `json:"previous_guesses"`
	Example         int   `json:"example"`
	// Random makes every Reset draw the range and the turn limit.
	Random bool `json:"random"`
}

// guessTheNumber is GEM's GuessTheNumberEnv.
type guessTheNumber struct {
	s gtnState
}

// newGuessTheNumber applies the overrides to the registered parameters. As in
// GEM, a null bound makes the env draw its range (and turn limit) at every
// reset, and unknown keys are ignored.
func newGuessTheNumber(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p, err := overrideIntParams(registered, opts)
	if err != nil {
		return nil, err
	}
	minNumber, minOK := p["min_number"].(int)
	maxNumber, maxOK := p["max_number"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	random := !minOK || !maxOK
	if !random {
		switch {
		case minNumber > maxNumber:
			return nil, fmt.Errorf("%w: max_number: %d is less than min_number %d", ErrBadOption, maxNumber, minNumber)
		case !turnsOK:
			return nil, fmt.Errorf("%w: max_turns: null needs a drawn range (min_number or max_number null)", ErrBadOption)
		case maxTurns < 1:
			return nil, fmt.Errorf("%w: %w", ErrBadOption, errMaxTurns(maxTurns))
		}
	}
	// Target and example start at min so that a fixed-range state is valid
	// before the first Reset; a drawn range is only meaningful after it.
	return &guessTheNumber{s: gtnState{
		MinNumber:       minNumber,
		MaxNumber:       maxNumber,
		MaxTurns:        maxTurns,
		GameNumber:      minNumber,
		PreviousGuesses: []int{},
		Example:         minNumber,
		Random:          random,
	}}, nil
}

// Reset draws, in GEM's order: the range and turn limit (random variant only),
// the target, then the instruction example.
func (g *guessTheNumber) Reset(rng *rand.Rand) (string, Info) {
	s := &g.s
	if s.Random {
		s.MinNumber = uniformInt(rng, 1, 10)
		s.MaxNumber = uniformInt(rng, s.MinNumber+5, s.MinNumber+50)
		s.MaxTurns = ceilSqrt(s.MaxNumber-s.MinNumber) + 1
	}
	s.GameNumber = uniformInt(rng, s.MinNumber, s.MaxNumber)
	s.PreviousGuesses = []int{}
	s.TurnCount = 0
	s.Example = uniformInt(rng, s.MinNumber, s.MaxNumber)
	return g.Instructions(), gtnInfo()
}

// ceilSqrt is ceil(sqrt(d)) for d >= 0, computed with integers to avoid
// floating-point edge cases at perfect squares.
func ceilSqrt(d int) int {
	k := 0
	for k*k < d {
		k++
	}
	return k
}

// Step follows GEM's order of checks: format error, out of range, repeated,
// then a new guess (a win returns at once, even on the last turn), and
// finally the turn limit, which replaces the feedback line.
func (g *guessTheNumber) Step(action string) StepResult {
	s := &g.s
	s.TurnCount++
	t := s.TurnCount
	guess, ok := parseBoxedGuess(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf("At turn %d, you did not provide a valid guess.", t), t, s.MaxTurns, gtnInfo())
	}
	n, err := strconv.Atoi(guess)
	inRange := err == nil && s.inRange(n) // a value too large for int is above any max
	var obs string
	switch {
	case !inRange:
		obs = fmt.Sprintf("At turn %d, you guessed %s, which is outside the range specified.", t, guess)
	case slices.Contains(s.PreviousGuesses, n):
		obs = fmt.Sprintf("At turn %d, you guessed %d, which has been already guessed before.", t, n)
	default:
		s.PreviousGuesses = append(s.PreviousGuesses, n)
		if n == s.GameNumber {
			return StepResult{
				Observation: fmt.Sprintf("Congratulations! You guessed the correct number %d in %d turns.", s.GameNumber, t),
				Reward:      rewardSuccess,
				Terminated:  true,
				Won:         true,
				Info:        gtnInfo(),
			}
		}
		hint := "higher"
		if n > s.GameNumber {
			hint = "lower"
		}
		obs = fmt.Sprintf("At turn %d, you guessed %d, and the target number is %s than %d.", t, n, hint, n)
	}
	if t >= s.MaxTurns {
		reward := 0.0
		if inRange {
			reward = softReward(n, s.GameNumber, s.MinNumber, s.MaxNumber)
		}
		return turnLimitResult(turnLimitMessage, reward, gtnInfo())
	}
	return StepResult{Observation: obs, Reward: rewardStep, Info: gtnInfo()}
}

// parseBoxedGuess returns the last \boxed{digits} in the action as canonical
// decimal. ok is false for no match, a digit run Python's int() refuses, or
// zero, which GEM's falsy check treats as "no guess".
func parseBoxedGuess(action string) (guess string, ok bool) {
	last := lastSubmatchIndex(boxedNumber, action)
	if last == nil {
		return "", false
	}
	v, ok := pyInt(action[last[2]:last[3]])
	if !ok || v == "0" {
		return "", false
	}
	return v, true
}

// softReward is 1 - |g - target| / (max - min) for an in-range guess. The
// quotient is rounded once from the exact fraction, as Python's int/int true
// division does, so results match GEM even where the operands exceed 2^53.
func softReward(g, target, lo, hi int) float64 {
	dist := new(big.Int).Sub(big.NewInt(int64(g)), big.NewInt(int64(target)))
	if dist.Sign() == 0 {
		// Also covers lo == hi, where GEM would divide zero by zero.
		return 1
	}
	span := new(big.Int).Sub(big.NewInt(int64(hi)), big.NewInt(int64(lo)))
	ratio, _ := new(big.Rat).SetFrac(dist.Abs(dist), span).Float64()
	return 1 - ratio
}

func gtnInfo() Info { return Info{"suffix": gtnSuffix} }

func (s *gtnState) inRange(n int) bool { return s.MinNumber <= n && n <= s.MaxNumber }

// Instructions renders GEM's instruction text for the current range, turn limit and example.
func (g *guessTheNumber) Instructions() string {
	return fmt.Sprintf(gtnInstructions, g.s.MinNumber, g.s.MaxNumber, g.s.MaxTurns, g.s.Example)
}

// Snapshot returns the state as a JSON object with the keys of gtnState.
func (g *guessTheNumber) Snapshot() json.RawMessage {
	b, _ := json.Marshal(g.s) // cannot fail: ints, a bool and an int slice
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state.
func (g *guessTheNumber) Restore(state json.RawMessage) error {
	return restoreState(gtnFamily, &g.s, state, nil)
}

// fromState lays state over the constructor's state. A drawn range must be
// given (max_turns then follows from it as the -random draw pairs them); the
// target must be given; the example defaults to min_number.
func (g *guessTheNumber) fromState(state json.RawMessage) (Info, error) {
	if err := startState(gtnFamily, &g.s, g.s.Random, state); err != nil {
		return nil, err
	}
	return gtnInfo(), nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its range at reset.
func (s *gtnState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if drawn {
		for _, key := range []string{"min_number", "max_number"} {
			if !has(obj, key) {
				return errMissing(key, "this env draws the range at reset")
			}
		}
		if !has(obj, "max_turns") && s.MinNumber <= s.MaxNumber {
			s.MaxTurns = gtnDrawnTurns(s.MinNumber, s.MaxNumber)
		}
	}
	if !has(obj, "game_number") {
		return errMissing("game_number", "it is the number to guess")
	}
	if !has(obj, "example") {
		s.Example = s.MinNumber
	}
	return nil
}

// gtnDrawnTurns is the turn limit the -random variant pairs with a range,
// ceil(sqrt(max - min)) + 1, for any range with min <= max.
func gtnDrawnTurns(minNumber, maxNumber int) int {
	span := new(big.Int).Sub(big.NewInt(int64(maxNumber)), big.NewInt(int64(minNumber)))
	if span.Sign() == 0 {
		return 1
	}
	// ceil(sqrt(d)) = floor(sqrt(d - 1)) + 1 for d >= 1.
	root := new(big.Int).Sqrt(span.Sub(span, big.NewInt(1)))
	return int(root.Int64()) + 2
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s gtnState) overlay(obj map[string]json.RawMessage) (gtnState, error) {
	next := s
	next.PreviousGuesses = slices.Clone(s.PreviousGuesses) // decoding must not write into the live slice
	fields := map[string]any{
		"min_number":       &next.MinNumber,
		"max_number":       &next.MaxNumber,
		"max_turns":        &next.MaxTurns,
		"game_number":      &next.GameNumber,
		"turn_count":       &next.TurnCount,
		"previous_guesses": &next.PreviousGuesses,
		"example":          &next.Example,
		"random":           &next.Random,
	}
	if err := restoreFields(gtnFamily, obj, fields); err != nil {
		return gtnState{}, err
	}
	return next, nil
}

// validate checks the invariants Step and Instructions rely on, naming the
// offending key.
func (s *gtnState) validate() error {
	switch {
	case s.MinNumber > s.MaxNumber:
		return fmt.Errorf("max_number: %d is less than min_number %d", s.MaxNumber, s.MinNumber)
	case s.MaxTurns < 1:
		return errMaxTurns(s.MaxTurns)
	case s.TurnCount < 0:
		return errTurnCount(s.TurnCount)
	case !s.inRange(s.GameNumber):
		return fmt.Errorf("game_number: %d is outside [%d, %d]", s.GameNumber, s.MinNumber, s.MaxNumber)
	case !s.inRange(s.Example):
		return fmt.Errorf("example: %d is outside [%d, %d]", s.Example, s.MinNumber, s.MaxNumber)
	}
	// Only new in-range guesses are ever recorded.
	for i, n := range s.PreviousGuesses {
		if !s.inRange(n) {
			return fmt.Errorf("previous_guesses: %d is outside [%d, %d]", n, s.MinNumber, s.MaxNumber)
		}
		if slices.Contains(s.PreviousGuesses[:i], n) {
			return fmt.Errorf("previous_guesses: %d appears twice", n)
		}
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (g *guessTheNumber) Turn() int { return g.s.TurnCount }

// Info returns GuessTheNumber's info, which never changes.
func (g *guessTheNumber) Info() Info { return gtnInfo() }

// MaxTurns is the current turn limit (0 before the first Reset of a drawn range).
func (g *guessTheNumber) MaxTurns() int { return g.s.MaxTurns }
