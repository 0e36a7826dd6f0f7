package toyllm

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollfleet/rollfleet/chat/hftemplate"
	"github.com/rollfleet/rollfleet/internal/tokenizertest"
)

// loadedModels caches the tokenizers the tests load, a second or two each.
var loadedModels struct {
	sync.Mutex
	m map[string]*modelLoad
}

type modelLoad struct {
	once sync.Once
	mt   *ModelTokenizer
	err  error
}

// loadModel returns the cached ModelTokenizer of a fetched model, skipping
// the test when the model's tokenizer has not been fetched.
func loadModel(t testing.TB, model string) *ModelTokenizer {
	t.Helper()
	dir := tokenizertest.Dir(t, model)
	loadedModels.Lock()
	if loadedModels.m == nil {
		loadedModels.m = map[string]*modelLoad{}
	}
	l := loadedModels.m[model]
	if l == nil {
		l = &modelLoad{}
		loadedModels.m[model] = l
	}
	loadedModels.Unlock()
	l.once.Do(func() { l.mt, l.err = LoadModelTokenizer(dir, "") })
	if l.err != nil {
		t.Fatalf("%s: %v", model, l.err)
	}
	return l.mt
}

// chatModels are the models with a chat template the tests run on; -short
// keeps two with different layouts (ChatML and Llama 3's headers).
func chatModels() []string {
	if testing.Short() {
		return []string{"qwen3", "llama3_1"}
	}
	return []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3"}
}

// gameMessages is a GuessTheNumber conversation after one wrong guess: the
// policy must bisect 11..20 and guess 15.
func gameMessages() []map[string]any {
	return []map[string]any{
		{"role": "user", "content": gtnInstructions(1, 20, 10, 3)},
		{"role": "assistant", "content": `\boxed{10}`},
		{"role": "user", "content": "At turn 1, you guessed 10, and the target number is higher than 10.\nEnter your next guess within \\boxed{}."},
	}
}

