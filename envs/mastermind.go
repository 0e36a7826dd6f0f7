package envs

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

const (
	mastermindFamily = "Mastermind"
	// mastermindSuffix is GEM's static call to action, so it doubles as the chat suffix.
	mastermindSuffix = "Enter your guess."
)

// mastermindInstructions is GEM's instruction text; its verbs are, in order,
// code_length, max_turns, num_numbers, "allowed"/"not allowed" and the example
// guess. "I will say mark" is GEM's typo, kept for byte parity.
const mastermindInstructions = `You are playing Mastermind.
You have to guess the secret %d digit code within %d turns.
The code consists of digits from 1 to %d (inclusive). Duplicate numbers are %s.
After you enter your guess, I will say mark your guess with black and white pegs, where a black peg indicates a correct digit in the correct position, while a white peg indicates a correct digit in the wrong position.
After thinking, format your final answer inside \boxed{...}, for example, %s.
As you play, the history of your guesses will be appended below. Use the information to complete the game before you run out of guesses.
Enter your first guess to start the game.
`

// mastermindRandomConfigs are the (code_length, num_numbers, max_turns) triples
// the -random variant draws from at each reset.
var mastermindRandomConfigs = [...][3]int{{2, 4, 10}, {4, 6, 20}, {4, 8, 30}}

// mastermindSpecs lists the registered Mastermind ids. GEM's historical
// game:Mastermind-v0 is not registered at its HEAD and nothing calls it.
func mastermindSpecs() []Spec {
	return []Spec{
		mastermindSpec("game:Mastermind-v0-easy", map[string]any{"code_length": 2, "num_numbers": 6, "max_turns": 10, "duplicate_numbers": false}, 10),
		mastermindSpec("game:Mastermind-v0-hard", map[string]any{"code_length": 4, "num_numbers": 8, "max_turns": 30, "duplicate_numbers": false}, 30),
		mastermindSpec("game:Mastermind-v0-random", map[string]any{"code_length": nil, "num_numbers": nil, "max_turns": nil, "duplicate_numbers": false}, 0),
	}
}

// mastermindSpec builds a registry row; params are the registered values overrides apply to.
func mastermindSpec(id string, params map[string]any, maxTurns int) Spec {
	return gameSpec(id, mastermindFamily, mastermindSuffix, params, maxTurns, newMastermind)
}

// mastermindState is the whole game state; its JSON form is the snapshot.
type mastermindState struct {
	CodeLength       int  `json:"code_length"`
	NumNumbers       int  `json:"num_numbers"`
	MaxTurns         int  `json:"max_turns"`
	DuplicateNumbers bool `json:"duplicate_numbers"`
	// Code is the secret, digits in 1..num_numbers.
	Code      []int `json:"code"`
	TurnCount int   `json:"turn_count"`
	// PreviousGuesses are the valid guesses so far, in the order made (GEM
	// keeps a set; only membership matters).
	PreviousGuesses [][]int `json:"previous_guesses"`
	// Milestone is the most black pegs any guess has scored; only a guess
	// that beats it earns reward.
	Milestone int `json:"milestone"`
	// Example is the guess quoted in the instructions.
	Example []int `json:"example"`
	// Random makes every Reset draw code_length, num_numbers and max_turns.
	Random bool `json:"random"`
}

// mastermind is GEM's MastermindEnv.
type mastermind struct {
	s mastermindState
}

