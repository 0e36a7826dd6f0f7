package toyllm

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/chat"
)

// gamePrompt returns a GuessTheNumber conversation after two turns, as token
// ids.
func gamePrompt() []int32 {
	suffix := `Enter your next guess within \boxed{}.`
	text := chat.Render([]chat.Message{{Role: "user", Content: gtnInstructions(1, 20, 10, 14)}}, true) +
		`\boxed{10}` + chat.ImEnd +
		chat.Feedback(`\boxed{10}`+chat.ImEnd, "At turn 1, you guessed 10, and the target number is higher than 10.", suffix, false) +
		`I guess 15. \boxed{15}` +
		chat.Feedback(`I guess 15. \boxed{15}`, "At turn 2, you guessed 15, and the target number is lower than 15.", suffix, false)
	return Tokenizer{}.Encode(text)
}

func TestCompletionsShape(t *testing.T) {
	_, url := newTestServer(t, Options{Model: "toy"})
	c := newClient(t, url)
	prompt := gamePrompt()
	status, body := c.post("/v1/completions", map[string]any{
		"model": "toy", "prompt": prompt, "max_tokens": 200, "seed": 7, "logprobs": 2, "return_token_ids": true,
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var raw struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	requireKeys(t, "response", body, "id", "object", "created", "model", "choices", "service_tier",
		"system_fingerprint", "usage", "kv_transfer_params")
	requireKeys(t, "choice", raw.Choices[0], "index", "text", "logprobs", "finish_reason", "stop_reason",
		"token_ids", "prompt_logprobs", "prompt_token_ids")
	requireKeys(t, "usage", raw.Usage, "prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details")

	var r completionResponse
	decodeStrict(t, body, &r)
	if !strings.HasPrefix(r.ID, "cmpl-") || r.Object != "text_completion" || r.Model != "toy" || r.Created <= 0 {
		t.Errorf("header = %q %q %q %d", r.ID, r.Object, r.Model, r.Created)
	}
	ch := r.Choices[0]
	ids, lp := ch.TokenIDs, ch.Logprobs
	n := len(ids)
	if n == 0 || lp == nil {
		t.Fatalf("no tokens or logprobs: %s", body)
	}
	for name, l := range map[string]int{"token_logprobs": len(lp.TokenLogprobs), "tokens": len(lp.Tokens),
		"top_logprobs": len(lp.TopLogprobs), "text_offset": len(lp.TextOffset), "completion_tokens": r.Usage.CompletionTokens} {
		if l != n {
			t.Errorf("len(%s) = %d, want %d like token_ids", name, l, n)
		}
	}
	if !slices.Equal(ch.PromptTokenIDs, prompt) || r.Usage.PromptTokens != len(prompt) || r.Usage.TotalTokens != len(prompt)+n {
		t.Errorf("prompt_token_ids or usage wrong: usage %+v", r.Usage)
	}
	for i, id := range ids {
		l := lp.TokenLogprobs[i]
		if math.IsNaN(l) || math.IsInf(l, 0) || l > 0 {
			t.Errorf("token %d: logprob %v", i, l)
		}
		if lp.Tokens[i] != tokenStrings[id] {
			t.Errorf("token %d: string %q, want %q", i, lp.Tokens[i], tokenStrings[id])
		}
		top := lp.TopLogprobs[i]
		if top[lp.Tokens[i]] != l || len(top) < 2 || len(top) > 3 {
			t.Errorf("token %d: top_logprobs %v for %q %v", i, top, lp.Tokens[i], l)
		}
		for _, v := range top {
			if v > 0 || v < minLogprob {
				t.Errorf("token %d: top logprob %v", i, v)
			}
		}
	}
	// The reply ends on <|im_end|>, whose text is left out; the offsets
	// point into the text.
	if ch.FinishReason != "stop" || ch.StopReason != float64(ImEndID) || ids[n-1] != ImEndID {
		t.Errorf("finish %q stop_reason %v last id %d", ch.FinishReason, ch.StopReason, ids[n-1])
	}
	if want := string(appendDecode(nil, ids[:n-1], true)); ch.Text != want {
		t.Errorf("text %q, want %q", ch.Text, want)
	}
	for i := range n - 1 {
		if lp.TextOffset[i] != i {
			t.Errorf("text_offset[%d] = %d", i, lp.TextOffset[i])
		}
	}
}

func TestCompletionsTokenIDStrings(t *testing.T) {
	_, url := newTestServer(t, Options{})
	r := newClient(t, url).complete(map[string]any{
		"prompt": "Guess the number between 1 and 9", "max_tokens": 50, "seed": 1,
		"logprobs": 3, "return_tokens_as_token_ids": true, "return_token_ids": true,
	})
	ch := r.Choices[0]
	for i, id := range ch.TokenIDs {
		if got := ch.Logprobs.Tokens[i]; got != "token_id:"+strconv.Itoa(int(id)) {
			t.Errorf("tokens[%d] = %q for id %d", i, got, id)
		}
		for k := range ch.Logprobs.TopLogprobs[i] {
			v, err := strconv.Atoi(strings.TrimPrefix(k, "token_id:"))
			if err != nil || !inVocab(int32(v)) {
				t.Errorf("top_logprobs key %q", k)
			}
		}
	}
}

// expectedLogprobs recomputes the logprob of each generated token from the
// documented definition: the plan the policy derives from the seed, the
// dense logits of each step, and the sampling rules applied to the whole
// vocabulary, with the planned token's logit skill.
func expectedLogprobs(prompt []int32, seed uint64, sp samplingParams, skill float64, ids []int32) []float64 {
	game := readGame([]byte(Tokenizer{}.Decode(prompt)))
	var rng rand.PCG
	rng.Seed(seed, planStream)
	p := choosePlan(&game, &sp, &rng)
	plan := append(Tokenizer{}.Encode(string(appendPlanText(nil, &game, p))), ImEndID)
	want := make([]float64, len(ids))
	for i, id := range ids {
		planned := ImEndID
		if i < len(plan) {
			planned = plan[i]
		}
		want[i] = naiveLogprobs(denseLogits(planned, skill), sp)[id]
	}
	return want
}

func TestLogprobsMatchRecomputation(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	prompt := gamePrompt()
	for _, sp := range samplingCases {
		for seed := range uint64(4) {
			body := map[string]any{"prompt": prompt, "max_tokens": 120, "seed": seed, "logprobs": 0,
				"return_token_ids": true, "temperature": sp.temperature, "top_p": sp.topP, "top_k": sp.topK, "min_p": sp.minP}
			ch := c.complete(body).Choices[0]
			want := expectedLogprobs(prompt, seed, sp, DefaultSkill, ch.TokenIDs)
			for i, got := range ch.Logprobs.TokenLogprobs {
				if float64(float32(got)) != got {
					t.Errorf("%+v seed %d token %d: logprob %v is not a float32 value", sp, seed, i, got)
				}
				if math.Abs(got-want[i]) > 1e-6*(1+math.Abs(want[i])) {
					t.Errorf("%+v seed %d token %d (%q): logprob %v, recomputed %v", sp, seed, i, tokenStrings[ch.TokenIDs[i]], got, want[i])
				}
			}
		}
	}
}

func TestSeedDeterminism(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	req := func(seed any, temp float64) completionChoice {
		body := map[string]any{"prompt": gamePrompt(), "max_tokens": 64, "temperature": temp,
			"logprobs": 1, "return_token_ids": true}
		if seed != nil {
			body["seed"] = seed
		}
		return c.complete(body).Choices[0]
	}
	for _, seed := range []int64{0, 1, -5, math.MaxInt64} {
		a, b := req(seed, 2), req(seed, 2)
		if !slices.Equal(a.TokenIDs, b.TokenIDs) || !slices.Equal(a.Logprobs.TokenLogprobs, b.Logprobs.TokenLogprobs) || a.Text != b.Text {
			t.Errorf("seed %d: %q then %q", seed, a.Text, b.Text)
		}
	}
	distinct := func(seeded bool) int {
		seen := map[string]bool{}
		for i := range 30 {
			var seed any
			if seeded {
				seed = i
			}
			seen[fmt.Sprint(req(seed, 2).TokenIDs)] = true
		}
		return len(seen)
	}
	if n := distinct(true); n < 5 {
		t.Errorf("30 seeds gave %d distinct replies", n)
	}
	if n := distinct(false); n < 5 {
		t.Errorf("30 unseeded requests gave %d distinct replies", n)
	}
}

func TestGreedy(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	var first []int32
	for seed := range 5 {
		ch := c.complete(map[string]any{"prompt": gamePrompt(), "max_tokens": 64, "temperature": 0, "seed": seed, "return_token_ids": true}).Choices[0]
		if ch.Text != `It is between 11 and 14, so I try 12. \boxed{12}` {
			t.Errorf("greedy reply %q", ch.Text)
		}
		if first == nil {
			first = ch.TokenIDs
		} else if !slices.Equal(first, ch.TokenIDs) {
			t.Errorf("greedy reply depends on the seed")
		}
	}
}

// greedyReply is the most likely reply to the game's opening prompt.
const greedyReply = `It is between 1 and 20, so I try 10. \boxed{10}`

func TestFinishAndStop(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	prompt := Tokenizer{}.Encode(chat.Render([]chat.Message{{Role: "user", Content: gtnInstructions(1, 20, 10, 5)}}, true))
	replyLen := len(greedyReply) + 1 // and <|im_end|>
	tests := []struct {
		name       string
		extra      map[string]any
		text       string
		finish     string
		stopReason any
		nIDs       int
		lastID     int32
	}{
		{name: "max_tokens", extra: map[string]any{"max_tokens": 5}, text: "It is", finish: "length", nIDs: 5, lastID: 's'},
		{
			// vLLM checks the length before the stop tokens.
			name: "im_end as the last allowed token", extra: map[string]any{"max_tokens": replyLen, "skip_special_tokens": false},
			text: greedyReply + "<|im_end|>", finish: "length", nIDs: replyLen, lastID: ImEndID,
		},
		{name: "im_end", extra: map[string]any{}, text: greedyReply, finish: "stop", stopReason: float64(ImEndID), nIDs: replyLen, lastID: ImEndID},
		{
			// vLLM leaves the stop token's text out even when special tokens are shown.
			name: "im_end with special tokens shown", extra: map[string]any{"skip_special_tokens": false},
			text: greedyReply, finish: "stop", stopReason: float64(ImEndID), nIDs: replyLen, lastID: ImEndID,
		},
		{
			name: "im_end included", extra: map[string]any{"skip_special_tokens": false, "include_stop_str_in_output": true},
			text: greedyReply + "<|im_end|>", finish: "stop", stopReason: float64(ImEndID), nIDs: replyLen, lastID: ImEndID,
		},
		{
			name: "stop string", extra: map[string]any{"stop": []string{"zzz", "}"}},
			text: `It is between 1 and 20, so I try 10. \boxed{10`, finish: "stop", stopReason: "}", nIDs: replyLen - 1, lastID: '}',
		},
		{
			name: "stop string included", extra: map[string]any{"stop": "}", "include_stop_str_in_output": true},
			text: greedyReply, finish: "stop", stopReason: "}", nIDs: replyLen - 1, lastID: '}',
		},
		{
			name: "first stop string in list order wins", extra: map[string]any{"stop": []string{"try", "It is"}},
			text: "", finish: "stop", stopReason: "It is", nIDs: 5, lastID: 's',
		},
		{
			name: "stop token id", extra: map[string]any{"stop_token_ids": []int{'{'}},
			text: `It is between 1 and 20, so I try 10. \boxed`, finish: "stop", stopReason: float64('{'), nIDs: replyLen - 4, lastID: '{',
		},
		{
			name: "ignore_eos", extra: map[string]any{"ignore_eos": true, "max_tokens": replyLen + 3, "skip_special_tokens": false},
			text: greedyReply + strings.Repeat("<|im_end|>", 4), finish: "length", nIDs: replyLen + 3, lastID: ImEndID,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"prompt": prompt, "max_tokens": 100, "temperature": 0, "return_token_ids": true}
			for k, v := range tc.extra {
				body[k] = v
			}
			ch := c.complete(body).Choices[0]
			if ch.Text != tc.text || ch.FinishReason != tc.finish || ch.StopReason != tc.stopReason {
				t.Errorf("text %q finish %q stop_reason %#v, want %q %q %#v", ch.Text, ch.FinishReason, ch.StopReason, tc.text, tc.finish, tc.stopReason)
			}
			if len(ch.TokenIDs) != tc.nIDs || ch.TokenIDs[len(ch.TokenIDs)-1] != tc.lastID {
				t.Errorf("%d ids ending with %d, want %d ending with %d", len(ch.TokenIDs), ch.TokenIDs[len(ch.TokenIDs)-1], tc.nIDs, tc.lastID)
			}
		})
	}
}