// templateOf compiles a model's chat template independently of the server.
func templateOf(t *testing.T, mt *ModelTokenizer) *hftemplate.Template {
	t.Helper()
	tmpl, err := hftemplate.FromConfig(mt.Tokenizer().Config())
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// hfMessages converts test messages to the template's.
func hfMessages(msgs []map[string]any) []hftemplate.Message {
	out := make([]hftemplate.Message, len(msgs))
	for i, m := range msgs {
		out[i] = hftemplate.Message{Role: m["role"].(string), Content: hftemplate.Text(m["content"].(string))}
	}
	return out
}

func TestRealTokenize(t *testing.T) {
	for _, model := range chatModels() {
		t.Run(model, func(t *testing.T) {
			mt := loadModel(t, model)
			tok := mt.Tokenizer()
			_, url := newTestServer(t, Options{Tokenizer: mt, MaxModelLen: 4096})
			c := newClient(t, url)
			msgs := gameMessages()
			rendered, err := templateOf(t, mt).Render(hfMessages(msgs), hftemplate.RenderOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			noGen, err := templateOf(t, mt).Render(hfMessages(msgs), hftemplate.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			text := "Héllo <think> wörld\n\\boxed{42}"
			for _, tc := range []struct {
				name string
				body map[string]any
				want []int32
			}{
				{"messages", map[string]any{"messages": msgs}, tok.Encode(rendered, false)},
				{"messages without generation prompt", map[string]any{"messages": msgs, "add_generation_prompt": false}, tok.Encode(noGen, false)},
				{"messages with special tokens", map[string]any{"messages": msgs, "add_special_tokens": true}, tok.Encode(rendered, true)},
				{"text", map[string]any{"prompt": text, "return_token_strs": true}, tok.Encode(text, true)},
				{"text without special tokens", map[string]any{"prompt": text, "add_special_tokens": false}, tok.Encode(text, false)},
			} {
				status, body := c.post("/tokenize", tc.body)
				if status != http.StatusOK {
					t.Fatalf("%s: status %d: %s", tc.name, status, body)
				}
				requireKeys(t, tc.name, body, "count", "max_model_len", "tokens", "token_strs")
				var r tokenizeResponse
				decodeStrict(t, body, &r)
				if !slices.Equal(r.Tokens, tc.want) || r.Count != len(tc.want) || r.MaxModelLen != 4096 {
					t.Errorf("%s: %+v, want tokens %v", tc.name, r, tc.want)
				}
				if _, strs := tc.body["return_token_strs"]; strs != (r.TokenStrs != nil) {
					t.Errorf("%s: token_strs %v", tc.name, r.TokenStrs)
				}
				for i, s := range r.TokenStrs {
					if want, _ := tok.Token(r.Tokens[i]); s != want {
						t.Errorf("%s: token_strs[%d] = %q, want %q", tc.name, i, s, want)
					}
				}
			}

			for _, s := range []string{rendered, text} {
				status, body := c.post("/detokenize", map[string]any{"tokens": tok.Encode(s, false)})
				var r detokenizeResponse
				if decodeStrict(t, body, &r); status != http.StatusOK || r.Prompt != s {
					t.Errorf("detokenize: status %d, %q, want %q", status, r.Prompt, s)
				}
			}
			status, body := c.post("/detokenize", map[string]any{"tokens": []int{tok.VocabSize()}})
			checkError(t, status, body, http.StatusBadRequest, "out of vocabulary")

			// continue_final_message leaves the assistant's turn open after its text.
			partial := append(slices.Clone(msgs), map[string]any{"role": "assistant", "content": "I guess"})
			status, body = c.post("/tokenize", map[string]any{"messages": partial, "add_generation_prompt": false, "continue_final_message": true})
			var r tokenizeResponse
			if decodeStrict(t, body, &r); status != http.StatusOK || !strings.HasSuffix(tok.Decode(r.Tokens, false), "I guess") {
				t.Errorf("continue_final_message: status %d, %q", status, tok.Decode(r.Tokens, false))
			}
		})
	}
}

// writeFile writes a file in a test's temporary directory.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGenerationEOS checks the reading of generation_config.json's
// eos_token_id, a number or a list.
func TestGenerationEOS(t *testing.T) {
	for _, tc := range []struct {
		name, config string // config "" writes no file
		want         []int32
		bad          bool
	}{
		{name: "no file"},
		{name: "number", config: `{"eos_token_id": 7}`, want: []int32{7}},
		{name: "list", config: `{"eos_token_id": [151645, 151643]}`, want: []int32{151645, 151643}},
		{name: "null", config: `{"eos_token_id": null}`},
		{name: "absent", config: `{"bos_token_id": 1}`},
		{name: "string", config: `{"eos_token_id": "x"}`, bad: true},
		{name: "not json", config: `{`, bad: true},
	} {
		dir := t.TempDir()
		if tc.config != "" {
			writeFile(t, dir, "generation_config.json", tc.config)
		}
		got, err := generationEOS(dir)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.bad)
		}
	}
}

// TestRealNoTemplate checks that a model without a chat template answers
// messages with vLLM's error, and renders them with a template file.
func TestRealNoTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("loads gpt-oss's tokenizer twice")
	}
	mt := loadModel(t, "gptoss")
	_, url := newTestServer(t, Options{Tokenizer: mt})
	c := newClient(t, url)
	msgs := gameMessages()
	for _, path := range []string{"/tokenize", "/v1/chat/completions"} {
		status, body := c.post(path, map[string]any{"messages": msgs})
		checkError(t, status, body, http.StatusBadRequest, "you must provide a chat template")
	}
	r := c.complete(map[string]any{"prompt": "guess the number between 1 and 9", "temperature": 0, "return_token_ids": true, "max_tokens": 50})
	if ch := r.Choices[0]; ch.FinishReason != "stop" || ch.TokenIDs[len(ch.TokenIDs)-1] != mt.EndOfTurn() || !strings.Contains(ch.Text, `\boxed{5}`) {
		t.Errorf("completion %+v", ch)
	}

	// A template of its own (what --chat-template gives), built on the
	// cached tokenizer: loading gpt-oss's again takes long under -race.
	tmpl, err := templateFrom(mt.Tokenizer(),
		"{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"+
			"{% if add_generation_prompt %}<|start|>assistant<|message|>{% if thinking %}<think>\n{% endif %}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	withTemplate, err := newModelTokenizer(mt.Tokenizer(), tmpl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := withTemplate.Tokenizer().Token(withTemplate.EndOfTurn()); end != "<|end|>" {
		t.Errorf("end of turn %q, want <|end|>", end)
	}
	_, url = newTestServer(t, Options{Tokenizer: withTemplate})
	status, body := newClient(t, url).post("/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 0, "return_token_ids": true})
	var cr chatResponse
	// The end of turn <|end|> is not the eos <|return|>: it stops as a stop token.
	if decodeStrict(t, body, &cr); status != http.StatusOK || !strings.Contains(cr.Choices[0].Message.Content, `\boxed{15}`) ||
		cr.Choices[0].StopReason != float64(withTemplate.EndOfTurn()) {
		t.Errorf("chat with a template file: status %d: %s", status, body)
	}
	// A generation prompt that opens a reasoning block makes the policy reason first.
	status, body = newClient(t, url).post("/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 0,
		"chat_template_kwargs": map[string]any{"thinking": true}})
	if decodeStrict(t, body, &cr); status != http.StatusOK || !strings.HasPrefix(cr.Choices[0].Message.Content, "I answer the question.\n</think>\n\n") {
		t.Errorf("chat opening a reasoning block: status %d: %s", status, body)
	}

	if _, err := LoadModelTokenizer(t.TempDir(), ""); err == nil {
		t.Error("loading a directory without a tokenizer: no error")
	}
}