// newMastermind applies the overrides to the registered parameters. As in GEM,
// a null code_length, num_numbers or max_turns makes the env draw all three at
// every reset, and unknown keys are ignored.
func newMastermind(registered map[string]any, opts map[string]json.RawMessage) (Env, error) {
	p := maps.Clone(registered)
	for _, key := range slices.Sorted(maps.Keys(p)) { // sorted: the same bad key is reported every time
		raw, ok := opts[key]
		if !ok {
			continue
		}
		if key == "duplicate_numbers" {
			var v bool
			if err := decodeStrict(raw, &v); err != nil {
				return nil, fmt.Errorf("%w: %s: want a boolean, got %s: %w", ErrBadOption, key, raw, err)
			}
			p[key] = v
			continue
		}
		if isNull(raw) {
			p[key] = nil
			continue
		}
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: want an integer or null, got %s: %w", ErrBadOption, key, raw, err)
		}
		p[key] = v
	}
	codeLength, lengthOK := p["code_length"].(int)
	numNumbers, numbersOK := p["num_numbers"].(int)
	maxTurns, turnsOK := p["max_turns"].(int)
	duplicates, _ := p["duplicate_numbers"].(bool)
	s := mastermindState{
		CodeLength:       codeLength,
		NumNumbers:       numNumbers,
		MaxTurns:         maxTurns,
		DuplicateNumbers: duplicates,
		Code:             []int{},
		PreviousGuesses:  [][]int{},
		Example:          []int{},
		Random:           !lengthOK || !numbersOK || !turnsOK,
	}
	if !s.Random {
		if err := s.validateParams(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		// A placeholder code and example keep a fixed-size state valid before
		// the first Reset; a drawn size is only meaningful after it.
		for d := range codeLength {
			s.Code = append(s.Code, d+1)
		}
		s.Example = slices.Clone(s.Code)
	}
	return &mastermind{s: s}, nil
}

// Reset draws, in GEM's order: the size and turn limit (random variant only),
// the code, then the instruction example. The info is empty, as in GEM.
func (m *mastermind) Reset(rng *rand.Rand) (string, Info) {
	s := &m.s
	if s.Random {
		c := mastermindRandomConfigs[rng.IntN(len(mastermindRandomConfigs))]
		s.CodeLength, s.NumNumbers, s.MaxTurns = c[0], c[1], c[2]
	}
	if s.DuplicateNumbers {
		s.Code = make([]int, s.CodeLength)
		for i := range s.Code {
			s.Code[i] = uniformInt(rng, 1, s.NumNumbers)
		}
	} else {
		s.Code = mastermindSample(rng, s.NumNumbers, s.CodeLength)
	}
	s.PreviousGuesses = [][]int{}
	s.Milestone = 0
	s.TurnCount = 0
	// GEM samples the example without repeats even when the code may repeat.
	s.Example = mastermindSample(rng, s.NumNumbers, s.CodeLength)
	return m.Instructions(), Info{}
}

// mastermindSample draws k distinct digits from 1..n in random order (like
// Python's random.sample), by a partial Fisher-Yates shuffle; k <= n.
func mastermindSample(rng *rand.Rand, n, k int) []int {
	pool := make([]int, n)
	for i := range pool {
		pool[i] = i + 1
	}
	for i := range k {
		j := uniformInt(rng, i, n-1)
		pool[i], pool[j] = pool[j], pool[i]
	}
	return pool[:k:k]
}

