// Package envs holds the text-game environments that rollouts are played in.
//
// Each environment is a pure state machine in the style of GEM (Reset/Step): it
// has no I/O and no clock, and every random value comes from the *rand.Rand
// handed to Reset, so an episode is reproducible from its seed and can be
// snapshotted and resumed anywhere. Observable behaviour (instruction text,
// feedback lines, rewards, termination) matches GEM's Python games byte for
// byte.
package envs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Reward constants shared by GEM's language games.
const (
	rewardSuccess     = 1.0
	rewardStep        = 0.0
	rewardFormatError = -0.1
)

// Info is the info map GEM returns from reset and step (e.g. {"suffix": "Enter your next guess."}).
type Info map[string]string

// StepResult is what Step returns.
type StepResult struct {
	// Observation is the one feedback line for this step; it carries no history.
	Observation string
	// Reward is this step's reward.
	Reward float64
	// Terminated reports that the episode has ended.
	Terminated bool
	// Truncated reports that the episode ended because of the turn limit; it implies Terminated.
	Truncated bool
	// Info is computed after the step has been applied.
	Info Info
	// Won reports that this step reached the game's goal. Several games pay their win as a
	// progress increment rather than 1.0, so the reward cannot tell.
	Won bool
}

// Done reports whether the episode is over.
func (r StepResult) Done() bool { return r.Terminated || r.Truncated }

// Env is one episode's environment, a pure state machine.
//
// An Env is not safe for concurrent use; each episode owns its own.
type Env interface {
	// Reset starts a new episode, drawing every random value from rng (which
	// must not be nil), and returns the instruction text and info.
	Reset(rng *rand.Rand) (observation string, info Info)
	// Step applies the model's raw action text. Like GEM, it keeps going after
	// the episode is done instead of refusing the call.
	Step(action string) StepResult
	// Instructions renders the instruction text for the current state (what
	// Reset returned, re-rendered after Restore).
	Instructions() string
	// Snapshot returns the whole state, hidden parts included, as a JSON object.
	Snapshot() json.RawMessage
	// Restore overrides the state with the keys present in a JSON object;
	// absent keys keep their value. Invalid values or unknown keys give an
	// error naming the key and leave the state unchanged.
	Restore(state json.RawMessage) error
	// Info is the info of the current state as Step reports it, such as
	// the board a suffix shows; after Restore it reflects the new state.
	Info() Info
	// Turn is the number of steps taken.
	Turn() int
	// MaxTurns is the current turn limit.
	MaxTurns() int
}

// pcgStream is the fixed second PCG seed word; only the episode seed varies.
const pcgStream = 0x9e3779b97f4a7c15

// NewRNG returns a deterministic per-episode RNG (math/rand/v2 PCG) for a seed:
// the same seed always yields the same stream.
func NewRNG(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, pcgStream))
}

// uniformInt draws a uniform integer in [lo, hi] (lo <= hi). The span is
// computed in uint64 so that ranges wider than the int type cannot overflow.
func uniformInt(rng *rand.Rand, lo, hi int) int {
	span := uint64(hi) - uint64(lo)
	if span == ^uint64(0) {
		return int(rng.Uint64())
	}
	return lo + int(rng.Uint64N(span+1))
}

// decodeObject splits a JSON object into its members. Empty input and JSON
// null count as an empty object, so callers can pass nil for "nothing".
func decodeObject(data json.RawMessage) (map[string]json.RawMessage, error) {
	if isNull(data) {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	return obj, nil
}

// isNull reports whether a JSON value is absent or null.
func isNull(data json.RawMessage) bool {
	data = bytes.TrimSpace(data)
	return len(data) == 0 || bytes.Equal(data, []byte("null"))
}

// decodeStrict decodes a JSON value into v, refusing null: json.Unmarshal
// would silently keep the old value, hiding a mistake in the caller's state.
func decodeStrict(data json.RawMessage, v any) error {
	if isNull(data) {
		return errors.New("must not be null")
	}
	return json.Unmarshal(data, v)
}