// plannedLogprob is the log-probability of the planned token at a step of
// the tokenizer mode without slips, from the documented logits: skill for
// the planned token, and restMass shared by the other regular tokens, at
// temperature temp (1 when greedy).
func plannedLogprob(skill, temp float64, restCount int) float64 {
	rest := math.Log(restMass / float64(restCount))
	return float64(float32(skill/temp - math.Log(math.Exp(skill/temp)+float64(restCount)*math.Exp(rest/temp))))
}

// restLogprob is the log-probability of one of the other tokens.
func restLogprob(skill, temp float64, restCount int) float64 {
	rest := math.Log(restMass / float64(restCount))
	return float64(float32(rest/temp - math.Log(math.Exp(skill/temp)+float64(restCount)*math.Exp(rest/temp))))
}

// chat posts a chat completion and decodes its 200 response.
func (c *testClient) chat(body map[string]any) chatChoice {
	c.t.Helper()
	status, out := c.post("/v1/chat/completions", body)
	if status != http.StatusOK {
		c.t.Fatalf("status %d: %s", status, out)
	}
	var r chatResponse
	decodeStrict(c.t, out, &r)
	return r.Choices[0]
}

// TestRealChatGame plays a GuessTheNumber turn through each model's chat
// template: the reply is the policy's bisection, in the model's own tokens,
// ended by its end-of-turn token, with the exact logprobs of the planned
// tokens.
func TestRealChatGame(t *testing.T) {
	for _, model := range chatModels() {
		t.Run(model, func(t *testing.T) {
			mt := loadModel(t, model)
			tok := mt.Tokenizer()
			_, url := newTestServer(t, Options{Tokenizer: mt})
			c := newClient(t, url)
			ch := c.chat(map[string]any{"messages": gameMessages(), "temperature": 0, "logprobs": true, "top_logprobs": 4, "return_token_ids": true})
			ids := ch.TokenIDs
			if ch.FinishReason != "stop" || ch.StopReason != nil || len(ids) == 0 || ids[len(ids)-1] != mt.EndOfTurn() {
				t.Fatalf("finish %q stop_reason %v ids %v, want a stop on %d", ch.FinishReason, ch.StopReason, ids, mt.EndOfTurn())
			}
			if !strings.Contains(ch.Message.Content, `\boxed{15}`) || ch.Message.Content != tok.Decode(ids, true) {
				t.Errorf("content %q, decoded ids %q", ch.Message.Content, tok.Decode(ids, true))
			}
			if want := tok.Encode(ch.Message.Content, false); !slices.Equal(ids[:len(ids)-1], want) {
				t.Errorf("ids %v are not the content's tokens %v", ids, want)
			}
			n := len(mt.regular)
			for i, e := range ch.Logprobs.Content {
				restCount := n - 1
				if i == len(ids)-1 {
					restCount = n // the end of turn is special: every regular token is another
				}
				if want := plannedLogprob(DefaultSkill, 1, restCount); e.Logprob != want {
					t.Errorf("token %d %q: logprob %v, want %v", i, e.Token, e.Logprob, want)
				}
				if want := tok.Decode([]int32{ids[i]}, false); e.Token != want || !bytes.Equal(toBytes(e.Bytes), []byte(want)) {
					t.Errorf("token %d: %q %v, want %q", i, e.Token, e.Bytes, want)
				}
				sum := 0.0
				for j, a := range e.TopLogprobs {
					sum += math.Exp(a.Logprob)
					if j > 0 && a.Logprob > e.TopLogprobs[j-1].Logprob {
						t.Errorf("token %d: top_logprobs not sorted: %+v", i, e.TopLogprobs)
					}
				}
				if len(e.TopLogprobs) != 4 || e.TopLogprobs[0].Token != e.Token || sum > 1+1e-6 {
					t.Errorf("token %d: top_logprobs %+v (sum of probabilities %v)", i, e.TopLogprobs, sum)
				}
			}
		})
	}
}

