// Package envplay lets a program or a person play one environment outside
// the fleet, for checking what a model faces turn by turn.
package envplay

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rollfleet/rollfleet/envs"
)

// MaxLine bounds one input line (an action), like the fleet bounds payloads.
const MaxLine = 1 << 20

// ResetLine is the first line JSONL prints.
type ResetLine struct {
	Observation string    `json:"observation"`
	Info        envs.Info `json:"info"`
}

// StepLine is printed after every action.
type StepLine struct {
	Observation string    `json:"observation"`
	Reward      float64   `json:"reward"`
	Terminated  bool      `json:"terminated"`
	Truncated   bool      `json:"truncated"`
	Info        envs.Info `json:"info"`
}

// ErrorLine reports an input line that is not a JSON string; the game is
// left untouched and the next line is read.
type ErrorLine struct {
	Error string `json:"error"`
}

// ErrBadLines means some input lines were not JSON strings: each had an
// error line in the output, and play went on without it.
var ErrBadLines = errors.New("envplay: input lines that are not actions")

// JSONL plays env over JSON lines: it writes the reset result, then reads one
// JSON string (an action) per line and writes the step result, until the
// input ends. An input line that is not a JSON string gets an error line
// and is skipped; at the end the error wraps ErrBadLines and counts them.
func JSONL(r io.Reader, w io.Writer, env envs.Env, obs string, info envs.Info) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if info == nil {
		info = envs.Info{}
	}
	if err := enc.Encode(ResetLine{Observation: obs, Info: info}); err != nil {
		return fmt.Errorf("envplay: write: %w", err)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	nbad, firstBad := 0, 0
	for line := 1; sc.Scan(); line++ {
		var action string
		if err := json.Unmarshal(sc.Bytes(), &action); err != nil {
			if nbad++; nbad == 1 {
				firstBad = line
			}
			if err := enc.Encode(ErrorLine{Error: fmt.Sprintf("line %d: want one JSON string (the action): %v", line, err)}); err != nil {
				return fmt.Errorf("envplay: write: %w", err)
			}
			continue
		}
		res := env.Step(action)
		if res.Info == nil {
			res.Info = envs.Info{}
		}
		out := StepLine{Observation: res.Observation, Reward: res.Reward, Terminated: res.Terminated, Truncated: res.Truncated, Info: res.Info}
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("envplay: write: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("envplay: read: %w", err)
	}
	if nbad > 0 {
		return fmt.Errorf("%w: %d (first: line %d)", ErrBadLines, nbad, firstBad)
	}
	return nil
}
