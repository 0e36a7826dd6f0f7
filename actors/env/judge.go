package env

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
)

// JudgeOptions configure the LLM judge of the envs that ask for one (math
// with the judge option): NeMo Gym's math_with_judge judge, asked through
// LLM workers.
type JudgeOptions struct {
	// Subjects are the LLM workers' subjects the judge is asked on (the
	// worker's own by default: the model that generates also judges).
	Subjects messages.Subjects
	// Model is the judge's name, as the evaluations record it.
	Model string
	// MaxTokens caps each judge reply (default 512); Temperature is its
	// sampling temperature (0: greedy).
	MaxTokens   int32
	Temperature float64
}

// JudgeSubjects are the subjects of the LLM worker that serves a judge
// given by URL, beside the fleet's on subj: the prefix with "judge" appended
// ("rfjudge" for "rf").
func JudgeSubjects(subj messages.Subjects) messages.Subjects {
	return messages.NewSubjects(cmp.Or(subj.Prefix, messages.DefaultPrefix) + "judge")
}

// JudgeIsURL reports whether a judge a command line names is the URL of a
// vLLM server (http:// or https://) rather than a model name.
func JudgeIsURL(spec string) bool {
	return strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://")
}

// NewJudge sets up the judge a command line names (--math-judge
// MODEL_OR_URL). A model name is asked through the fleet's LLM workers
// (which must serve it; the name is recorded in the evaluations), and the
// worker returned is nil. The URL of a vLLM server gets an LLM worker of its
// own, on JudgeSubjects(subj) through nc, which the caller runs for as long
// as the env worker asks.
func NewJudge(nc *nats.Conn, spec string, subj messages.Subjects, log *slog.Logger) (*JudgeOptions, *llm.Worker, error) {
	jo := &JudgeOptions{Model: spec}
	if !JudgeIsURL(spec) {
		return jo, nil, nil
	}
	jo.Subjects = JudgeSubjects(subj)
	w, err := llm.New(nc, llm.Options{Endpoints: []string{spec}, Subjects: jo.Subjects, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("judge %s: %w", spec, err)
	}
	return jo, w, nil
}

// judgeAsk asks the judge once: the system and user messages, the reply.
type judgeAsk func(ctx context.Context, system, user string) (string, error)

// maxJudgeError bounds the failure text a verdict carries, as NeMo Gym's
// judge_failsafe bounds failure_reason.
const maxJudgeError = 2000

// judgeBothWays asks the judge as NeMo Gym's math server does: expected
// answer as A and the generated one as B, and only if the judge says equal,
// once more the other way round. The answers are equal only when both say
// so (a judge with a positional bias cannot reward a wrong answer alone).
// The evaluations are the asks made, in order.
//
// An ask that fails (the judge's model server rejected it, or no answer came
// within the request's retries) settles the verdict as NeMo Gym's
// judge_failsafe does: not equal, with the failure in Error and the failed
// ask recorded with a null response and its error. Only a worker stopping
// (ctx done) returns an error, so the episode is handed back and asked again.
func judgeBothWays(ctx context.Context, q envs.JudgeRequest, model string, maxTokens int32, temperature float64, ask judgeAsk) (envs.JudgeVerdict, error) {
	var evals []json.RawMessage
	var failure error
	once := func(first, second string) bool {
		user := envs.JudgePrompt(q.Question, first, second)
		reply, err := ask(ctx, envs.JudgeSystemMessage, user)
		if err != nil {
			failure = err
			evals = append(evals, judgeEvaluation(model, maxTokens, temperature, user, nil, err))
			return false
		}
		evals = append(evals, judgeEvaluation(model, maxTokens, temperature, user, &reply, nil))
		return envs.JudgeSaysEqual(reply)
	}
	equal := once(q.Expected, q.Generated)
	if equal {
		equal = once(q.Generated, q.Expected)
	}
	if failure != nil && (ctx.Err() != nil || errors.Is(failure, errStopped)) {
		return envs.JudgeVerdict{}, failure
	}
	list, _ := json.Marshal(evals) // raw JSON values: cannot fail
	v := envs.JudgeVerdict{Equal: equal, Evaluations: list}
	if failure != nil {
		v.Error = truncateUTF8(failure.Error(), maxJudgeError)
	}
	return v, nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeAt(s, n)]
}