// TestDuplicatePrompt checks that the last "prompt" member wins, as with
// encoding/json, whichever of the two decoding paths takes the first.
func TestDuplicatePrompt(t *testing.T) {
	var rec recorder
	_, url := newTestServer(t, Options{Record: rec.record})
	c := newClient(t, url)
	for _, tc := range []struct {
		body string
		want []int32
	}{
		{`{"prompt":[1,2],"prompt":"ab","max_tokens":1}`, []int32{'a', 'b'}},
		{`{"prompt":"ab","prompt":[1,2],"max_tokens":1}`, []int32{1, 2}},
		{`{"prompt":[1,2],"prompt":[3],"max_tokens":1}`, []int32{3}},
		{`{"prompt":[1,2],"prompt":null,"max_tokens":1}`, []int32{1, 2}},
	} {
		if status, body := c.post("/v1/completions", tc.body); status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.body, status, body)
		}
		calls := rec.all()
		if got := calls[len(calls)-1].prompt; !slices.Equal(got, tc.want) {
			t.Errorf("%s: prompt %v, want %v", tc.body, got, tc.want)
		}
	}
}

func TestCompletionsTextPrompt(t *testing.T) {
	var rec recorder
	_, url := newTestServer(t, Options{Record: rec.record})
	text := "<|im_start|>user\nGuess the number between 3 and 5.<|im_end|>\n<|im_start|>assistant\n"
	r := newClient(t, url).complete(map[string]any{"prompt": text, "temperature": 0, "max_tokens": 64, "return_token_ids": true})
	if want := (Tokenizer{}).Encode(text); !slices.Equal(r.Choices[0].PromptTokenIDs, want) || !slices.Equal(rec.all()[0].prompt, want) {
		t.Errorf("prompt ids %v, want %v", r.Choices[0].PromptTokenIDs, want)
	}
	if r.Choices[0].Text != `It is between 3 and 5, so I try 4. \boxed{4}` {
		t.Errorf("reply %q", r.Choices[0].Text)
	}
}

