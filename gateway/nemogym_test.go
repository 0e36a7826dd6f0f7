package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// These tests replay what NeMo Gym's model server for vLLM sends to the server at its base_url
// and read what it reads from the answers: responses_api_models/vllm_model/app.py of
// NVIDIA-NeMo/Gym at commit 00e2c136da09167c571145ff428f071d181e0cb1 (cited as app.py:LINE).
// vllm_model raises on a missing or inconsistent field, so each such check here fails the test
// with the error it would raise.

// vllmModel is the configuration of a vllm_model server (VLLMModelConfig, app.py:174-290).
type vllmModel struct {
	// returnTokenIDs is request_prompt_and_generation_token_ids (app.py:180): the requests
	// carry return_token_ids, and the prompt ids come from the answer instead of /tokenize.
	returnTokenIDs bool
	// reasoningParser is uses_reasoning_parser (app.py:183).
	reasoningParser bool
	// chatTemplateKwargs is the configured chat_template_kwargs (app.py:204).
	chatTemplateKwargs map[string]any
}

// call is one model call as vllm_model reports it: the token information it attaches to the
// assistant message (app.py:1062-1076) and the finish reason.
type nemoCall struct {
	message  map[string]any
	prompt   []int32
	gen      []int32
	logprobs []float32
	finish   string
	session  string // the X-Session-ID the gateway answered with
}

var thinkTags = regexp.MustCompile(`(?s)<think>(.*?)</think>`)

// chat sends body as vllm_model's chat_completions does (app.py:873-1086) and returns what it
// returns.
func (v *vllmModel) chat(t *testing.T, f *fixture, body map[string]any) *nemoCall {
	t.Helper()
	// _preprocess_chat_completion_create_params, app.py:553-741.
	for _, tool := range asList(body["tools"]) { // app.py:539-551, 569: "strict" is stripped
		delete(tool.(map[string]any)["function"].(map[string]any), "strict")
	}
	body["model"] = toyllm.DefaultModel // app.py:576
	kwargs := map[string]any{}
	for k, val := range v.chatTemplateKwargs { // app.py:578-580
		kwargs[k] = val
	}
	metadata, _ := body["metadata"].(map[string]any) // app.py:582
	if s, ok := metadata["chat_template_kwargs"].(string); ok {
		mustUnmarshal(t, s, &kwargs) // app.py:585-586
	}
	if len(kwargs) > 0 {
		body["chat_template_kwargs"] = kwargs // app.py:588-589
	}
	extraBody := map[string]any{}
	if s, ok := metadata["extra_body"].(string); ok {
		mustUnmarshal(t, s, &extraBody) // app.py:596-597
	}
	// return_token_id_information, app.py:607-619.
	body["logprobs"], body["top_logprobs"], body["return_tokens_as_token_ids"] = true, 0, true
	if v.returnTokenIDs {
		body["return_token_ids"] = true
	}
	if v.reasoningParser { // app.py:621-656: reasoning moves out of re-sent assistant turns
		for _, m := range asList(body["messages"]) {
			msg := m.(map[string]any)
			content, isText := msg["content"].(string)
			if msg["role"] != "assistant" || !isText {
				continue
			}
			match := thinkTags.FindStringSubmatch(content)
			msg["content"] = thinkTags.ReplaceAllString(content, "")
			if match != nil {
				msg["reasoning_content"], msg["reasoning"] = match[1], match[1]
			}
		}
	}
	for k, val := range extraBody { // app.py:664-665: extra_body | body_dict
		if _, set := body[k]; !set {
			body[k] = val
		}
	}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, body) // app.py:916
	resp := jsonValue(t, string(r.body)).(map[string]any)
	choice := asList(resp["choices"])[0].(map[string]any) // app.py:992
	msg := choice["message"].(map[string]any)
	reasoning, _ := msg["reasoning_content"].(string)
	if reasoning == "" {
		reasoning, _ = msg["reasoning"].(string)
	}
	if v.reasoningParser { // app.py:994-1012: reasoning goes back into the content
		if reasoning != "" {
			delete(msg, "reasoning_content")
			delete(msg, "reasoning")
			content, _ := msg["content"].(string)
			msg["content"] = "<think>" + reasoning + "</think>" + content
		}
	} else if reasoning != "" { // app.py:1013-1018
		t.Fatalf("uses_reasoning_parser is false but the answer carries reasoning %q", reasoning)
	}
	// return_token_id_information, app.py:1022-1084.
	c := &nemoCall{message: msg, finish: choice["finish_reason"].(string), session: r.header.Get(HeaderSessionID)}
	if _, bundled := msg["prompt_token_ids"]; bundled {
		t.Fatal("the message carries a token bundle: vllm_model would check it against the choice (app.py:1034-1045)")
	}
	c.gen, c.logprobs = choiceLogprobs(t, choice) // app.py:1047, _extract_choice_logprobs app.py:1310-1340
	prompt, hasPrompt := resp["prompt_token_ids"] // _extract_vllm_response_token_ids, app.py:1289-1308
	_, hasGen := choice["token_ids"]
	switch {
	case hasPrompt != hasGen:
		t.Fatalf("vLLM response returned partial token metadata (app.py:1299-1301)")
	case hasPrompt && prompt != nil:
		c.prompt = ids(t, prompt)
		if !slices.Equal(ids(t, choice["token_ids"]), c.gen) { // app.py:1048-1053
			t.Fatalf("vLLM response generation token IDs disagree with choice logprob token IDs")
		}
	default: // app.py:1054-1060: /tokenize with the prompt-affecting fields (app.py:296-303, 1343-1345)
		tb := map[string]any{}
		for _, k := range []string{"model", "messages", "tools", "chat_template_kwargs", "mm_processor_kwargs", "required_prefix_token_ids"} {
			if val, ok := body[k]; ok {
				tb[k] = val
			}
		}
		var tok struct {
			Tokens []int32 `json:"tokens"`
		}
		if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, tb).decode(&tok); err != nil {
			t.Fatal(err)
		}
		c.prompt = tok.Tokens
	}
	if len(c.gen) != len(c.logprobs) { // _validate_token_bundle, app.py:1268-1273
		t.Fatalf("mismatched generation token IDs and log probabilities")
	}
	delete(choice, "logprobs") // app.py:1079
	msg["prompt_token_ids"], msg["generation_token_ids"], msg["generation_log_probs"] = c.prompt, c.gen, c.logprobs
	return c
}

