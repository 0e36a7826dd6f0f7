package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/rollfleet/rollfleet/envplay"
	"github.com/rollfleet/rollfleet/envs"
)

type envCmd struct {
	Env     string  `default:"game:GuessTheNumber-v0" help:"Env id."`
	Seed    *uint64 `help:"Seed of the env's RNG (random if unset)."`
	State   string  `help:"JSON object of hidden state to set after reset (given keys override), e.g. '{\"game_number\": 7}'."`
	Options string  `help:"JSON object of env constructor overrides, e.g. '{\"max_turns\": 6}'."`
}

func (c *envCmd) Run() error {
	var opts json.RawMessage
	if c.Options != "" {
		opts = json.RawMessage(c.Options)
	}
	env, err := envs.New(c.Env, opts)
	if err != nil {
		return err
	}
	seed := rand.Uint64()
	if c.Seed != nil {
		seed = *c.Seed
	}
	obs, info := env.Reset(envs.NewRNG(seed))
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
