package envplay

import (
	"bytes"
	"strings"
	"testing"
)

func TestInteractive(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		ret         float64
		want        []string
	}{
		{"win", "\\boxed{5}\nI say \\boxed{7}\n", 1, []string{
			"You are playing Guess The Number.", "Enter your next guess.\n> ",
			"[turn 1] reward 0\nAt turn 1, you guessed 5, and the target number is higher than 5.",
			"[turn 2] reward 1\nCongratulations! You guessed the correct number 7 in 2 turns.",
			"episode over after 2 turns (terminated=true truncated=false); return 1",
		}},
		{"format error", "seven\n", -0.1, []string{"[turn 1] reward -0.1", "did not provide a valid guess", "return -0.1"}},
		{"input ends", "\\boxed{2}\n", 0, []string{"input ended after 1 turns; return 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, obs, info := newGame(t)
			var out bytes.Buffer
			ret, err := Interactive(strings.NewReader(tc.input), &out, env, obs, info)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.ret {
				t.Errorf("return %v, want %v", ret, tc.ret)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
