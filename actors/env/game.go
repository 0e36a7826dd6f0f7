package env

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// game is what an episode plays: a pure env of package envs, driven in
// process, or a remote env over HTTP. The episode actor treats both alike.
type game interface {
	reset(ctx context.Context) (obs string, info envs.Info, err error)
	step(ctx context.Context, action string) (envs.StepResult, error)
	// snapshot is the state after the last step, or nil when the game
	// cannot tell (a remote env).
	snapshot() json.RawMessage
}

// newGame builds the game an episode asks for, with its registry row: a
// remote env this worker was configured with, or a registered env.
func (w *Worker) newGame(req *messages.EpisodeRequest) (game, envs.Spec, error) {
	if cfg, ok := w.remote[req.Env]; ok {
		spec := envs.Spec{ID: cfg.ID, Family: cfg.Kind, Task: cfg.Kind == remoteenv.KindVerify}
		task := remoteenv.Task{Seed: *req.EnvSeed, Prompt: req.Prompt, Label: req.Label, Options: req.EnvOptions}
		return &remoteGame{s: remoteenv.NewSession(cfg, w.transport), task: task}, spec, nil
	}
	spec, err := envs.Lookup(req.Env)
	if err != nil {
		return nil, spec, err
	}
	opts := req.EnvOptions
	if spec.Task {
		if opts, err = envs.WithTask(opts, req.Prompt, req.Label); err != nil {
			return nil, spec, err
		}
	}
	if w.opts.MathStrict && spec.Family == envs.MathFamily {
		if opts, err = envs.WithDefaults(opts, map[string]any{"strict": true}); err != nil {
			return nil, spec, err
		}
	}
	env, err := envs.New(req.Env, opts)
	if err != nil {
		return nil, spec, err
	}
	return &localGame{env: env, seed: *req.EnvSeed}, spec, nil
}

// localGame is a pure env seeded from the episode.
type localGame struct {
	env  envs.Env
	seed uint64
}

func (g *localGame) reset(context.Context) (string, envs.Info, error) {
	obs, info := g.env.Reset(envs.NewRNG(g.seed))
	return obs, info, nil
}

func (g *localGame) step(_ context.Context, action string) (envs.StepResult, error) {
	return g.env.Step(action), nil
}

func (g *localGame) snapshot() json.RawMessage { return g.env.Snapshot() }

// remoteGame is one episode's session with a remote env.
type remoteGame struct {
	s    *remoteenv.Session
	task remoteenv.Task
}

func (g *remoteGame) reset(ctx context.Context) (string, envs.Info, error) {
	obs, info, err := g.s.Reset(ctx, g.task)
	return obs, info, err
}

func (g *remoteGame) step(ctx context.Context, action string) (envs.StepResult, error) {
	st, err := g.s.Step(ctx, action)
	if err != nil {
		return envs.StepResult{}, err
	}
	res := envs.StepResult{
		Observation: st.Observation, Reward: st.Reward, Terminated: st.Terminated, Truncated: st.Truncated,
		Info: st.Info,
	}
	// A remote env has no win flag of its own: a success is the reward 1.0
	// on its final step, as GEM's binary games pay it.
	res.Won = res.Done() && st.Reward == 1
	return res, nil
}

func (g *remoteGame) snapshot() json.RawMessage { return nil }

// remoteConfigs indexes remote env configs by id, refusing bad or repeated
// ones and ids that are registered envs.
func remoteConfigs(cfgs []remoteenv.Config) (map[string]remoteenv.Config, error) {
	m := make(map[string]remoteenv.Config, len(cfgs))
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if _, err := envs.Lookup(c.ID); err == nil {
			return nil, fmt.Errorf("%w: %s is a registered env id", remoteenv.ErrBadConfig, c.ID)
		}
		if _, dup := m[c.ID]; dup {
			return nil, fmt.Errorf("%w: %s configured twice", remoteenv.ErrBadConfig, c.ID)
		}
		m[c.ID] = c
	}
	return m, nil
}
