package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrUnknownEnv is wrapped by Lookup and New for an id that is not registered;
// the message lists every known id, sorted.
var ErrUnknownEnv = errors.New("unknown env")

// ErrBadOption is wrapped by New when a constructor override has a bad value;
// the message names the key.
var ErrBadOption = errors.New("bad env option")

// Spec describes one registered environment id.
type Spec struct {
	// ID is the registered id, e.g. "game:GuessTheNumber-v0-easy".
	ID string
	// Family is the game, e.g. "GuessTheNumber".
	Family string
	// Params are the registered parameters; a nil value is drawn at each reset
	// (GEM's -random variants).
	Params map[string]any
	// MaxTurns is the registered turn limit, 0 when it is drawn at reset.
	MaxTurns int
	// ChatSuffix is the text appended to each feedback turn in the ChatML
	// multi-turn prompt.
	ChatSuffix string
	// Task marks an env built per episode from the request: its prompt is the
	// question and its label the expected answer (see WithTask). The env's
	// instructions then are the first prompt.
	Task bool

	// Rewards bounds every step reward the env gives.
	Rewards RewardRange

	// new builds an env from the caller's overrides, GEM's make(id, **overrides).
	new func(opts map[string]json.RawMessage) (Env, error)
}

// registry is the one table of registered ids: each game family lists its
// ids in one place, and a new family adds its list here.
var registry = indexSpecs(slices.Concat(
	[]Spec{
		guessTheNumberSpec("game:GuessTheNumber-v0", 1, 20, 10), // dropped by GEM later; OpenRLHF's example still uses it
		guessTheNumberSpec("game:GuessTheNumber-v0-easy", 1, 10, 4),
		guessTheNumberSpec("game:GuessTheNumber-v0-hard", 1, 50, 7),
		guessTheNumberRandomSpec("game:GuessTheNumber-v0-random"),
	},
	fifteenPuzzleSpecs(),
	towerOfHanoiSpecs(),
	game2048Specs(),
	minesweeperSpecs(),
	sudokuSpecs(),
	mastermindSpecs(),
	sokobanSpecs(),
	mathSpecs(),
)...)

// RewardRange is the closed interval [Min, Max] of an env's step rewards.
type RewardRange struct{ Min, Max float64 }

// Contains reports whether r lies in the range.
func (rr RewardRange) Contains(r float64) bool { return rr.Min <= r && r <= rr.Max }

// Step reward ranges: a game pays GEM's format-error penalty (-0.1) at
// worst and a win or a soft score of at most 1; a task (math) grades 0 or 1.
var (
	gameRewards = RewardRange{Min: -0.1, Max: 1}
	taskRewards = RewardRange{Min: 0, Max: 1}
)

// indexSpecs keys the table by id, refusing duplicates so a bad row fails at
// start-up, and declares each env's reward range.
func indexSpecs(specs ...Spec) map[string]Spec {
	m := make(map[string]Spec, len(specs))
	for _, s := range specs {
		s.Rewards = gameRewards
		if s.Task {
			s.Rewards = taskRewards
		}
		if _, dup := m[s.ID]; dup {
			panic("envs: duplicate env id " + s.ID)
		}
		m[s.ID] = s
	}
	return m
}

// Lookup returns the spec registered under id.
func Lookup(id string) (Spec, error) {
	s, ok := registry[id]
	if !ok {
		return Spec{}, fmt.Errorf("%w %q; known ids: %s", ErrUnknownEnv, id, strings.Join(IDs(), ", "))
	}
	s.Params = maps.Clone(s.Params) // callers must not be able to change the registry
	return s, nil
}

// Rewards returns the reward range of a registered env; false for an id
// that is not registered (a remote env, say), which declares none.
func Rewards(id string) (RewardRange, bool) {
	s, ok := registry[id]
	return s.Rewards, ok
}

// New builds an env; opts is nil or a JSON object of constructor overrides
// (GEM's make(id, **overrides), e.g. {"max_turns": 6}). Unknown keys are
// ignored like GEM; bad values give ErrBadOption naming the key. The env is
// usable after Reset.
func New(id string, opts json.RawMessage) (Env, error) {
	s, err := Lookup(id)
	if err != nil {
		return nil, err
	}
	obj, err := decodeObject(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", id, ErrBadOption, err)
	}
	env, err := s.new(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	return env, nil
}

// Specs returns every registered spec, sorted by ID.
func Specs() []Spec {
	ids := IDs()
	specs := make([]Spec, len(ids))
	for i, id := range ids {
		specs[i], _ = Lookup(id) // id comes from the registry itself
	}
	return specs
}

// IDs returns every registered id, sorted.
func IDs() []string {
	return slices.Sorted(maps.Keys(registry))
}

// WithTask adds a task env's question and expected answer to its constructor
// overrides, as the keys "question" and "answer"; overrides the caller set
// explicitly win.
func WithTask(opts json.RawMessage, question, answer string) (json.RawMessage, error) {
	return WithDefaults(opts, map[string]any{"question": question, "answer": answer})
}

// WithDefaults adds constructor overrides for the keys opts does not set:
// overrides the caller set explicitly win.
func WithDefaults(opts json.RawMessage, defaults map[string]any) (json.RawMessage, error) {
	obj, err := decodeObject(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadOption, err)
	}
	if obj == nil {
		obj = make(map[string]json.RawMessage, len(defaults))
	}
	for k, v := range defaults {
		if _, set := obj[k]; !set {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadOption, k, err)
			}
			obj[k] = raw
		}
	}
	return json.Marshal(obj)
}

// FirstChat is the first prompt of a chat-style episode of the env whose
// reset gave obs and info: its system prompt (info "system", empty when it
// has none) and the user turn, the instructions with the info suffix
// appended as GEM's observation wrappers do when the env's feedback turns
// carry no suffix of their own (a board game's suffix shows the board).
func (s Spec) FirstChat(obs string, info Info) (system, user string) {
	if suffix := info["suffix"]; s.ChatSuffix == "" && suffix != "" {
		if !strings.HasSuffix(obs, "\n") {
			obs += "\n"
		}
		obs += suffix
	}
	return info["system"], obs
}
