package main

import (
	"os"

	"github.com/rollfleet/rollfleet/envplay"
)

type playCmd struct {
	envFlags
}

func (c *playCmd) Run() error {
	env, obs, info, err := c.start()
	if err != nil {
		return err
	}
	_, err = envplay.Interactive(os.Stdin, os.Stdout, env, obs, info)
	return err
}
