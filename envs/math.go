package envs

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
	"github.com/rollfleet/rollfleet/nemogym"
)

// MathFamily is the family of the math envs, whose options include
// "judge" (ask an outside judge about rejected answers) and "strict"
// (grade with mathgrade's Strict options).
const MathFamily = "Math"

// Text of the math envs. mathPrompt closes the question of the GEM-style
// env; mathRetry asks for another attempt after a wrong answer.
const (
	mathPrompt = "\nPlease reason step by step, and put your final answer within \\boxed{}."
	mathRetry  = "Your answer is incorrect. Please try again and put your final answer within \\boxed{}."
)

// mathSpecs registers the math envs. Both are task envs: the request's
// prompt is the question and its label the expected answer. "math" asks the
// question GEM's way, in one user message; "math:nemo" asks it as NeMo Gym's
// math items do, under their system prompt.
func mathSpecs() []Spec {
	spec := func(id string, system bool) Spec {
		return Spec{
			ID: id, Family: MathFamily, Params: map[string]any{"max_attempts": 1}, MaxTurns: 1, Task: true,
			new: func(opts map[string]json.RawMessage) (Env, error) { return newMath(opts, system) },
		}
	}
	return []Spec{spec("math", false), spec("math:nemo", true)}
}

// mathState is the whole state; its JSON form is the snapshot.
type mathState struct {
	Question    string `json:"question"`
	Answer      string `json:"answer"`
	MaxAttempts int    `json:"max_attempts"`
	Attempts    int    `json:"attempts"`
	// System asks the question under NeMo Gym's system prompt.
	System bool `json:"system"`
	// Strict grades with mathgrade's Strict options instead of NeMo Gym's
	// (no rounded decimals, no unlabelled equations' right-hand sides).
	Strict bool `json:"strict,omitempty"`
	// Extracted and Reward are the grading of the last answer.
	Extracted string  `json:"extracted"`
	Reward    float64 `json:"reward"`
	// Judge asks an outside judge about an answer the grader rejects (NeMo
	// Gym's should_use_judge). Library is the grader's reward of the last
	// answer, Boxed its last box's content while a judge is pending,
	// Evaluations the judge's prompts and replies, and JudgeError why the
	// judge could not be asked.
	Judge       bool    `json:"judge,omitempty"`
	Library     float64 `json:"library,omitempty"`
	Boxed       string  `json:"boxed,omitempty"`
	Evaluations string  `json:"evaluations,omitempty"`
	JudgeError  string  `json:"judge_error,omitempty"`
}

// mathEnv is a single-turn math problem, or a multi-turn one when
// max_attempts > 1: a wrong answer is then told so and may be retried. Every
// answer is graded by mathgrade, 1.0 or 0.0 (with the strict option, by its
// Strict options).
type mathEnv struct {
	s mathState
}

func newMath(opts map[string]json.RawMessage, system bool) (Env, error) {
	s := mathState{MaxAttempts: 1, System: system}
	for key, dst := range map[string]any{"question": &s.Question, "answer": &s.Answer, "max_attempts": &s.MaxAttempts, "judge": &s.Judge, "strict": &s.Strict} {
		if raw, ok := opts[key]; ok {
			if err := decodeStrict(raw, dst); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadOption, key, err)
			}
		}
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadOption, err)
	}
	return &mathEnv{s: s}, nil
}

func (s *mathState) validate() error {
	switch {
	case s.Question == "":
		return fmt.Errorf("question: must not be empty (a math episode needs the request's prompt)")
	case s.MaxAttempts < 1:
		return fmt.Errorf("max_attempts: must be >= 1, got %d", s.MaxAttempts)
	case s.Attempts < 0 || s.Attempts > s.MaxAttempts:
		return fmt.Errorf("attempts: %d is outside [0, %d]", s.Attempts, s.MaxAttempts)
	}
	return nil
}

// Reset starts over; a math problem draws nothing at random.
func (m *mathEnv) Reset(*rand.Rand) (string, Info) {
	m.s.Attempts = 0
	return m.Instructions(), m.Info()
}

// Step grades the answer in the action's last \boxed{}. The final step's
// observation is empty: the trajectory ends with the model's answer, and the
// verdict is in the reward and the info (extracted_answer, expected_answer,
// library_reward).
//
// With the judge option, an answer the grader rejects whose response has a
// non-blank last \boxed{…} waits for a judge (PendingJudge); the result
// returned here is the one without a judge.
func (m *mathEnv) Step(action string) StepResult {
	m.s.Attempts++
	g := mathgrade.Options{Strict: m.s.Strict}.Grade(action, m.s.Answer)
	m.s.Extracted, m.s.Reward, m.s.Library = g.Extracted, g.Reward, g.Reward
	m.s.Boxed, m.s.Evaluations, m.s.JudgeError = "", "", ""
	if m.s.Judge && g.Reward == 0 {
		m.s.Boxed, _ = mathgrade.CommittedBox(action)
	}
	return m.result()
}

// result is the step result of the last answer as graded (and judged).
func (m *mathEnv) result() StepResult {
	info := m.Info()
	if m.s.Reward == 0 && m.s.Attempts < m.s.MaxAttempts {
		return StepResult{Observation: mathRetry, Reward: 0, Info: info}
	}
	return StepResult{Reward: m.s.Reward, Terminated: true, Won: m.s.Reward == 1, Info: info}
}

// PendingJudge asks about the last answer when it waits for a judge: the
// question, the expected answer and the content of the response's last box,
// as NeMo Gym's server asks.
func (m *mathEnv) PendingJudge() (JudgeRequest, bool) {
	if m.s.Boxed == "" {
		return JudgeRequest{}, false
	}
	return JudgeRequest{Question: m.s.Question, Expected: m.s.Answer, Generated: m.s.Boxed}, true
}

