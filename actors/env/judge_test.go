package env

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs"
)

// The judge is asked expected-first, then (only after an equal verdict) the
// other way round; the answers are equal only when both verdicts say so.
func TestJudgeBothWays(t *testing.T) {
	q := envs.JudgeRequest{Question: "What is 12 + 7?", Expected: "19", Generated: "nineteen"}
	for _, tc := range []struct {
		name    string
		replies []string
		equal   bool
		asks    int
	}{
		{"equal both ways", []string{"My final verdict is [[A=B]]", "[[A=B]]"}, true, 2},
		{"unequal at once", []string{"My final verdict is different [[A!=B]]"}, false, 1},
		{"second order disagrees", []string{"[[A=B]]", "[[A!=B]]"}, false, 2},
		{"first label decides", []string{"[[A!=B]] though maybe [[A=B]]"}, false, 1},
		{"no label is unequal", []string{"They look alike.", "[[A=B]]"}, false, 1},
		{"equal label first", []string{"[[A=B]], not [[A!=B]]", "[[A=B]]"}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var users []string
			ask := func(_ context.Context, system, user string) (string, error) {
				if system != envs.JudgeSystemMessage {
					t.Fatalf("system message %q", system)
				}
				users = append(users, user)
				return tc.replies[len(users)-1], nil
			}
			v, err := judgeBothWays(context.Background(), q, "judge", 64, 0, ask)
			if err != nil || v.Equal != tc.equal || len(users) != tc.asks {
				t.Fatalf("equal %v after %d asks (%v), want %v after %d", v.Equal, len(users), err, tc.equal, tc.asks)
			}
			if want := envs.JudgePrompt(q.Question, "19", "nineteen"); users[0] != want {
				t.Fatalf("first ask %q, want %q", users[0], want)
			}
			if len(users) == 2 && users[1] != envs.JudgePrompt(q.Question, "nineteen", "19") {
				t.Fatalf("second ask %q: the answers are not swapped", users[1])
			}
			var evals []struct {
				Params struct {
					Input []struct{ Role, Content string } `json:"input"`
				} `json:"responses_create_params"`
				Response struct {
					Output []struct {
						Content []struct{ Text string } `json:"content"`
					} `json:"output"`
				} `json:"response"`
			}
			if err := json.Unmarshal(v.Evaluations, &evals); err != nil || len(evals) != tc.asks {
				t.Fatalf("evaluations %s: %v", v.Evaluations, err)
			}
			for i, ev := range evals {
				if ev.Params.Input[1].Content != users[i] || ev.Response.Output[0].Content[0].Text != tc.replies[i] {
					t.Fatalf("evaluation %d: %+v", i, ev)
				}
			}
		})
	}
	_, err := judgeBothWays(context.Background(), q, "judge", 64, 0, func(context.Context, string, string) (string, error) {
		return "", errors.New("down")
	})
	if err == nil || !strings.Contains(err.Error(), "down") {
		t.Fatalf("a failed ask: %v", err)
	}
}