// TestChatView checks the ChatML view of prompts rendered by Llama 3.1's
// template: its turns become ChatML turns, its preamble a system turn, and
// text without its layout stays as it is.
func TestChatView(t *testing.T) {
	mt := loadModel(t, "llama3_1")
	tmpl := templateOf(t, mt)
	msgs := []hftemplate.Message{
		{Role: "system", Content: hftemplate.Text("Play.")},
		{Role: "user", Content: hftemplate.Text("Guess.")},
		{Role: "assistant", Content: hftemplate.Text("7")},
		{Role: "user", Content: hftemplate.Text("Higher.")},
	}
	render := func(msgs []hftemplate.Message, gen bool) string {
		text, err := tmpl.Render(msgs, hftemplate.RenderOptions{AddGenerationPrompt: gen})
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	const system = "<|im_start|>system\n<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nPlay.<|eot_id|><|im_end|>\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"conversation", render(msgs, true), system +
			"<|im_start|>user\nGuess.<|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"},
		{"without generation prompt", render(msgs[:2], false), system + "<|im_start|>user\nGuess.<|eot_id|>"},
		{"plain text", "guess the number between 1 and 9", "guess the number between 1 and 9"},
	} {
		if got := string(mt.view.appendView(nil, tc.text)); got != tc.want {
			t.Errorf("%s: view of %q\n is %q\nwant %q", tc.name, tc.text, got, tc.want)
		}
	}
}

// TestRealTools checks that with Qwen3's template, which lays tools out as
// the stand-in's own does, the policy calls the tool offered.
func TestRealTools(t *testing.T) {
	_, url := newTestServer(t, Options{Tokenizer: loadModel(t, "qwen3")})
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}
	ch := newClient(t, url).chat(map[string]any{"tools": tools, "temperature": 0,
		"messages": []map[string]any{{"role": "user", "content": "Paris"}}})
	if want := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"; ch.Message.Content != want {
		t.Errorf("content %q, want %q", ch.Message.Content, want)
	}
}

// toBytes converts the bytes of a logprob entry.
func toBytes(b []int) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

