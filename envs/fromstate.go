package envs

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrMissingKey is wrapped by NewFromState when a state leaves out a key
// that decides play or rewards and that the keys given do not determine;
// the message names the key.
var ErrMissingKey = errors.New("missing from the state")

// NewFromState builds env id with the constructor overrides opts (as New)
// and puts it in the state given, without drawing anything at random, so the
// same state always starts the same episode. It returns the env and the
// observation and info that Reset would have returned for that state.
//
// The state may be partial. A key it leaves out is derived from the keys it
// gives (a grid's size, a drawn variant's turn limit from its size as GEM
// pairs them, Sudoku's init_num_empty from the board), takes the value an
// episode starts with (turn_count 0, no guesses yet), takes a fixed value
// when it only shapes the instruction text (the examples), or comes from the
// id and opts (fixed parameters); a key that decides play or rewards and
// cannot be derived gives an error wrapping ErrMissingKey that names it.
// docs/games.md lists the rules of each game.
//
// A full snapshot (what Snapshot returns) gives exactly the state that
// Restore gives after any Reset.
func NewFromState(id string, opts, state json.RawMessage) (Env, string, Info, error) {
	env, err := New(id, opts)
	if err != nil {
		return nil, "", nil, err
	}
	fs, ok := env.(fromStater)
	if !ok {
		return nil, "", nil, fmt.Errorf("%s: cannot start from a state", id)
	}
	info, err := fs.fromState(state)
	if err != nil {
		return nil, "", nil, err
	}
	return env, env.Instructions(), info, nil
}

// fromStater is implemented by every registered env. fromState is called
// once on an env fresh from its constructor (never reset), whose state is
// then the base that the given keys are laid over; it returns the info
// Reset would have returned, and on error leaves the env unusable.
type fromStater interface {
	fromState(state json.RawMessage) (Info, error)
}

// startingState is a gameState whose derive fills in the keys a partial
// state leaves out, or names the first one it must give; drawn says whether
// the env draws its variant at reset.
type startingState[S any] interface {
	gameState[S]
	derive(obj map[string]json.RawMessage, drawn bool) error
}

// startState is restoreState with derive completing the state; drawn is
// read from the constructor's state, before the keys given are laid over it.
func startState[S any, P startingState[S]](family string, s *S, drawn bool, state json.RawMessage) error {
	return restoreState[S, P](family, s, state, func(obj map[string]json.RawMessage, next *S) error {
		return P(next).derive(obj, drawn)
	})
}

// has reports whether the state object gives key.
func has(obj map[string]json.RawMessage, key string) bool {
	_, ok := obj[key]
	return ok
}

// errMissing is the error for a key the state must give; why says what the
// key decides.
func errMissing(key, why string) error {
	return fmt.Errorf("%s: %w: %s", key, ErrMissingKey, why)
}