// judgeEvaluation is one ask as NeMo Gym records it in judge_evaluations:
// the responses_create_params sent and the response received. A failed ask
// has a null response and its error.
func judgeEvaluation(model string, maxTokens int32, temperature float64, user string, reply *string, failure error) json.RawMessage {
	type msg struct {
		Content string `json:"content"`
		Role    string `json:"role"`
		Type    string `json:"type"`
	}
	type text struct {
		Annotations []any  `json:"annotations"`
		Text        string `json:"text"`
		Type        string `json:"type"`
	}
	type outMsg struct {
		ID      string `json:"id"`
		Content []text `json:"content"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		Type    string `json:"type"`
	}
	type response struct {
		Model  string   `json:"model"`
		Object string   `json:"object"`
		Output []outMsg `json:"output"`
	}
	ev := struct {
		Params struct {
			Input           []msg   `json:"input"`
			MaxOutputTokens int32   `json:"max_output_tokens"`
			Model           string  `json:"model"`
			Temperature     float64 `json:"temperature"`
		} `json:"responses_create_params"`
		Response *response `json:"response"`
		Error    string    `json:"error,omitempty"`
	}{}
	ev.Params.Input = []msg{{envs.JudgeSystemMessage, "system", "message"}, {user, "user", "message"}}
	ev.Params.MaxOutputTokens, ev.Params.Model, ev.Params.Temperature = maxTokens, model, temperature
	if reply != nil {
		ev.Response = &response{Model: model, Object: "response", Output: []outMsg{{
			ID: "msg_judge", Content: []text{{Annotations: []any{}, Text: *reply, Type: "output_text"}}, Role: "assistant", Status: "completed", Type: "message",
		}}}
	}
	if failure != nil {
		ev.Error = truncateUTF8(failure.Error(), maxJudgeError)
	}
	b, _ := json.Marshal(ev) // strings and numbers: cannot fail
	return b
}

// judge settles the game's last step when it waits for a judge and the
// worker has one; otherwise res stands.
func (e *episode) judge(ctx context.Context, res envs.StepResult) (envs.StepResult, error) {
	jo := e.w.opts.Judge
	g, ok := e.game.(*localGame)
	if jo == nil || !ok {
		return res, nil
	}
	j, ok := g.env.(envs.Judged)
	if !ok {
		return res, nil
	}
	q, pending := j.PendingJudge()
	if !pending {
		return res, nil
	}
	maxTokens := jo.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 512
	}
	subj := jo.Subjects
	if subj.Prefix == "" {
		subj = e.w.opts.Subjects
	}
	ask := func(ctx context.Context, system, user string) (string, error) {
		treq := &messages.TokenizeRequest{
			V: messages.Version, EpisodeID: e.req.EpisodeID + "/judge", AddGenerationPrompt: true,
			Messages: []messages.ChatMessage{{Role: "system", Content: system}, {Role: "user", Content: user}},
		}
		trep, err := request[messages.TokenizeReply](ctx, e.w, subj.Tokenize(), treq, e.traceparent, func(r *messages.TokenizeReply) string { return r.Code })
		if err != nil {
			return "", err
		}
		if trep.Error != "" {
			return "", fmt.Errorf("tokenize (%s): %s", trep.Code, trep.Error)
		}
		seed := int64(0)
		greq := &messages.GenerateRequest{
			V: messages.Version, EpisodeID: e.req.EpisodeID + "/judge", Turn: e.turn, Prompt: trep.Tokens, MaxTokens: maxTokens,
			Sampling: messages.SamplingParams{Temperature: jo.Temperature, TopP: 1, MaxTokens: maxTokens, Seed: &seed},
		}
		grep, err := request[messages.GenerateReply](ctx, e.w, subj.Generate(), greq, e.traceparent, func(r *messages.GenerateReply) string { return r.Code })
		if err != nil {
			return "", err
		}
		if grep.Error != "" {
			return "", fmt.Errorf("generate (%s): %s", grep.Code, grep.Error)
		}
		return grep.Text, nil
	}
	v, err := judgeBothWays(ctx, q, jo.Model, maxTokens, jo.Temperature, ask)
	if err != nil {
		return res, fmt.Errorf("judge turn %d: %w", e.turn, err)
	}
	if v.Error != "" {
		if ok, n := e.w.judgeWarn.Allow(time.Now()); ok {
			e.log.Warn("judge failed; the answer keeps the grader's reward", "turn", e.turn, "err", v.Error, "unlogged_failures", n)
		}
	}
	return j.Judge(v), nil
}
