package env

import (
	"context"
	"encoding/json"
	"fmt"

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

// judgeAsk asks the judge once: the system and user messages, the reply.
type judgeAsk func(ctx context.Context, system, user string) (string, error)

// judgeBothWays asks the judge as NeMo Gym's math server does: expected
// answer as A and the generated one as B, and only if the judge says equal,
// once more the other way round. The answers are equal only when both say
// so (a judge with a positional bias cannot reward a wrong answer alone).
// The evaluations are the asks made, in order.
func judgeBothWays(ctx context.Context, q envs.JudgeRequest, model string, maxTokens int32, temperature float64, ask judgeAsk) (envs.JudgeVerdict, error) {
	var evals []json.RawMessage
	once := func(first, second string) (bool, error) {
		user := envs.JudgePrompt(q.Question, first, second)
		reply, err := ask(ctx, envs.JudgeSystemMessage, user)
		if err != nil {
			return false, err
		}
		evals = append(evals, judgeEvaluation(model, maxTokens, temperature, user, reply))
		return envs.JudgeSaysEqual(reply), nil
	}
	equal, err := once(q.Expected, q.Generated)
	if err == nil && equal {
		equal, err = once(q.Generated, q.Expected)
	}
	if err != nil {
		return envs.JudgeVerdict{}, err
	}
	list, _ := json.Marshal(evals) // raw JSON values: cannot fail
	return envs.JudgeVerdict{Equal: equal, Evaluations: list}, nil
}

// judgeEvaluation is one ask as NeMo Gym records it in judge_evaluations:
// the responses_create_params sent and the response received.
func judgeEvaluation(model string, maxTokens int32, temperature float64, user, reply string) json.RawMessage {
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
	ev := struct {
		Params struct {
			Input           []msg   `json:"input"`
			MaxOutputTokens int32   `json:"max_output_tokens"`
			Model           string  `json:"model"`
			Temperature     float64 `json:"temperature"`
		} `json:"responses_create_params"`
		Response struct {
			Model  string   `json:"model"`
			Object string   `json:"object"`
			Output []outMsg `json:"output"`
		} `json:"response"`
	}{}
	ev.Params.Input = []msg{{envs.JudgeSystemMessage, "system", "message"}, {user, "user", "message"}}
	ev.Params.MaxOutputTokens, ev.Params.Model, ev.Params.Temperature = maxTokens, model, temperature
	ev.Response.Model, ev.Response.Object = model, "response"
	ev.Response.Output = []outMsg{{ID: "msg_judge", Content: []text{{Annotations: []any{}, Text: reply, Type: "output_text"}}, Role: "assistant", Status: "completed", Type: "message"}}
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
		return res, e.fail("judge turn %d: %v", e.turn, err)
	}
	return j.Judge(v), nil
}
