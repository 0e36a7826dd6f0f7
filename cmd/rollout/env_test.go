package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/envs"
)

// runEnv parses a rollout env command line as main does and plays input.
func runEnv(t *testing.T, input string, args ...string) (string, error) {
	t.Helper()
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"env"}, args...)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = c.Env.run(strings.NewReader(input), &out)
	return out.String(), err
}

// TestEnvStateIgnoresSeed plays the same partial states with many seeds, and
// with none: the output must not change.
func TestEnvStateIgnoresSeed(t *testing.T) {
	for _, tt := range []struct {
		id, state, input, want string
	}{
		{"game:GuessTheNumber-v0-random", `{"min_number": 1, "max_number": 20, "game_number": 15}`,
			`"\\boxed{10}"` + "\n", "within 6 turns"},
		{"game:GuessTheNumber-v0-easy", `{"game_number": 7}`,
			`"\\boxed{5}"` + "\n" + `"\\boxed{7}"` + "\n", "Congratulations! You guessed the correct number 7 in 2 turns."},
		{"game:Sudoku-v0-easy", `{"board": [[0,2,3,0],[3,0,1,0],[0,0,0,0],[4,3,0,1]]}`,
			`"\\boxed{1 1 1}"` + "\n", `"reward":0.1111111111111111`},
	} {
		t.Run(tt.id, func(t *testing.T) {
			want, err := runEnv(t, tt.input, "--env", tt.id, "--state", tt.state)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(want, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, want)
			}
			for seed := range 20 {
				got, err := runEnv(t, tt.input, "--env", tt.id, "--seed", fmt.Sprint(seed), "--state", tt.state)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("--seed %d:\n%s\nwithout a seed:\n%s", seed, got, want)
				}
			}
		})
	}
}

func TestEnvStateErrors(t *testing.T) {
	_, err := runEnv(t, "", "--env", "game:GuessTheNumber-v0-random", "--seed", "3", "--state", `{"game_number": 7}`)
	if !errors.Is(err, envs.ErrMissingKey) || !strings.HasPrefix(err.Error(), "--state: ") || !strings.Contains(err.Error(), "min_number") {
		t.Errorf("missing range: %v", err)
	}
	_, err = runEnv(t, "", "--env", "game:Nope-v0", "--state", `{}`)
	if !errors.Is(err, envs.ErrUnknownEnv) || strings.HasPrefix(err.Error(), "--state") {
		t.Errorf("unknown env: %v", err)
	}
}

// TestEnvWithoutState checks that the seed still picks the episode when no
// state is given.
func TestEnvWithoutState(t *testing.T) {
	a, err := runEnv(t, "", "--env", "game:GuessTheNumber-v0-random", "--seed", "1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := runEnv(t, "", "--env", "game:GuessTheNumber-v0-random", "--seed", "1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := runEnv(t, "", "--env", "game:GuessTheNumber-v0-random", "--seed", "2")
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a == c {
		t.Errorf("seed 1 twice and seed 2 gave:\n%s\n%s\n%s", a, b, c)
	}
}

// TestEnvBadLineFails: rollout env plays on past an input line that is not
// an action, answering it with an error line, and exits non-zero at the
// end, naming the bad lines.
func TestEnvBadLineFails(t *testing.T) {
	cmd := exec.Command(rolloutBin(t), "env", "--env", "game:GuessTheNumber-v0-easy", "--state", `{"game_number": 7}`)
	cmd.Stdin = strings.NewReader("guess 7\n" + `"\\boxed{7}"` + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit: %v, want a non-zero status\n%s", err, stderr.String())
	}
	if got := strings.Count(stdout.String(), "\n"); got != 3 || !strings.Contains(stdout.String(), `"error":"line 1: `) || !strings.Contains(stdout.String(), "Congratulations") {
		t.Errorf("want the reset, an error line for line 1 and the winning step, got:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "1 (first: line 1)") {
		t.Errorf("stderr does not name the bad line:\n%s", stderr.String())
	}
}