// TestRealMath checks that the math planner reads the question out of each
// template's layout (the view translation): it solves it instead of
// estimating.
func TestRealMath(t *testing.T) {
	for _, model := range chatModels() {
		t.Run(model, func(t *testing.T) {
			_, url := newTestServer(t, Options{Tokenizer: loadModel(t, model)})
			c := newClient(t, url)
			right := 0
			for seed := range 8 {
				ch := c.chat(map[string]any{"seed": seed, "max_tokens": 200, "messages": []map[string]any{
					{"role": "system", "content": "Your task is to solve a math problem."},
					{"role": "user", "content": "What is 12 + 30?"},
				}})
				if !strings.Contains(ch.Message.Content, "The answer is") || strings.Contains(ch.Message.Content, "cannot solve") {
					t.Errorf("seed %d: %q is not a solution", seed, ch.Message.Content)
				}
				if strings.Contains(ch.Message.Content, `\boxed{42}`) {
					right++
				}
			}
			if right == 0 {
				t.Error("no reply of 8 boxed the right answer")
			}
		})
	}
}

// TestRealSampling checks seeded sampling over a real vocabulary: a seed
// reproduces a reply, every logprob is the documented probability of the
// token sampled (the planned one, or one of the rest), and slips happen at
// the documented rate.
func TestRealSampling(t *testing.T) {
	const skill = 8.0 // slips often enough to be counted
	for _, model := range chatModels() {
		t.Run(model, func(t *testing.T) {
			mt := loadModel(t, model)
			_, url := newTestServer(t, Options{Tokenizer: mt, Skill: skill})
			c := newClient(t, url)
			n := len(mt.regular)
			tokens, slips := 0, 0
			for _, temp := range []float64{1, 0.7} {
				for seed := range 40 {
					req := map[string]any{"messages": gameMessages(), "temperature": temp, "seed": seed, "max_tokens": 60,
						"logprobs": true, "top_logprobs": 1, "return_token_ids": true, "return_tokens_as_token_ids": true}
					ch := c.chat(req)
					if again := c.chat(req); !slices.Equal(again.TokenIDs, ch.TokenIDs) || again.Message.Content != ch.Message.Content {
						t.Fatalf("seed %d: %v then %v", seed, ch.TokenIDs, again.TokenIDs)
					}
					for i, e := range ch.Logprobs.Content {
						// The most likely token is the planned one.
						planned := e.TopLogprobs[0].Token
						restCount := n - 1
						if planned == "token_id:"+itoa(mt.EndOfTurn()) {
							restCount = n
						}
						want := plannedLogprob(skill, temp, restCount)
						if e.Token != planned {
							want = restLogprob(skill, temp, restCount)
							if temp == 1 {
								slips++
							}
						}
						if e.Token != "token_id:"+itoa(ch.TokenIDs[i]) || e.Logprob != want {
							t.Errorf("seed %d token %d %s (planned %s): logprob %v, want %v", seed, i, e.Token, planned, e.Logprob, want)
						}
						if temp == 1 {
							tokens++
						}
					}
				}
			}
			rate := float64(slips) / float64(tokens)
			want := restMass / (math.Exp(skill) + restMass)
			sigma := math.Sqrt(want * (1 - want) / float64(tokens))
			t.Logf("skill %g: %d slips in %d tokens (%.3f, expected %.3f); at the default skill %.2g per token",
				skill, slips, tokens, rate, want, restMass/(math.Exp(DefaultSkill)+restMass))
			if math.Abs(rate-want) > 5*sigma {
				t.Errorf("slip rate %.3f, want %.3f ± %.3f", rate, want, 5*sigma)
			}
		})
	}
}

