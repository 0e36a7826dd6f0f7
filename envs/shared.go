package envs

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// gameSpec builds a registry row for a family; params are the registered
// values that overrides apply to, and newEnv builds an env from them.
func gameSpec(id, family, chatSuffix string, params map[string]any, maxTurns int,
	newEnv func(registered map[string]any, opts map[string]json.RawMessage) (Env, error)) Spec {
	return Spec{
		ID:         id,
		Family:     family,
		Params:     params,
		MaxTurns:   maxTurns,
		ChatSuffix: chatSuffix,
		new: func(opts map[string]json.RawMessage) (Env, error) {
			return newEnv(params, opts)
		},
	}
}

// overrideIntParams returns a copy of registered with the overrides in opts
// applied: a registered key may be set to an integer, or to null to have it
// drawn at reset. Keys that are not registered are ignored, as in GEM. Keys
// are visited in sorted order, so the same bad key is reported every time.
func overrideIntParams(registered map[string]any, opts map[string]json.RawMessage) (map[string]any, error) {
	p := maps.Clone(registered)
	for _, key := range slices.Sorted(maps.Keys(p)) {
		raw, ok := opts[key]
		if !ok {
			continue
		}
		if isNull(raw) {
			p[key] = nil
			continue
		}
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: want an integer or null, got %s", ErrBadOption, key, raw)
		}
		p[key] = v
	}
	return p, nil
}

// restoreError prefixes a Restore error with the family whose state it is.
func restoreError(family string, err error) error {
	return fmt.Errorf("restore %s state: %w", family, err)
}

// gameState is the pointer type P of a game's state struct S: overlay lays
// a state object's members over a copy of the state, and validate checks
// the result as a whole.
type gameState[S any] interface {
	*S
	overlay(obj map[string]json.RawMessage) (S, error)
	validate() error
}

// restoreState lays the JSON object state over *s, lets adjust (when not
// nil) complete the result from the keys given, and validates it; only then
// does it store the result in *s, so on any error *s is unchanged. overlay's
// errors name the family already; the others are wrapped by restoreError.
func restoreState[S any, P gameState[S]](family string, s *S, state json.RawMessage,
	adjust func(obj map[string]json.RawMessage, next *S) error) error {
	obj, err := decodeObject(state)
	if err != nil {
		return restoreError(family, err)
	}
	next, err := P(s).overlay(obj)
	if err != nil {
		return err
	}
	if adjust != nil {
		if err := adjust(obj, &next); err != nil {
			return restoreError(family, err)
		}
	}
	if err := P(&next).validate(); err != nil {
		return restoreError(family, err)
	}
	*s = next
	return nil
}

// restoreFields decodes the members of a state object, in sorted key order,
// into fields: a pointer is filled by decodeStrict, and a
// func(json.RawMessage) error decodes a member that needs its own rules (its
// error names the key path itself). Errors start "restore <family> state:".
func restoreFields(family string, obj map[string]json.RawMessage, fields map[string]any) error {
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		field, ok := fields[key]
		if !ok {
			return fmt.Errorf("restore %s state: %s: unknown key", family, key)
		}
		if decode, custom := field.(func(json.RawMessage) error); custom {
			if err := decode(obj[key]); err != nil {
				return restoreError(family, err)
			}
			continue
		}
		if err := decodeStrict(obj[key], field); err != nil {
			return fmt.Errorf("restore %s state: %s: %w", family, key, err)
		}
	}
	return nil
}

// lastSubmatchIndex returns the submatch index pairs of the last match of re
// in action, or nil when there is none: GEM's games act on the last boxed
// answer in the text.
func lastSubmatchIndex(re *regexp.Regexp, action string) []int {
	matches := re.FindAllStringSubmatchIndex(action, -1)
	if len(matches) == 0 {
		return nil
	}
	return matches[len(matches)-1]
}

// formatErrorResult is GEM's answer to an action that does not parse: a
// penalty that ends the episode, truncated only when the turn is exactly the
// last one (GEM tests equality here, unlike its turn-limit check).
func formatErrorResult(obs string, turn, maxTurns int, info Info) StepResult {
	return StepResult{
		Observation: obs,
		Reward:      rewardFormatError,
		Terminated:  true,
		Truncated:   turn == maxTurns,
		Info:        info,
	}
}

// turnLimitMessage is the observation most of GEM's games give at the turn limit.
const turnLimitMessage = "You have reached the maximum number of turns."

// turnLimitResult ends an episode at the turn limit with a final reward.
func turnLimitResult(obs string, reward float64, info Info) StepResult {
	return StepResult{Observation: obs, Reward: reward, Terminated: true, Truncated: true, Info: info}
}

// errMaxTurns is the error for a turn limit below 1.
func errMaxTurns(n int) error {
	return fmt.Errorf("max_turns: must be at least 1, got %d", n)
}

// errTurnCount is the error for a negative turn count.
func errTurnCount(n int) error {
	return fmt.Errorf("turn_count: must not be negative, got %d", n)
}

// gridCell is a (row, col) pair of a board game; it is a two-element JSON
// array.
type gridCell [2]int

// UnmarshalJSON refuses arrays that are not pairs, which encoding/json would
// silently truncate or zero-fill.
func (c *gridCell) UnmarshalJSON(data []byte) error {
	var v []int
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("want a [row, col] pair, got %s", data)
	}
	*c = gridCell{v[0], v[1]}
	return nil
}
