package fleet

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
)

// TestRunPromptOverflow runs jobs whose first prompts (about 570 tokens of
// GuessTheNumber instructions) do or do not fit the budget, in each
// observation style: the summary counts cut prompts beside the trajectories,
// and overflow failures under their own kind.
func TestRunPromptOverflow(t *testing.T) {
	const episodes = 4
	for _, tc := range []struct {
		name, style, overflow string
		maxLength             int
		trajs, cut, failures  int
		summary               string // what the summary line says, if anything
	}{
		{"fits", messages.ObsChat, messages.PromptOverflowTruncateLeft, 4096, episodes, 0, 0, ""},
		{"chat fails", messages.ObsChat, "", 300, 0, 0, episodes, "failure kinds: prompt_too_long=4"},
		{"concat fails", messages.ObsConcat, messages.PromptOverflowFail, 300, 0, 0, episodes, "failure kinds: prompt_too_long=4"},
		{"chat truncate-left", messages.ObsChat, messages.PromptOverflowTruncateLeft, 300, episodes, episodes, 0, "prompt_truncated=4"},
		{"qwen3_game truncate-left", messages.ObsQwen3Game, messages.PromptOverflowTruncateLeft, 300, episodes, episodes, 0, "prompt_truncated=4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(5)
			var out bytes.Buffer
			sum, err := Run(context.Background(), Options{
				Env: "game:GuessTheNumber-v0", Episodes: episodes, Seed: &seed, ObsStyle: tc.style,
				MaxLength: tc.maxLength, MaxTokens: 64, PromptOverflow: tc.overflow,
				DataDir: filepath.Join(t.TempDir(), "nats"), Out: &out,
			})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Trajectories != tc.trajs || sum.PromptTruncated != tc.cut || sum.Failures != tc.failures ||
				sum.FailureKinds[messages.FailurePromptTooLong] != tc.failures {
				t.Fatalf("%d trajectories, %d with a cut prompt, %d failures (%v); want %d, %d, %d prompt_too_long",
					sum.Trajectories, sum.PromptTruncated, sum.Failures, sum.FailureKinds, tc.trajs, tc.cut, tc.failures)
			}
			s := sum.String()
			if tc.summary != "" && !strings.Contains(s, tc.summary) || tc.cut == 0 && strings.Contains(s, "prompt_truncated") {
				t.Fatalf("summary does not say %q (or names cut prompts when there are none):\n%s", tc.summary, s)
			}
			if n := strings.Count(out.String(), `"prompt_truncated_tokens":`); tc.cut > 0 && n < tc.cut || tc.cut == 0 && n != 0 {
				t.Fatalf("%d trajectory lines record cut prompt tokens, want %d:\n%s", n, tc.cut, out.String())
			}
		})
	}
}

// TestRunUnknownPromptOverflow: an unknown setting fails the run before
// anything is submitted.
func TestRunUnknownPromptOverflow(t *testing.T) {
	seed := uint64(5)
	sum, err := Run(context.Background(), Options{
		Env: "game:GuessTheNumber-v0", Episodes: 1, Seed: &seed, PromptOverflow: "truncate-right",
		DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if !errors.Is(err, messages.ErrInvalid) || !strings.Contains(err.Error(), "prompt_overflow") || sum.Started {
		t.Fatalf("want an invalid prompt_overflow before the start, got %v (started %v)", err, sum.Started)
	}
}