// itoa formats a token id.
func itoa(id int32) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// TestRealStops checks the tokenizer mode's stops with Qwen3's generation
// config: <|im_end|> is the eos (stop_reason null), and the end of turn slips
// to <|endoftext|>, a stop token of the config (stop_reason its id); a low
// skill makes the slip the greedy choice.
func TestRealStops(t *testing.T) {
	const imEnd, endOfText = 151645, 151643
	mt, err := newModelTokenizer(loadModel(t, "qwen3").Tokenizer(), templateOf(t, loadModel(t, "qwen3")), []int32{imEnd, endOfText})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		skill      float64
		req        map[string]any
		finish     string
		stopReason any
		lastID     int32
		textSuffix string
	}{
		{name: "end of turn", finish: "stop", lastID: imEnd, textSuffix: "}"},
		{name: "slip to endoftext", skill: 3, finish: "stop", stopReason: float64(endOfText), lastID: endOfText, textSuffix: "}"},
		{name: "stop token shown", req: map[string]any{"skip_special_tokens": false, "include_stop_str_in_output": true},
			finish: "stop", lastID: imEnd, textSuffix: "}<|im_end|>"},
		{name: "ignore eos", req: map[string]any{"ignore_eos": true, "max_tokens": 30}, finish: "length", lastID: -1, textSuffix: ""},
		{name: "stop string", req: map[string]any{"stop": []string{"boxed"}}, finish: "stop", stopReason: "boxed", lastID: -1, textSuffix: `\`},
		{name: "stop token id", req: map[string]any{"stop_token_ids": []int32{mt.Tokenizer().Encode("{", false)[0]}}, finish: "stop",
			stopReason: float64(mt.Tokenizer().Encode("{", false)[0]), lastID: mt.Tokenizer().Encode("{", false)[0], textSuffix: `\boxed`},
	} {
		_, url := newTestServer(t, Options{Tokenizer: mt, Skill: tc.skill})
		req := map[string]any{"messages": gameMessages(), "temperature": 0, "return_token_ids": true}
		for k, v := range tc.req {
			req[k] = v
		}
		ch := newClient(t, url).chat(req)
		last := ch.TokenIDs[len(ch.TokenIDs)-1]
		if ch.FinishReason != tc.finish || ch.StopReason != tc.stopReason || (tc.lastID >= 0 && last != tc.lastID) ||
			!strings.HasSuffix(ch.Message.Content, tc.textSuffix) {
			t.Errorf("%s: finish %q stop_reason %v last id %d content %q", tc.name, ch.FinishReason, ch.StopReason, last, ch.Message.Content)
		}
	}
}

// TestRealCompletions checks /v1/completions in the tokenizer mode: a text
// prompt is encoded with the BOS, as vLLM does, and the same prompt as ids
// gets the same seeded reply.
func TestRealCompletions(t *testing.T) {
	mt := loadModel(t, "llama3_1")
	tok := mt.Tokenizer()
	_, url := newTestServer(t, Options{Tokenizer: mt})
	c := newClient(t, url)
	text, err := templateOf(t, mt).Render(hfMessages(gameMessages()), hftemplate.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	byText := c.complete(map[string]any{"prompt": text, "max_tokens": 100, "seed": 5, "return_token_ids": true}).Choices[0]
	if want := tok.Encode(text, true); !slices.Equal(byText.PromptTokenIDs, want) {
		t.Errorf("prompt_token_ids %v, want %v", byText.PromptTokenIDs, want)
	}
	byIDs := c.complete(map[string]any{"prompt": byText.PromptTokenIDs, "max_tokens": 100, "seed": 5, "return_token_ids": true}).Choices[0]
	if !slices.Equal(byIDs.TokenIDs, byText.TokenIDs) || !strings.Contains(byIDs.Text, `\boxed{`) {
		t.Errorf("by ids %v %q, by text %v", byIDs.TokenIDs, byIDs.Text, byText.TokenIDs)
	}
	status, body := c.post("/v1/completions", map[string]any{"prompt": []int{1, tok.VocabSize()}})
	checkError(t, status, body, http.StatusBadRequest, "out of vocabulary")
}

// BenchmarkCompletionTokenizer measures one chat-game /v1/completions turn
// in the handler in the tokenizer mode (Qwen3), without the network.
func BenchmarkCompletionTokenizer(b *testing.B) {
	mt := loadModel(b, "qwen3")
	s := New(Options{Logger: discardLogger(), Tokenizer: mt})
	tmpl, err := hftemplate.FromConfig(mt.Tokenizer().Config())
	if err != nil {
		b.Fatal(err)
	}
	prompt, err := tmpl.Render(hfMessages(gameMessages()), hftemplate.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{
		"prompt": mt.Tokenizer().Encode(prompt, false), "max_tokens": 256, "temperature": 1.0, "seed": 42,
		"logprobs": 0, "return_tokens_as_token_ids": true, "return_token_ids": true,
	})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	w := &nullWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req.Body = readCloser{bytes.NewReader(body)}
		s.Handler().ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// TestRealReasoning checks Options.Reasoning: with Qwen3's thinking
// template a reply to the bare generation prompt opens its own <think>
// block before the answer or tool call, as Qwen3 does (so its template, as
// history, splits the reasoning off), and nothing changes
// when the prompt closed the block already, for a template that is not a
// thinking one, or in the byte mode.
func TestRealReasoning(t *testing.T) {
	question := []map[string]any{
		{"role": "system", "content": "Your task is to solve a math problem."},
		{"role": "user", "content": "What is 12 + 30?"},
	}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}
	for _, tc := range []struct {
		name      string
		model     string // "" for the byte mode
		reasoning bool
		body      map[string]any
		want      string // the reply's prefix, up to its answer
		end       int32  // the last token id: the model's end of turn
		wantThink bool   // whether the reply opens a reasoning block
	}{
		{name: "qwen3", model: "qwen3", reasoning: true, body: map[string]any{"messages": question},
			want: "<think>\nI answer the question.\n</think>\n\n", wantThink: true, end: 151645},
		{name: "qwen3 tool call", model: "qwen3", reasoning: true, body: map[string]any{"messages": []map[string]any{{"role": "user", "content": "Paris"}}, "tools": tools},
			want: "<think>\nI call a tool first.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", wantThink: true, end: 151645},
		{name: "qwen3 thinking off", model: "qwen3", reasoning: true,
			body: map[string]any{"messages": question, "chat_template_kwargs": map[string]any{"enable_thinking": false}}, end: 151645},
		{name: "qwen3 without the option", model: "qwen3", body: map[string]any{"messages": question}, end: 151645},
		{name: "llama3_1", model: "llama3_1", reasoning: true, body: map[string]any{"messages": question}, end: 128009},
		{name: "byte mode", reasoning: true, body: map[string]any{"messages": question}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Reasoning: tc.reasoning}
			if tc.model != "" {
				opts.Tokenizer = loadModel(t, tc.model)
			}
			_, url := newTestServer(t, opts)
			body := maps.Clone(tc.body)
			body["temperature"], body["seed"], body["max_tokens"], body["return_token_ids"] = 0, 1, 300, true
			ch := newClient(t, url).chat(body)
			text := ch.Message.Content
			if got := strings.Contains(text, thinkStart); got != tc.wantThink || !strings.HasPrefix(text, tc.want) {
				t.Fatalf("reply %q, want one starting %q (a think block: %v)", text, tc.want, tc.wantThink)
			}
			if _, isTool := tc.body["tools"]; !isTool && !strings.Contains(text, `\boxed{`) {
				t.Errorf("reply %q has no boxed answer", text)
			}
			if tc.model == "" {
				return
			}
			ids := ch.TokenIDs
			if len(ids) == 0 || ids[len(ids)-1] != tc.end || text != opts.Tokenizer.Tokenizer().Decode(ids, true) {
				t.Errorf("ids %v do not decode to the reply and end with %d", ids, tc.end)
			}
			if !tc.wantThink {
				return
			}
			// Qwen3's template splits its own replies at </think>: as an
			// earlier turn, the reply keeps its answer and drops its reasoning.
			_, answer, _ := strings.Cut(text, thinkEnd+"\n\n")
			history, err := templateOf(t, opts.Tokenizer).Render([]hftemplate.Message{
				{Role: "user", Content: hftemplate.Text("Paris")},
				{Role: "assistant", Content: hftemplate.Text(text)},
				{Role: "user", Content: hftemplate.Text("Again.")},
			}, hftemplate.RenderOptions{AddGenerationPrompt: true})
			if err != nil || strings.Contains(history, thinkStart) || !strings.Contains(history, "<|im_start|>assistant\n"+answer+"<|im_end|>") {
				t.Errorf("the reply as history renders as %q, %v; want its answer %q alone", history, err, answer)
			}
		})
	}
}