// Judge settles the last answer: rewarded when the judge said equal both
// ways round. The verdict's evaluations are reported as judge_evaluations,
// and a judge that failed as judge_error (the answer keeps the grader's
// reward).
func (m *mathEnv) Judge(v JudgeVerdict) StepResult {
	if m.s.Boxed == "" {
		return m.result()
	}
	m.s.Boxed, m.s.Evaluations, m.s.JudgeError = "", string(v.Evaluations), v.Error
	if v.Equal && v.Error == "" {
		m.s.Reward = 1
	}
	return m.result()
}

// Instructions is the question as the env asks it.
func (m *mathEnv) Instructions() string {
	if m.s.System {
		return m.s.Question
	}
	return m.s.Question + mathPrompt
}

// Info carries NeMo Gym's system prompt for the "math:nemo" env and, once
// an answer was given, its grading as NeMo Gym reports it.
func (m *mathEnv) Info() Info {
	info := Info{}
	if m.s.System {
		info["system"] = nemogym.SystemPrompt
	}
	if m.s.Attempts > 0 {
		info["extracted_answer"] = MathAnswerString(m.s.Extracted)
		info["expected_answer"] = m.s.Answer
		lib := m.s.Reward
		if m.s.Judge {
			lib = m.s.Library
		}
		info["library_reward"] = fmt.Sprint(lib)
		if m.s.Evaluations != "" {
			info["judge_evaluations"] = m.s.Evaluations
		}
		if m.s.JudgeError != "" {
			info["judge_error"] = m.s.JudgeError
		}
	}
	return info
}

// Snapshot returns the state as a JSON object with the keys of mathState.
func (m *mathEnv) Snapshot() json.RawMessage {
	b, _ := json.Marshal(m.s) // cannot fail: strings, numbers and bools
	return b
}

// Restore overrides the keys present in state; on any error the env keeps
// its previous state.
func (m *mathEnv) Restore(state json.RawMessage) error {
	return restoreState(MathFamily, &m.s, state, nil)
}

// overlay returns a copy of s with the keys of obj decoded over it.
func (s mathState) overlay(obj map[string]json.RawMessage) (mathState, error) {
	next := s
	fields := map[string]any{
		"question": &next.Question, "answer": &next.Answer, "max_attempts": &next.MaxAttempts,
		"attempts": &next.Attempts, "system": &next.System, "extracted": &next.Extracted, "reward": &next.Reward,
		"judge": &next.Judge, "library": &next.Library, "boxed": &next.Boxed, "evaluations": &next.Evaluations,
		"judge_error": &next.JudgeError, "strict": &next.Strict,
	}
	if err := restoreFields(MathFamily, obj, fields); err != nil {
		return mathState{}, err
	}
	return next, nil
}

// fromState lays state over the constructor's state; a math problem draws
// nothing at random, so every key left out keeps the value the request's
// overrides gave it.
func (m *mathEnv) fromState(state json.RawMessage) (Info, error) {
	if err := m.Restore(state); err != nil {
		return nil, err
	}
	return m.Info(), nil
}

// Turn is the number of answers given.
func (m *mathEnv) Turn() int { return m.s.Attempts }

// MaxTurns is the number of answers allowed.
func (m *mathEnv) MaxTurns() int { return m.s.MaxAttempts }

// Whole-answer forms MathAnswerString writes as sympy prints them.
var (
	intAnswer  = regexp.MustCompile(`^-?[0-9]+$`)
	fracAnswer = regexp.MustCompile(`^(-?)(?:\\frac\{(-?[0-9]+)\}\{([0-9]+)\}|([0-9]+)/([0-9]+))$`)
)

// MathAnswerString is the extracted answer as a result reports it, as close
// to NeMo Gym's (the str of math_verify's parsed sympy expression) as the
// grader can give: the answer normalized by mathgrade.Normalize, with a whole
// integer or fraction of integers written as sympy prints the number ("007"
// is "7", "\frac{6}{8}" is "3/4", "\frac{4}{2}" is "2"). Other answers stay
// normalized LaTeX ("\sqrt{2}" where sympy says "sqrt(2)"). Empty when
// nothing was extracted.
func MathAnswerString(extracted string) string {
	if strings.TrimSpace(extracted) == "" {
		return ""
	}
	n := mathgrade.Normalize(extracted)
	if n == "" {
		return strings.TrimSpace(extracted)
	}
	if len(n) > 200 {
		return n
	}
	if intAnswer.MatchString(n) {
		v, _ := new(big.Int).SetString(n, 10)
		return v.String()
	}
	if m := fracAnswer.FindStringSubmatch(n); m != nil {
		num, den := m[2]+m[4], m[3]+m[5]
		a, _ := new(big.Int).SetString(num, 10)
		d, _ := new(big.Int).SetString(den, 10)
		if d.Sign() == 0 {
			return n
		}
		r := new(big.Rat).SetFrac(a, d)
		if m[1] == "-" {
			r.Neg(r)
		}
		return r.RatString()
	}
	return n
}

// MathInput returns the first prompt a math env asks a question with, as
// chat messages: the system prompt of "math:nemo" (empty for "math") and
// the user message. ok is false for any other env id.
func MathInput(id, question string) (system, user string, ok bool) {
	switch id {
	case "math":
		return "", question + mathPrompt, true
	case "math:nemo":
		return nemogym.SystemPrompt, question, true
	}
	return "", "", false
}
