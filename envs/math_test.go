package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func newMathEnv(t *testing.T, id, question, answer string, extra map[string]any) Env {
	t.Helper()
	opts, err := WithTask(nil, question, answer)
	if err != nil {
		t.Fatal(err)
	}
	if len(extra) > 0 {
		var obj map[string]any
		_ = json.Unmarshal(opts, &obj)
		for k, v := range extra {
			obj[k] = v
		}
		opts, _ = json.Marshal(obj)
	}
	env, err := New(id, opts)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestMathEnv(t *testing.T) {
	type step struct {
		action    string
		obs       string
		reward    float64
		done, won bool
		extracted string
	}
	tests := []struct {
		name     string
		attempts int
		steps    []step
	}{
		{"right at once", 1, []step{{`so \boxed{19}`, "", 1, true, true, "19"}}},
		{"equivalent form", 1, []step{{`\boxed{\frac{38}{2}}`, "", 1, true, true, "19"}}}, // sympy prints 38/2 as 19
		{"wrong", 1, []step{{`\boxed{18}`, "", 0, true, false, "18"}}},
		{"no box", 1, []step{{"The answer is 19.", "", 0, true, false, ""}}},
		{"retry then right", 3, []step{
			{`\boxed{18}`, mathRetry, 0, false, false, "18"},
			{`\boxed{19}`, "", 1, true, true, "19"},
		}},
		{"out of attempts", 2, []step{
			{`\boxed{1}`, mathRetry, 0, false, false, "1"},
			{`\boxed{2}`, "", 0, true, false, "2"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newMathEnv(t, "math", "What is 12 + 7?", "19", map[string]any{"max_attempts": tt.attempts})
			obs, info := env.Reset(NewRNG(1))
			if obs != "What is 12 + 7?"+mathPrompt || len(info) != 0 {
				t.Fatalf("reset %q %v", obs, info)
			}
			for i, s := range tt.steps {
				r := env.Step(s.action)
				if r.Observation != s.obs || r.Reward != s.reward || r.Done() != s.done || r.Won != s.won || r.Truncated {
					t.Fatalf("step %d: got %+v, want %+v", i, r, s)
				}
				if r.Info["extracted_answer"] != s.extracted || r.Info["expected_answer"] != "19" || r.Info["library_reward"] == "" {
					t.Fatalf("step %d: info %v", i, r.Info)
				}
			}
			if env.Turn() != len(tt.steps) || env.MaxTurns() != tt.attempts {
				t.Fatalf("turn %d of %d", env.Turn(), env.MaxTurns())
			}
		})
	}
}

func TestMathNemoPrompt(t *testing.T) {
	env := newMathEnv(t, "math:nemo", "What is 2 + 3?", "5", nil)
	obs, info := env.Reset(NewRNG(1))
	if obs != "What is 2 + 3?" || !strings.HasPrefix(info["system"], "Your task is to solve a math problem.  Make sure") || len(info) != 1 {
		t.Fatalf("reset %q %v", obs, info)
	}
}

func TestMathOptions(t *testing.T) {
	for _, tc := range []struct{ opts, want string }{
		{`{}`, "question: must not be empty"},
		{`{"question": "q", "max_attempts": 0}`, "max_attempts: must be >= 1"},
		{`{"question": 5}`, "question"},
	} {
		_, err := New("math", json.RawMessage(tc.opts))
		if !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrBadOption naming %q", tc.opts, err, tc.want)
		}
	}
	// Overrides the caller set win over the request's task.
	opts, err := WithTask(json.RawMessage(`{"answer": "7"}`), "q", "8")
	if err != nil || string(opts) != `{"answer":"7","question":"q"}` {
		t.Fatalf("WithTask = %s, %v", opts, err)
	}
	if _, err := WithTask(json.RawMessage(`[1]`), "q", "8"); !errors.Is(err, ErrBadOption) {
		t.Fatalf("WithTask on an array: %v", err)
	}
}

func TestMathSnapshotRestore(t *testing.T) {
	a := newMathEnv(t, "math", "What is 12 + 7?", "19", map[string]any{"max_attempts": 2})
	b := newMathEnv(t, "math", "other", "0", nil)
	a.Reset(NewRNG(1))
	a.Step(`\boxed{3}`)
	if err := b.Restore(a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if ra, rb := a.Step(`\boxed{19}`), b.Step(`\boxed{19}`); !sameResult(ra, rb) || ra.Won != rb.Won || !ra.Won {
		t.Fatalf("restored env differs: %+v vs %+v", ra, rb)
	}
	if err := b.Restore(json.RawMessage(`{"attempts": 5}`)); err == nil || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("restore of a bad attempt count: %v", err)
	}
}

func TestMathAnswerString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  ", ""},
		{"007", "7"},
		{"-12", "-12"},
		{`\frac{6}{8}`, "3/4"},
		{`\dfrac{4}{2}`, "2"},
		{`-\frac{1}{3}`, "-1/3"},
		{"6/8", "3/4"},
		{`\frac{1}{0}`, `\frac{1}{0}`},
		{`\text{5 cm}`, "5"},
		{`$\sqrt{2}$`, `\sqrt{2}`},
		{"x = 5", "5"},
	} {
		if got := MathAnswerString(tc.in); got != tc.want {
			t.Errorf("MathAnswerString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// With the judge option, a rejected answer with a box waits for the judge,
// which asks about the box's exact content and may reward it; without a
// box, or with a rewarded answer, no judge is asked.
func TestMathJudge(t *testing.T) {
	for _, tc := range []struct {
		name, action string
		pending      bool
		equal        bool
		judgeErr     string
		reward       float64
	}{
		{"rewarded: no judge", `\boxed{19}`, false, false, "", 1},
		{"no box: no judge", "nineteen", false, false, "", 0},
		{"blank box: no judge", `\boxed{ }`, false, false, "", 0},
		{"judge says equal", `so \boxed{\text{nineteen}}`, true, true, "", 1},
		{"judge says different", `\boxed{20}`, true, false, "", 0},
		{"judge failed", `so \boxed{\text{nineteen}}`, true, false, "generate: unavailable", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newMathEnv(t, "math", "What is 12 + 7?", "19", map[string]any{"judge": true})
			env.Reset(NewRNG(1))
			r := env.Step(tc.action)
			j := env.(Judged)
			q, pending := j.PendingJudge()
			if pending != tc.pending {
				t.Fatalf("pending %v", pending)
			}
			if pending {
				if r.Reward != 0 || q.Expected != "19" || q.Question != "What is 12 + 7?" || !strings.Contains(tc.action, `\boxed{`+q.Generated+`}`) {
					t.Fatalf("step %+v, asks %+v", r, q)
				}
				r = j.Judge(JudgeVerdict{Equal: tc.equal, Evaluations: json.RawMessage(`[{"x":1}]`), Error: tc.judgeErr})
				if r.Info["judge_evaluations"] != `[{"x":1}]` || r.Info["library_reward"] != "0" || r.Info["judge_error"] != tc.judgeErr {
					t.Fatalf("info %v", r.Info)
				}
				// The verdict survives a move to another worker.
				moved := newMathEnv(t, "math", "other", "0", nil)
				if err := moved.Restore(env.Snapshot()); err != nil || moved.Info()["judge_error"] != tc.judgeErr {
					t.Fatalf("restored info %v (%v)", moved.Info(), err)
				}
				if _, again := j.PendingJudge(); again {
					t.Fatal("still pending after the verdict")
				}
			}
			if r.Reward != tc.reward || r.Won != (tc.reward == 1) || !r.Terminated {
				t.Fatalf("result %+v, want reward %v", r, tc.reward)
			}
		})
	}
}

// The strict option grades with mathgrade's Strict options: a decimal that
// only rounds to the answer, or an unlabelled equation's right-hand side, is
// rewarded as NeMo Gym does by default and not under strict.
func TestMathStrict(t *testing.T) {
	for _, tc := range []struct{ answer, action string }{
		{`\frac13`, `\boxed{0.333333}`},
		{"1", `\boxed{2x+z=1}`},
	} {
		for _, strict := range []bool{false, true} {
			env := newMathEnv(t, "math", "q", tc.answer, map[string]any{"strict": strict})
			env.Reset(NewRNG(1))
			want := 1.0
			if strict {
				want = 0
			}
			if r := env.Step(tc.action); r.Reward != want || r.Info["library_reward"] != fmt.Sprint(want) {
				t.Errorf("strict %v: %s for %s: %+v", strict, tc.action, tc.answer, r)
			}
		}
	}
	if _, err := New("math", json.RawMessage(`{"question": "q", "strict": "yes"}`)); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "strict") {
		t.Fatalf("a strict option that is not a bool: %v", err)
	}
}