// Step follows GEM's order of checks: format error, wrong length, digits out
// of range, repeated guess, then a new guess scored with pegs (a win returns
// at once, even on the last turn), and finally the turn limit, which replaces
// the feedback line but keeps the step's reward.
func (m *mastermind) Step(action string) StepResult {
	s := &m.s
	s.TurnCount++
	t := s.TurnCount
	pieces, ok := mastermindParseGuess(action)
	if !ok {
		return formatErrorResult(fmt.Sprintf("At turn %d, you did not provide a valid guess.", t), t, s.MaxTurns, mastermindInfo())
	}
	shown := "[" + strings.Join(pieces, ", ") + "]"
	var guess []int
	inRange := false
	if len(pieces) == s.CodeLength { // a guess of the wrong length is never converted
		guess, inRange = s.digits(pieces)
	}
	reward := rewardStep
	var obs string
	switch {
	case len(pieces) != s.CodeLength:
		// GEM has no comma before "which" here, unlike the lines below.
		obs = fmt.Sprintf("At turn %d, you guessed %s which has %d entries but the code has length %d.", t, shown, len(pieces), s.CodeLength)
	case !inRange:
		obs = fmt.Sprintf("At turn %d, you guessed %s, which has numbers outside the range 1 to %d.", t, shown, s.NumNumbers)
	case slices.ContainsFunc(s.PreviousGuesses, func(p []int) bool { return slices.Equal(p, guess) }):
		obs = fmt.Sprintf("At turn %d, you guessed %s, which has been already guessed before.", t, shown)
	default:
		s.PreviousGuesses = append(s.PreviousGuesses, guess)
		black, white := mastermindPegs(s.Code, guess)
		if black > s.Milestone {
			// Dense shaping: each new best black count pays its increment, so
			// a win's rewards sum to 1.
			reward = float64(black-s.Milestone) / float64(s.CodeLength)
			s.Milestone = black
		}
		if black == s.CodeLength {
			return StepResult{
				Observation: fmt.Sprintf("Congratulations! You guessed the correct code %s in %d turns.", mastermindList(s.Code), t),
				Reward:      reward,
				Terminated:  true,
				Won:         true,
				Info:        mastermindInfo(),
			}
		}
		obs = fmt.Sprintf("At turn %d, you guessed %s. This guess receives %d black peg(s) and %d white peg(s).", t, shown, black, white)
	}
	if t >= s.MaxTurns {
		return turnLimitResult(turnLimitMessage, reward, mastermindInfo())
	}
	return StepResult{Observation: obs, Reward: reward, Info: mastermindInfo()}
}

// mastermindParseGuess returns the pieces of the last \boxed{...} guess as
// canonical decimals. ok is false for no match or a piece Python's int()
// refuses (longer than maxIntDigits).
func mastermindParseGuess(action string) (pieces []string, ok bool) {
	inner, found := mastermindLastBox(action)
	if !found {
		return nil, false
	}
	for inner != "" {
		// inner alternates digit runs and whitespace runs, starting and
		// ending with digits, so str.split() yields exactly the digit runs.
		end := skipRunes(inner, isPyDigit)
		piece, valid := pyInt(inner[:end])
		if !valid {
			return nil, false
		}
		pieces = append(pieces, piece)
		inner = inner[end:]
		inner = inner[skipRunes(inner, isPySpace):]
	}
	return pieces, true
}

// mastermindBoxOpen starts GEM's action pattern, \\boxed{(\d+(?:\s+\d+)*)}.
const mastermindBoxOpen = `\boxed{`

// mastermindLastBox returns the text inside the last match of GEM's pattern:
// a run of digits, then any number of (whitespace run, digit run), then "}",
// with Python's Unicode digit and whitespace classes. Digits, whitespace and
// "}" are disjoint, so a match from a given start is forced and a greedy scan
// finds it without backtracking. A failed attempt only crosses digits and
// whitespace, which cannot hold the next "\boxed{", so scanning on from
// there is linear in the action, where Go's regexp engine would be far slower
// on long actions.
func mastermindLastBox(action string) (inner string, found bool) {
	for rest := action; ; {
		i := strings.Index(rest, mastermindBoxOpen)
		if i < 0 {
			return inner, found
		}
		rest = rest[i+len(mastermindBoxOpen):]
		n := skipRunes(rest, isPyDigit)
		for n > 0 {
			if strings.HasPrefix(rest[n:], "}") {
				inner, found = rest[:n], true
				rest = rest[n+1:]
				break
			}
			space := skipRunes(rest[n:], isPySpace)
			if space == 0 {
				break
			}
			digits := skipRunes(rest[n+space:], isPyDigit)
			if digits == 0 {
				break
			}
			n += space + digits
		}
		// A failed attempt resumes right after "\boxed{"; what it scanned
		// holds no backslash, so no match is skipped.
	}
}

// digits converts canonical decimal pieces to digits, reporting whether all
// are in 1..num_numbers; a piece too large for int is out of range.
func (s *mastermindState) digits(pieces []string) ([]int, bool) {
	guess := make([]int, len(pieces))
	for i, p := range pieces {
		n, err := strconv.Atoi(p)
		if err != nil || !s.inRange(n) {
			return nil, false
		}
		guess[i] = n
	}
	return guess, true
}