// complete sends a conversation of a system and a user message as vllm_model's completions path
// does (use_completions_api without render_chat_template, app.py:1353-1441): a string prompt
// with the contents joined by a blank line (app.py:1443-1474).
func (v *vllmModel) complete(t *testing.T, f *fixture, system, user string, extra map[string]any) *nemoCall {
	t.Helper()
	body := map[string]any{ // _build_completion_body_from_chat_body, app.py:1551-1614
		"model": toyllm.DefaultModel, "prompt": system + "\n\n" + user, "logprobs": 0,
		"return_token_ids": true, "return_tokens_as_token_ids": true,
	}
	for k, val := range extra {
		body[k] = val
	}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", nil, body) // app.py:1414
	var resp struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs *struct {
				Tokens        []string      `json:"tokens"`
				TokenLogprobs []json.Number `json:"token_logprobs"`
			} `json:"logprobs"`
			FinishReason   string  `json:"finish_reason"`
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
		} `json:"choices"`
	}
	if err := r.decode(&resp); err != nil {
		t.Fatal(err)
	}
	// _completion_dict_to_chat_completion, app.py:1616-1682.
	ch := resp.Choices[0]
	if ch.Logprobs == nil || ch.Logprobs.TokenLogprobs == nil || ch.TokenIDs == nil || ch.PromptTokenIDs == nil {
		t.Fatalf("requested per-token logprobs and token ids, got %s", r.body)
	}
	c := &nemoCall{prompt: ch.PromptTokenIDs, gen: ch.TokenIDs, finish: ch.FinishReason, session: r.header.Get(HeaderSessionID),
		message: map[string]any{"role": "assistant", "content": ch.Text}}
	for i, s := range ch.Logprobs.TokenLogprobs {
		lp, err := parseFloat32(string(s))
		if err != nil {
			t.Fatal(err)
		}
		c.logprobs = append(c.logprobs, lp)
		if want := "token_id:" + strconv.Itoa(int(ch.TokenIDs[i])); ch.Logprobs.Tokens[i] != want {
			t.Errorf("logprobs.tokens[%d] = %q, want %q", i, ch.Logprobs.Tokens[i], want)
		}
	}
	return c
}

