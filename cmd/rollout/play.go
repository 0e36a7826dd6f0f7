package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"

	"github.com/rollfleet/rollfleet/envplay"
	"github.com/rollfleet/rollfleet/envs"
)

type playCmd struct {
	Env     string  `default:"game:GuessTheNumber-v0" help:"Env id."`
	Seed    *uint64 `help:"Seed of the env's RNG (random if unset)."`
	Options string  `help:"JSON object of env constructor overrides."`
}

func (c *playCmd) Run() error {
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
	_, err = envplay.Interactive(os.Stdin, os.Stdout, env, obs, info)
	return err
}