// mastermindPegs scores a guess the way GEM does: blacks are exact position
// matches; then each remaining guess digit, left to right, earns a white and
// uses up the first unused, non-black code position holding that digit.
func mastermindPegs(code, guess []int) (black, white int) {
	used := make([]bool, len(code))
	for i := range code {
		if guess[i] == code[i] {
			black++
			used[i] = true
		}
	}
	for i, g := range guess {
		if g == code[i] {
			continue
		}
		for j, c := range code {
			if !used[j] && c == g {
				white++
				used[j] = true
				break
			}
		}
	}
	return black, white
}

// mastermindList formats digits in Python list format, e.g. [1, 2, 3].
func mastermindList(ds []int) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func mastermindInfo() Info { return Info{"suffix": mastermindSuffix} }

func (s *mastermindState) inRange(n int) bool { return 1 <= n && n <= s.NumNumbers }

// Instructions renders GEM's instruction text for the current size, turn limit and example.
func (m *mastermind) Instructions() string {
	dup := "not allowed"
	if m.s.DuplicateNumbers {
		dup = "allowed"
	}
	example := make([]string, len(m.s.Example))
	for i, d := range m.s.Example {
		example[i] = strconv.Itoa(d)
	}
	return fmt.Sprintf(mastermindInstructions, m.s.CodeLength, m.s.MaxTurns, m.s.NumNumbers, dup,
		`\boxed{`+strings.Join(example, " ")+`}`)
}

// Snapshot returns the state as a JSON object with the keys of mastermindState.
func (m *mastermind) Snapshot() json.RawMessage {
	b, _ := json.Marshal(m.s) // cannot fail: ints, bools and int slices
	return b
}

// Restore overrides the keys present in state, then validates the result as a
// whole; on any error the env keeps its previous state.
func (m *mastermind) Restore(state json.RawMessage) error {
	return restoreState(mastermindFamily, &m.s, state, nil)
}

// fromState lays state over the constructor's state. The code must be
// given; for a drawn size, code_length follows from it, num_numbers must be
// given and max_turns follows from both as the -random draw pairs them. The
// milestone follows from the previous guesses, and the example defaults to
// 1, 2, ..., code_length. Reset's info is empty, so the info returned is too.
func (m *mastermind) fromState(state json.RawMessage) (Info, error) {
	if err := startState(mastermindFamily, &m.s, m.s.Random, state); err != nil {
		return nil, err
	}
	return Info{}, nil
}

// derive fills in the keys a partial state leaves out, or names the first
// one it must give; drawn says whether the env draws its size at reset.
func (s *mastermindState) derive(obj map[string]json.RawMessage, drawn bool) error {
	if !has(obj, "code") {
		return errMissing("code", "it is the secret to guess")
	}
	if drawn {
		if !has(obj, "code_length") {
			s.CodeLength = len(s.Code)
		}
		if !has(obj, "num_numbers") {
			return errMissing("num_numbers", "this env draws the digit range at reset")
		}
		if !has(obj, "max_turns") {
			i := slices.IndexFunc(mastermindRandomConfigs[:], func(c [3]int) bool { return c[0] == s.CodeLength && c[1] == s.NumNumbers })
			if i < 0 {
				return errMissing("max_turns", fmt.Sprintf("this env draws it at reset, and GEM's draw pairs none with code_length %d and num_numbers %d", s.CodeLength, s.NumNumbers))
			}
			s.MaxTurns = mastermindRandomConfigs[i][2]
		}
	}
	if !has(obj, "milestone") {
		// GEM's milestone is the most black pegs any recorded guess scored.
		s.Milestone = 0
		for _, g := range s.PreviousGuesses {
			if len(g) == len(s.Code) { // a guess of another length fails validation
				black, _ := mastermindPegs(s.Code, g)
				s.Milestone = max(s.Milestone, black)
			}
		}
	}
	// Only for a code that can pass validation, so that the size is bounded by the input.
	if !has(obj, "example") && s.CodeLength == len(s.Code) && s.CodeLength <= s.NumNumbers {
		s.Example = make([]int, s.CodeLength)
		for i := range s.Example {
			s.Example[i] = i + 1
		}
	}
	return nil
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s mastermindState) overlay(obj map[string]json.RawMessage) (mastermindState, error) {
	// Decoding must not write into the live slices, and json reuses the
	// backing arrays of nested slices too, so the guesses are copied deeply.
	next := s
	next.Code = slices.Clone(s.Code)
	next.Example = slices.Clone(s.Example)
	next.PreviousGuesses = make([][]int, len(s.PreviousGuesses))
	for i, g := range s.PreviousGuesses {
		next.PreviousGuesses[i] = slices.Clone(g)
	}
	fields := map[string]any{
		"code_length":       &next.CodeLength,
		"num_numbers":       &next.NumNumbers,
		"max_turns":         &next.MaxTurns,
		"duplicate_numbers": &next.DuplicateNumbers,
		"code":              &next.Code,
		"turn_count":        &next.TurnCount,
		"previous_guesses":  &next.PreviousGuesses,
		"milestone":         &next.Milestone,
		"example":           &next.Example,
		"random":            &next.Random,
	}
	if err := restoreFields(mastermindFamily, obj, fields); err != nil {
		return mastermindState{}, err
	}
	return next, nil
}