// choiceLogprobs reads the generated ids and logprobs from a chat choice's logprobs, which
// must use the token_id:<id> form (app.py:1310-1340).
func choiceLogprobs(t *testing.T, choice map[string]any) ([]int32, []float32) {
	t.Helper()
	lp, ok := choice["logprobs"].(map[string]any)
	if !ok {
		t.Fatalf("requested per-token logprobs, but the response had none: %v", choice["logprobs"])
	}
	var gen []int32
	var lps []float32
	for i, e := range asList(lp["content"]) {
		entry := e.(map[string]any)
		tok, _ := entry["token"].(string)
		id, err := strconv.ParseInt(strings.TrimPrefix(tok, tokenIDPrefix), 10, 32)
		if !strings.HasPrefix(tok, tokenIDPrefix) || err != nil {
			t.Fatalf("choice.logprobs.content[%d].token %q must use the `token_id:<int>` format", i, tok)
		}
		n, ok := entry["logprob"].(json.Number)
		if !ok {
			t.Fatalf("choice.logprobs.content[%d].logprob must be numeric", i)
		}
		f, err := parseFloat32(string(n))
		if err != nil {
			t.Fatal(err)
		}
		gen, lps = append(gen, int32(id)), append(lps, f)
	}
	return gen, lps
}

// nemoAgent plays one rollout the way NeMo Gym's simple agent drives its model server: the
// user's question as a list of text parts, then model calls until one answers without tool
// calls, each tool call answered with a tool message, every assistant turn re-sent with its
// token information.
type nemoAgent struct {
	vm       *vllmModel
	body     map[string]any // the fields every call carries (tools, metadata, sampling)
	messages []any
	calls    []*nemoCall
}

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather of a city","strict":true,` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`

func newNemoAgent(vm *vllmModel, question string, body map[string]any) *nemoAgent {
	return &nemoAgent{vm: vm, body: body, messages: []any{
		map[string]any{"role": "system", "content": "Use the tools."},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": question}}},
	}}
}

// step makes one model call and appends its answer (and the tool results) to the history. It
// reports whether the rollout goes on.
func (a *nemoAgent) step(t *testing.T, f *fixture) bool {
	t.Helper()
	body := map[string]any{"messages": a.messages, "tools": []any{jsonValue(t, weatherTool)}}
	for k, v := range a.body {
		body[k] = v
	}
	// The body is re-encoded from scratch each call, as the agent's JSON does.
	body = jsonValue(t, string(mustMarshal(t, body))).(map[string]any)
	c := a.vm.chat(t, f, body)
	a.calls = append(a.calls, c)
	a.messages = append(a.messages, c.message)
	calls := asList(c.message["tool_calls"])
	for _, tc := range calls {
		call := tc.(map[string]any)
		a.messages = append(a.messages, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"})
	}
	return len(calls) > 0 && len(a.calls) < 4
}

func (a *nemoAgent) run(t *testing.T, f *fixture) {
	t.Helper()
	for a.step(t, f) {
	}
}

// TestNemoGymVLLMModel replays vllm_model's requests for tool-using rollouts, with the prompt
// ids from the answer or from /tokenize, with a reasoning model, with and without session ids,
// and finishes each rollout the ways a reward holder can: by id, by metadata, by a verify
// result. Every rollout must be one trajectory whose tokens extend call after call, with the
// model's own tokens and logprobs.
func TestNemoGymVLLMModel(t *testing.T) {
	tests := []struct {
		name      string
		vm        vllmModel
		reasoning bool // the gateway's --reasoning-parser qwen3
		body      map[string]any
		finish    string // "id", "metadata" or "verify"
	}{
		{
			name:   "token ids in the answer, session id from metadata.extra_body",
			vm:     vllmModel{returnTokenIDs: true},
			body:   map[string]any{"metadata": map[string]any{"extra_body": `{"session_id": "rollout-1"}`}, "seed": 11, "temperature": 1.0},
			finish: "id",
		},
		{
			name:   "prompt ids from /tokenize, no session id",
			vm:     vllmModel{},
			body:   map[string]any{"metadata": map[string]any{"task": "t2"}, "seed": 12, "temperature": 1.0, "max_tokens": 200},
			finish: "metadata",
		},
		{
			name:      "reasoning model, no session id",
			vm:        vllmModel{returnTokenIDs: true, reasoningParser: true, chatTemplateKwargs: map[string]any{"enable_thinking": false}},
			reasoning: true,
			body: map[string]any{"metadata": map[string]any{"task": "t3", "chat_template_kwargs": `{"enable_thinking": true}`},
				"seed": 13, "temperature": 1.0},
			finish: "verify",
		},
		{
			// vllm_model_for_training.yaml: a thinking model without a reasoning parser, so the
			// reasoning stays in the content and the template reads it back out.
			name:   "reasoning in the content, no session id",
			vm:     vllmModel{chatTemplateKwargs: map[string]any{"enable_thinking": true}},
			body:   map[string]any{"metadata": map[string]any{"task": "t4"}, "seed": 14, "temperature": 1.0},
			finish: "metadata",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if tc.reasoning {
				opts.ReasoningParser = ReasoningParserQwen3
			}
			f := newFixture(t, fixtureOptions{gateway: opts})
			a := newNemoAgent(&tc.vm, "Paris", tc.body)
			a.run(t, f)
			if len(a.calls) != 2 || len(asList(a.calls[0].message["tool_calls"])) != 1 || a.calls[1].finish != "stop" {
				t.Fatalf("want a tool call then an answer, got %d calls: %v", len(a.calls), a.calls[0].message)
			}
			if tc.reasoning && !strings.HasPrefix(a.calls[1].message["content"].(string), "<think>I have the tool result.\n</think>") {
				t.Errorf("answer %q, want its reasoning wrapped back in <think> tags", a.calls[1].message["content"])
			}
			if thinking, _ := tc.vm.chatTemplateKwargs["enable_thinking"].(bool); thinking && !strings.Contains(a.calls[1].message["content"].(string), "</think>") {
				t.Errorf("answer %q, want the reasoning left in the content", a.calls[1].message["content"])
			}
			session := a.calls[0].session
			for _, c := range a.calls {
				if c.session != session {
					t.Fatalf("calls landed in sessions %q and %q", session, c.session)
				}
			}
			switch tc.finish {
			case "id":
				if session != "rollout-1" {
					t.Fatalf("session %q, want the id from metadata.extra_body", session)
				}
				f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/"+session+"/finish", nil, map[string]any{"reward": 1})
			case "metadata":
				f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"metadata": tc.body["metadata"], "reward": 1})
			case "verify":
				f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/verify", nil, verifyResult(a.calls[len(a.calls)-1], 1))
			}
			tr := f.trajectories(t, DefaultEnv)[session]
			if tr == nil {
				t.Fatalf("no trajectory for %q", session)
			}
			checkNemoTrajectory(t, f, tr, a.calls, tc.body["seed"].(int), 1)
		})
	}
}