func TestContextLength(t *testing.T) {
	_, url := newTestServer(t, Options{MaxModelLen: 100})
	c := newClient(t, url)
	prompt := make([]int32, 90)
	status, body := c.post("/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 20})
	want := "This model's maximum context length is 100 tokens. However, you requested 110 tokens " +
		"(90 in the messages, 20 in the completion). Please reduce the length of the messages or completion."
	checkError(t, status, body, http.StatusBadRequest, want)
	// Exactly the window is fine.
	c.complete(map[string]any{"prompt": prompt, "max_tokens": 10})
	// The chat endpoint's default max_tokens is the room left.
	status, body = c.post("/v1/chat/completions", map[string]any{"messages": []chat.Message{{Role: "user", Content: strings.Repeat("x", 100)}}})
	checkError(t, status, body, http.StatusBadRequest, "maximum context length is 100 tokens")
}

// checkError checks a vLLM error response.
func checkError(t *testing.T, status int, body []byte, wantStatus int, wantMsg string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, body)
	}
	var e errorBody
	decodeStrict(t, body, &e)
	if e.Object != "error" || e.Code != wantStatus || e.Type != errorType(wantStatus) || e.Param != nil {
		t.Errorf("error body %s", body)
	}
	if !strings.Contains(e.Message, wantMsg) {
		t.Errorf("message %q, want it to contain %q", e.Message, wantMsg)
	}
}
