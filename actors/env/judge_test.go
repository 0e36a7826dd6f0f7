package env

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
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
}

// A failed ask settles the verdict as NeMo Gym's judge_failsafe does: not
// equal, the failure in Error, and the failed ask recorded with a null
// response; only a stopping worker (ctx done) gets an error back.
func TestJudgeFailure(t *testing.T) {
	q := envs.JudgeRequest{Question: "What is 12 + 7?", Expected: "19", Generated: "nineteen"}
	long := strings.Repeat("é", maxJudgeError)
	for _, tc := range []struct {
		name    string
		replies []string // "" fails the ask
		asks    int
	}{
		{"first ask fails", []string{""}, 1},
		{"second ask fails", []string{"[[A=B]]", ""}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			v, err := judgeBothWays(context.Background(), q, "judge", 64, 0, func(context.Context, string, string) (string, error) {
				n++
				if r := tc.replies[n-1]; r != "" {
					return r, nil
				}
				return "", errors.New("generate (invalid): HTTP 500: " + long)
			})
			if err != nil || v.Equal || n != tc.asks || !strings.HasPrefix(v.Error, "generate (invalid): HTTP 500: é") || len(v.Error) > maxJudgeError || !utf8.ValidString(v.Error) {
				t.Fatalf("verdict %+v after %d asks, err %v", v, n, err)
			}
			var evals []struct {
				Response *struct{} `json:"response"`
				Error    string    `json:"error"`
			}
			if err := json.Unmarshal(v.Evaluations, &evals); err != nil || len(evals) != tc.asks {
				t.Fatalf("evaluations %s: %v", v.Evaluations, err)
			}
			failed := evals[tc.asks-1]
			if failed.Response != nil || failed.Error != v.Error || tc.asks == 2 && (evals[0].Response == nil || evals[0].Error != "") {
				t.Fatalf("evaluations %s", v.Evaluations)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := judgeBothWays(ctx, q, "judge", 64, 0, func(ctx context.Context, _, _ string) (string, error) {
		return "", ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a stopping worker's ask: %v", err)
	}
}

// A worker's MathStrict grades math episodes strictly unless their env
// options say otherwise.
func TestMathStrictDefault(t *testing.T) {
	seed := uint64(1)
	for _, tc := range []struct {
		workerStrict bool
		envOptions   string
		reward       float64
	}{
		{false, "", 1},
		{true, "", 0},
		{true, `{"strict":false}`, 1},
		{false, `{"strict":true}`, 0},
	} {
		w := &Worker{opts: Options{MathStrict: tc.workerStrict}}
		req := &messages.EpisodeRequest{Env: "math", EnvSeed: &seed, Prompt: "What is 1/3?", Label: `\frac13`}
		if tc.envOptions != "" {
			req.EnvOptions = json.RawMessage(tc.envOptions)
		}
		g, _, err := w.newGame(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := g.reset(context.Background()); err != nil {
			t.Fatal(err)
		}
		res, err := g.step(context.Background(), `so \boxed{0.333333}`)
		if err != nil || res.Reward != tc.reward {
			t.Errorf("worker strict %v, options %q: reward %v (%v), want %v", tc.workerStrict, tc.envOptions, res.Reward, err, tc.reward)
		}
	}
}