// verifyResult is a NeMo Gym verify result for a rollout whose last model call is c: the
// response's output items, the last carrying the call's token information, and the reward.
func verifyResult(c *nemoCall, reward float64) map[string]any {
	return map[string]any{
		"responses_create_params": map[string]any{"input": "Paris"}, "reward": reward, "library_reward": reward,
		"expected_answer": "sunny",
		"response": map[string]any{"output": []any{
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "x"}},
				"prompt_token_ids": c.prompt, "generation_token_ids": c.gen, "generation_log_probs": c.logprobs},
		}},
	}
}

// checkNemoTrajectory checks that the calls form one trajectory: the first prompt opens it,
// each call's prompt is the trajectory up to its action, each action is what the model server
// generated, with the logprobs the calls returned, which are the model's own (replayed with
// the same seed).
func checkNemoTrajectory(t *testing.T, f *fixture, tr *messages.Trajectory, calls []*nemoCall, seed int, reward float64) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(tr.ActionRanges) != len(calls) || tr.Reward != reward || tr.ExtraLogs["drift"] != 0 {
		t.Fatalf("trajectory of %d actions, reward %v, extra_logs %v; want %d calls, reward %v, no drift",
			len(tr.ActionRanges), tr.Reward, tr.ExtraLogs, len(calls), reward)
	}
	for k, c := range calls {
		rg := tr.ActionRanges[k]
		if !slices.Equal(c.prompt, tr.ObservationTokens[:rg.Start]) {
			t.Errorf("call %d: its prompt ids are not the trajectory before its action", k)
		}
		action := []int32(tr.ObservationTokens[rg.Start:rg.End])
		if !slices.Equal(action, c.gen) {
			t.Errorf("call %d: action %v, generation_token_ids %v", k, action, c.gen)
		}
		if gen, ok := f.generatedFor(c.prompt); !ok || !slices.Equal(gen[len(gen)-1], action) {
			t.Errorf("call %d: action %v, the model server generated %v", k, action, gen)
		}
		if got := []float32(tr.RolloutLogProbs[rg.Start:rg.End]); !slices.Equal(got, c.logprobs) {
			t.Errorf("call %d: trajectory logprobs %v, generation_log_probs %v", k, got, c.logprobs)
		}
		if direct := directLogprobs(t, f, c.prompt, seed, len(c.gen)); !slices.Equal(direct, c.logprobs) {
			t.Errorf("call %d: generation_log_probs %v, the model gives %v", k, c.logprobs, direct)
		}
		for i := range rg.Start {
			if k == 0 && tr.RolloutLogProbs[i] != 0 {
				t.Errorf("prompt token %d has logprob %v, want 0", i, tr.RolloutLogProbs[i])
			}
		}
	}
}