// validateParams checks the size and turn limit. GEM's random.sample would
// raise for a code (or example) longer than the digit range.
func (s *mastermindState) validateParams() error {
	switch {
	case s.CodeLength < 1:
		return fmt.Errorf("code_length: must be at least 1, got %d", s.CodeLength)
	case s.NumNumbers < s.CodeLength:
		return fmt.Errorf("num_numbers: %d is less than code_length %d", s.NumNumbers, s.CodeLength)
	case s.MaxTurns < 1:
		return errMaxTurns(s.MaxTurns)
	}
	return nil
}

// validate checks the invariants Step and Instructions rely on, naming the
// offending key.
func (s *mastermindState) validate() error {
	if err := s.validateParams(); err != nil {
		return err
	}
	switch {
	case s.TurnCount < 0:
		return errTurnCount(s.TurnCount)
	case s.Milestone < 0 || s.Milestone > s.CodeLength:
		return fmt.Errorf("milestone: %d is outside [0, %d]", s.Milestone, s.CodeLength)
	}
	if err := s.validateDigits(s.Code, !s.DuplicateNumbers); err != nil {
		return fmt.Errorf("code: %w", err)
	}
	if err := s.validateDigits(s.Example, true); err != nil {
		return fmt.Errorf("example: %w", err)
	}
	// Only new valid guesses are ever recorded.
	for i, g := range s.PreviousGuesses {
		if err := s.validateDigits(g, false); err != nil {
			return fmt.Errorf("previous_guesses: %v: %w", g, err)
		}
		if slices.ContainsFunc(s.PreviousGuesses[:i], func(p []int) bool { return slices.Equal(p, g) }) {
			return fmt.Errorf("previous_guesses: %v appears twice", g)
		}
	}
	return nil
}

// validateDigits checks that ds is code_length digits in 1..num_numbers,
// pairwise distinct if distinct is set.
func (s *mastermindState) validateDigits(ds []int, distinct bool) error {
	if len(ds) != s.CodeLength {
		return fmt.Errorf("has %d digits, want code_length %d", len(ds), s.CodeLength)
	}
	for i, d := range ds {
		if !s.inRange(d) {
			return fmt.Errorf("digit %d is outside [1, %d]", d, s.NumNumbers)
		}
		if distinct && slices.Contains(ds[:i], d) {
			return fmt.Errorf("digit %d repeats", d)
		}
	}
	return nil
}

// Turn is the number of steps taken since Reset.
func (m *mastermind) Turn() int { return m.s.TurnCount }

// Info returns the info Mastermind's steps report (its reset info is empty).
func (m *mastermind) Info() Info { return mastermindInfo() }

// MaxTurns is the current turn limit (0 before the first Reset of a drawn size).
func (m *mastermind) MaxTurns() int { return m.s.MaxTurns }
