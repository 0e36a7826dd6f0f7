package main

import (
	"encoding/json"
	"fmt"
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
	var opts json.RawMessage
	if f.Options != "" {
		opts = json.RawMessage(f.Options)
	}
	env, err := envs.New(f.Env, opts)
	if err != nil {
		return nil, "", nil, err
	}
	seed := rand.Uint64()
	if f.Seed != nil {
		seed = *f.Seed
	}
	obs, info := env.Reset(envs.NewRNG(seed))
	return env, obs, info, nil
}

type envCmd struct {
	envFlags
	State string `help:"JSON object of hidden state to set after reset (given keys override), e.g. '{\"game_number\": 7}'."`
}

func (c *envCmd) Run() error {
	env, obs, info, err := c.start()
	if err != nil {
		return err
	}
	if c.State != "" {
		if err := env.Restore(json.RawMessage(c.State)); err != nil {
			return fmt.Errorf("--state: %w", err)
		}
		obs = env.Instructions()
		if _, shown := info["suffix"]; shown {
			info = env.Info() // the restored board, not the one reset drew
		}
	}
	return envplay.JSONL(os.Stdin, os.Stdout, env, obs, info)
}
