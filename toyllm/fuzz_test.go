package toyllm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"
)

// fuzzBodies seed the request fuzzers.
var fuzzBodies = []string{
	`{"prompt":[257,117,115,101,114,10,104,105,258,10],"max_tokens":32,"seed":1,"logprobs":2,"return_token_ids":true}`,
	`{"prompt":"Guess the number between 1 and 20","temperature":0.7,"top_p":0.9,"top_k":5,"stop":["}"],"include_stop_str_in_output":true}`,
	`{"prompt":[1,2,3],"stop_token_ids":[32],"ignore_eos":true,"skip_special_tokens":false,"return_tokens_as_token_ids":true,"logprobs":0}`,
	`{"prompt":[[1]],"n":2}`,
	`{"prompt":[1, 2 ,3 ],"min_p":0.5,"max_tokens":3}`,
	`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3,"max_tokens":20}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"continue_final_message":true,"add_generation_prompt":false}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":null,"reasoning_content":"r",` +
		`"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]},{"role":"tool","tool_call_id":"c","content":"o"}],` +
		`"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"x":{"type":"integer"}}}}}],"chat_template_kwargs":{"enable_thinking":true}}`,
	`{"tokens":[1,2,258]}`,
	`{"prompt":"<|im_start|>","return_token_strs":true}`,
	`{`, `[]`, `null`, `{"prompt":null}`, `{"prompt":[-0]}`,
	`{"update_info":{"skill":8.5,"weight_version":"step-1"}}`, `{"weight_version":"v2"}`,
}

// fuzzServer answers fuzzed requests; its small window keeps generation short.
func fuzzServer() *Server { return New(Options{MaxModelLen: 2048, Logger: discardLogger()}) }

// checkFuzzResponse requires a 200 or a 4xx with a JSON body.
func checkFuzzResponse(t *testing.T, body []byte, rec *httptest.ResponseRecorder) {
	if rec.Code != http.StatusOK && (rec.Code < 400 || rec.Code > 499) {
		t.Fatalf("body %q: status %d: %s", body, rec.Code, rec.Body)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("body %q: response is not JSON: %s", body, rec.Body)
	}
}

func FuzzCompletionsRequest(f *testing.F) {
	for _, b := range fuzzBodies {
		f.Add([]byte(b))
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body)))
		checkFuzzResponse(t, body, rec)
	})
}

// FuzzOtherEndpoints sends arbitrary bodies to the other POST endpoints.
func FuzzOtherEndpoints(f *testing.F) {
	// /start_weight_update and /pause are left out: they would hold the
	// generation requests that follow.
	paths := []string{"/v1/chat/completions", "/tokenize", "/detokenize", "/update_weights", "/finish_weight_update"}
	for i, b := range fuzzBodies {
		f.Add(uint8(i), []byte(b))
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		rec := httptest.NewRecorder()
		path := paths[int(which)%len(paths)]
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		checkFuzzResponse(t, body, rec)
	})
}

func FuzzTokenizer(f *testing.F) {
	for _, s := range []string{"", "hello", "<|im_start|>user\n<|im_end|>", "<|im_end|", "é世🎲", "<<|endoftext|>>"} {
		f.Add(s)
	}
	var tok Tokenizer
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip()
		}
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		if len(ids) > len(s) {
			t.Fatalf("%d ids for %d bytes", len(ids), len(s))
		}
	})
}

// FuzzReadGame reads arbitrary conversations and plans replies to them.
func FuzzReadGame(f *testing.F) {
	f.Add(gtnInstructions(1, 20, 10, 4) + "At turn 1, you guessed 10, and the target number is higher than 10.")
	f.Add("the number between 5 and 3 you guessed 99999999999999999999, and the target number is lower than 1")
	sp := samplingParams{temperature: 1, topP: 1}
	f.Fuzz(func(t *testing.T, text string) {
		g := readGame([]byte(text))
		if g.min > g.lo || g.lo > g.hi || g.hi > g.max {
			t.Fatalf("range %d <= %d <= %d <= %d violated", g.min, g.lo, g.hi, g.max)
		}
		var st genState
		st.prompt = Tokenizer{}.Encode(text)
		generate(&st, &genParams{sampling: sp, maxTokens: 100}, newPolicy(DefaultSkill, DefaultWeightVersion))
		if len(st.ids) == 0 || len(st.ids) != len(st.logp) {
			t.Fatalf("%d ids, %d logprobs", len(st.ids), len(st.logp))
		}
	})
}
