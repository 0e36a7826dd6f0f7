package main

import (
	"fmt"
	"os"

	"github.com/rollfleet/rollfleet/nemogym"
)

type prepareCmd struct {
	In              string   `required:"" type:"existingfile" help:"JSONL question/answer rows: question (or prompt) and expected_answer (or answer, label)."`
	Out             string   `required:"" help:"NeMo Gym data items JSONL to write ('-' for stdout)."`
	Temperature     *float64 `help:"Also set responses_create_params.temperature."`
	MaxOutputTokens *int32   `help:"Also set responses_create_params.max_output_tokens."`
	Prompt          string   `default:"plain" enum:"plain,nemo,system" help:"Input messages: plain (the question as the one user message), nemo (NeMo Gym's math instruction line, two newlines, the question) or system (NeMo Gym's math system prompt and the question, as OpenRLHF's prepare_data)."`
	AgentName       string   `default:"math_with_judge_simple_agent" help:"agent_ref.name of every item (library_judge_math_simple_agent before NeMo Gym's 2025-11 rename)."`
}

func (c *prepareCmd) Run() error {
	in, err := os.Open(c.In)
	if err != nil {
		return err
	}
	defer in.Close()
	out := os.Stdout
	if c.Out != "-" {
		if out, err = os.Create(c.Out); err != nil {
			return err
		}
		defer out.Close()
	}
	n, err := nemogym.PrepareJSONL(in, out, nemogym.PrepareOptions{
		Temperature: c.Temperature, MaxOutputTokens: c.MaxOutputTokens, Prompt: c.Prompt, AgentName: c.AgentName,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", c.In, err)
	}
	if c.Out != "-" {
		if err := out.Close(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %d items to %s\n", n, c.Out)
	}
	return nil
}