// directLogprobs asks the model server itself for a completion of prompt with seed.
func directLogprobs(t *testing.T, f *fixture, prompt []int32, seed, maxTokens int) []float32 {
	t.Helper()
	body := mustMarshal(t, map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 1.0, "seed": seed, "logprobs": 0})
	resp, err := http.Post(f.model+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var direct struct {
		Choices []struct {
			Logprobs struct {
				TokenLogprobs []json.Number `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&direct); err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, n := range direct.Choices[0].Logprobs.TokenLogprobs {
		lp, err := parseFloat32(string(n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lp)
	}
	return out
}

// TestNemoGymCompletionsPath replays vllm_model's completions path (a string prompt) without a
// session id: two rollouts of one scope interleaved, each its own session, finished by verify
// results.
func TestNemoGymCompletionsPath(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	vm := &vllmModel{returnTokenIDs: true}
	var calls []*nemoCall
	for i, q := range []string{"What is 2 + 3?", "What is 7 * 6?"} {
		c := vm.complete(t, f, "Solve it.", q, map[string]any{"max_tokens": 64, "temperature": 1.0, "seed": 21 + i})
		if c.finish != "stop" || !strings.Contains(c.message["content"].(string), `\boxed{`) {
			t.Fatalf("call %d: %q finished %q", i, c.message["content"], c.finish)
		}
		calls = append(calls, c)
	}
	if calls[0].session == calls[1].session || !strings.HasPrefix(calls[0].session, "auto-") {
		t.Fatalf("sessions %q and %q: want one each", calls[0].session, calls[1].session)
	}
	for i, c := range calls {
		f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/verify", nil, verifyResult(c, float64(i)))
		tr := f.trajectories(t, DefaultEnv)[c.session]
		if tr == nil {
			t.Fatalf("no trajectory for %q", c.session)
		}
		checkNemoTrajectory(t, f, tr, []*nemoCall{c}, 21+i, float64(i))
		if tr.ExtraLogs["library_reward"] != float64(i) || tr.Info["expected_answer"] != "sunny" {
			t.Errorf("extra_logs %v info %v: want the verify result's fields", tr.ExtraLogs, tr.Info)
		}
	}
}

// TestIdlessSessionsInterleaved runs two tool rollouts without session ids in one scope, call
// by call in turn: each call attaches to the session whose tokens it extends.
func TestIdlessSessionsInterleaved(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	vm := &vllmModel{returnTokenIDs: true}
	agents := []*nemoAgent{
		newNemoAgent(vm, "Paris", map[string]any{"metadata": map[string]any{"task": "a", "run": "r"}, "seed": 31}),
		newNemoAgent(vm, "Oslo", map[string]any{"metadata": map[string]any{"task": "b", "run": "r"}, "seed": 32}),
	}
	for going := true; going; {
		going = false
		for _, a := range agents {
			if len(a.calls) == 0 || len(asList(a.calls[len(a.calls)-1].message["tool_calls"])) > 0 {
				a.step(t, f)
				going = true
			}
		}
	}
	if st := f.gw.Stats(); st.OpenSessions != 2 {
		t.Fatalf("%d sessions open, want 2", st.OpenSessions)
	}
	// An ambiguous finish finishes nothing.
	f.must(t, http.StatusConflict, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"metadata": map[string]any{"run": "r"}, "reward": 1})
	f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"reward": 1})
	f.must(t, http.StatusNotFound, http.MethodPost, "/v1/sessions/finish", nil, map[string]any{"metadata": map[string]any{"task": "c"}, "reward": 1})
	for i, a := range agents {
		f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/finish", nil,
			map[string]any{"metadata": map[string]any{"task": string(rune('a' + i))}, "reward": float64(i)})
		tr := f.trajectories(t, DefaultEnv)[a.calls[0].session]
		if tr == nil {
			t.Fatalf("agent %d: no trajectory for %q", i, a.calls[0].session)
		}
		checkNemoTrajectory(t, f, tr, a.calls, 31+i, float64(i))
	}
	if st := f.gw.Stats(); st.OpenSessions != 0 {
		t.Errorf("%d sessions still open", st.OpenSessions)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func ids(t *testing.T, v any) []int32 {
	t.Helper()
	var out []int32
	for _, x := range asList(v) {
		n, err := x.(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int32(n))
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUnmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatal(err)
	}
}

// jsonValue decodes s with numbers as json.Number.
func jsonValue(t *testing.T, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", s, err))
	}
	return v
}
