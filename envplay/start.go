package envplay

import (
	"encoding/json"

	"github.com/rollfleet/rollfleet/envs"
)

// Start builds env id with the constructor overrides opts (nil for none) and
// starts an episode. Without a state (nil or empty), the env is reset with
// an RNG seeded by seed. With one, it is put in that state by
// envs.NewFromState, which draws nothing, so seed is not used: the same
// state gives the same episode whatever the seed. A partial state's missing
// keys are derived from the keys given, or named in the error. Errors are
// those of envs.New and envs.NewFromState.
func Start(id string, opts json.RawMessage, seed uint64, state json.RawMessage) (envs.Env, string, envs.Info, error) {
	if len(state) != 0 {
		return envs.NewFromState(id, opts, state)
	}
	env, err := envs.New(id, opts)
	if err != nil {
		return nil, "", nil, err
	}
	obs, info := env.Reset(envs.NewRNG(seed))
	return env, obs, info, nil
}
