package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"github.com/rollfleet/rollfleet/envplay"
	"github.com/rollfleet/rollfleet/envs"
)

// envFlags pick and start one env, for the commands that play one.
type envFlags struct {
	Env     string  `default:"game:GuessTheNumber-v0" help:"Env id."`
	Seed    *uint64 `help:"Seed of the env's RNG (random if unset)."`
	Options string  `help:"JSON object of env constructor overrides, e.g. '{\"max_turns\": 6}'."`
}

// start builds the env and resets it.
func (f *envFlags) start() (envs.Env, string, envs.Info, error) {
	return f.startIn("")
}

// startIn builds the env and starts an episode: a reset from the seed or,
// with a state (a JSON object), that state; the seed is then not used.
func (f *envFlags) startIn(state string) (envs.Env, string, envs.Info, error) {
	var opts json.RawMessage
	if f.Options != "" {
		opts = json.RawMessage(f.Options)
	}
	seed := rand.Uint64()
	if f.Seed != nil {
		seed = *f.Seed
	}
	env, obs, info, err := envplay.Start(f.Env, opts, seed, json.RawMessage(state))
	if err != nil && state != "" && !errors.Is(err, envs.ErrUnknownEnv) && !errors.Is(err, envs.ErrBadOption) {
		return nil, "", nil, fmt.Errorf("--state: %w", err)
	}
	return env, obs, info, err
}

type envCmd struct {
	envFlags
	State string `help:"JSON object of the state to start in instead of a reset, e.g. '{\"game_number\": 7}'. A partial state is completed the same way whatever the seed (--seed is not used): keys left out are derived from the keys given, and a key that decides play and cannot be derived is an error naming it (docs/games.md)."`
}

func (c *envCmd) Run() error {
	return c.run(os.Stdin, os.Stdout)
}

// run plays the env over JSON lines from r to w.
func (c *envCmd) run(r io.Reader, w io.Writer) error {
	env, obs, info, err := c.startIn(c.State)
	if err != nil {
		return err
	}
	return envplay.JSONL(r, w, env, obs, info)
}
