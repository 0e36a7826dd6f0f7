package llm

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/internal/tokenizertest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

func TestDetokenize(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	w := f.start(t, Options{}, m)
	text := "Héllo " + chat.ImEnd
	ids := toyllm.Tokenizer{}.Encode(text)
	for _, pieces := range []bool{false, true, true} { // the second lookup of pieces hits the cache
		rep := request[messages.DetokenizeReply](t, f, f.subj.Detokenize(),
			&messages.DetokenizeRequest{V: messages.Version, EpisodeID: "ep", Tokens: ids, Pieces: pieces})
		if rep.Error != "" {
			t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
		}
		if rep.Text != text {
			t.Errorf("text %q, want %q", rep.Text, text)
		}
		if !pieces {
			if rep.Pieces != nil {
				t.Errorf("pieces %q without asking", rep.Pieces)
			}
			continue
		}
		if len(rep.Pieces) != len(ids) || rep.Pieces[len(ids)-1] != chat.ImEnd || rep.Pieces[0] != "H" {
			t.Errorf("pieces %q", rep.Pieces)
		}
	}
	if st := w.Stats(); st.Detokenize != 3 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
	// Out-of-vocabulary ids are the model server's 400.
	rep := request[messages.DetokenizeReply](t, f, f.subj.Detokenize(),
		&messages.DetokenizeRequest{V: messages.Version, Tokens: []int32{1 << 20}})
	if rep.Code != messages.CodeInvalid || !strings.Contains(rep.Error, "vocabulary") {
		t.Errorf("out of vocabulary: %q (%s)", rep.Error, rep.Code)
	}
}

func TestTokenizeChat(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	f.start(t, Options{}, m)
	msgs := []messages.ChatMessage{{Role: "user", Content: "Guess."}, {Role: "assistant", Content: "I guess"}}
	plain := []chat.Message{{Role: "user", Content: "Guess."}, {Role: "assistant", Content: "I guess"}}
	for _, tc := range []struct {
		name string
		req  messages.ChatTokenizeRequest
		want string
	}{
		{"continue final message", messages.ChatTokenizeRequest{Messages: msgs, ContinueFinalMessage: true},
			strings.TrimSuffix(chat.Render(plain, false), chat.ImEnd+"\n")},
		{"template kwargs", messages.ChatTokenizeRequest{Messages: msgs, AddGenerationPrompt: true, ChatTemplateKwargs: []byte(`{"enable_thinking":false}`)},
			chat.Render(plain, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.V = messages.Version
			rep := request[messages.TokenizeReply](t, f, f.subj.TokenizeChat(), &req)
			if rep.Error != "" {
				t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
			}
			if want := (toyllm.Tokenizer{}).Encode(tc.want); !slices.Equal(rep.Tokens, want) {
				t.Errorf("tokens %v, want %v", rep.Tokens, want)
			}
		})
	}
	bad := request[messages.TokenizeReply](t, f, f.subj.TokenizeChat(),
		&messages.ChatTokenizeRequest{V: messages.Version, Messages: msgs, AddGenerationPrompt: true, ContinueFinalMessage: true})
	if bad.Code != messages.CodeInvalid || !strings.Contains(bad.Error, "continue_final_message") {
		t.Errorf("both flags: %q (%s)", bad.Error, bad.Code)
	}
}

// TestTokenizeChatAfterAssistant asks for the tokens a template puts after an assistant turn
// that messages follow: from the end-of-turn token through the messages, with the request's
// tools, template kwargs and generation prompt applied.
func TestTokenizeChatAfterAssistant(t *testing.T) {
	tools := []byte(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`)
	for _, tc := range []struct {
		name  string
		model string // a real tokenizer's, or "" for the byte-level stand-in
		req   messages.ChatTokenizeRequest
		want  string
	}{
		{"tool result", "", messages.ChatTokenizeRequest{
			Messages: []messages.ChatMessage{{Role: "tool", Content: `{"temp_c": 21}`, ToolCallID: "call-1"}}, AddGenerationPrompt: true, Tools: tools,
		}, "<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
		{"qwen3 without thinking", "qwen3", messages.ChatTokenizeRequest{
			Messages: []messages.ChatMessage{{Role: "user", Content: "And tomorrow?"}}, AddGenerationPrompt: true, Tools: tools,
			ChatTemplateKwargs: []byte(`{"enable_thinking":false}`),
		}, "<|im_end|>\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := toyllm.Options{}
			encode := func(s string) []int32 { return toyllm.Tokenizer{}.Encode(s) }
			if tc.model != "" {
				mt, err := toyllm.LoadModelTokenizer(tokenizertest.Dir(t, tc.model), "")
				if err != nil {
					t.Fatal(err)
				}
				opts.Tokenizer = mt
				encode = func(s string) []int32 { return mt.Tokenizer().Encode(s, false) }
			}
			f := newFixture(t)
			f.start(t, Options{}, newModel(t, opts, nil))
			req := tc.req
			req.V, req.EpisodeID, req.AfterAssistant = messages.Version, "ep", true
			rep := request[messages.TokenizeReply](t, f, f.subj.TokenizeChat(), &req)
			if rep.Error != "" {
				t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
			}
			if want := encode(tc.want); !slices.Equal(rep.Tokens, want) {
				t.Errorf("tokens %v, want %v (%q)", rep.Tokens, want, tc.want)
			}
		})
	}
}

func TestModelInfo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string
		want  messages.ModelInfo
	}{
		{"server's first", "", messages.ModelInfo{ID: "toy", MaxModelLen: 4096}},
		{"configured and listed", "toy", messages.ModelInfo{ID: "toy", MaxModelLen: 4096}},
		{"configured, not listed", "alias", messages.ModelInfo{ID: "alias"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := newModel(t, toyllm.Options{Model: "toy", MaxModelLen: 4096}, nil)
			w := f.start(t, Options{Model: tc.model}, m)
			rep := request[messages.ModelInfoReply](t, f, f.subj.ModelInfo(), &messages.ModelInfoRequest{V: messages.Version})
			if rep.Error != "" {
				t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
			}
			if len(rep.Models) != 1 || rep.Models[0] != tc.want {
				t.Errorf("models %+v, want %+v", rep.Models, tc.want)
			}
			if st := w.Stats(); st.Info != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	m.srv.Close() // connection refused
	f.start(t, Options{}, m)
	rep := request[messages.ModelInfoReply](t, f, f.subj.ModelInfo(), &messages.ModelInfoRequest{V: messages.Version})
	if rep.Code != messages.CodeUnavailable {
		t.Errorf("server gone: %q (%s)", rep.Error, rep.Code)
	}
}

// TestSamplingExtras passes the optional sampling fields through to the model server.
func TestSamplingExtras(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	f.start(t, Options{}, m)
	gen := func(sp messages.SamplingParams) *messages.GenerateReply {
		t.Helper()
		return f.generate(t, &messages.GenerateRequest{V: messages.Version, EpisodeID: "ep", Prompt: gamePrompt(), Sampling: sp, MaxTokens: 200})
	}
	// Kept special tokens and the stop token's text: the reply's text ends with <|im_end|>.
	rep := gen(messages.SamplingParams{IncludeStopStrInOutput: true})
	if rep.Error != "" || !strings.HasSuffix(rep.Text, chat.ImEnd) {
		t.Errorf("special tokens kept: %q %q", rep.Text, rep.Error)
	}
	rep = gen(messages.SamplingParams{IncludeStopStrInOutput: true, SkipSpecialTokens: true})
	if rep.Error != "" || strings.Contains(rep.Text, chat.ImEnd) || rep.Tokens[len(rep.Tokens)-1] != toyllm.ImEndID {
		t.Errorf("special tokens skipped: %q %v %q", rep.Text, rep.Tokens, rep.Error)
	}
	// A stop token id and min_p reach the server: the reply stops at the first 'I'.
	rep = gen(messages.SamplingParams{StopTokenIDs: messages.Tokens{'I'}, MinP: 0.1})
	if rep.Error != "" || rep.Tokens[len(rep.Tokens)-1] != 'I' || rep.FinishReason != "stop" {
		t.Errorf("stop token id: %v %q %q", rep.Tokens, rep.FinishReason, rep.Error)
	}
	// A penalty the stand-in lacks is refused by it, not dropped on the way.
	rep = gen(messages.SamplingParams{RepetitionPenalty: 1.2})
	if rep.Code != messages.CodeInvalid || !strings.Contains(rep.Error, "penalties") {
		t.Errorf("repetition penalty: %q (%s)", rep.Error, rep.Code)
	}
}

func TestMalformedGatewayRequests(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	w := f.start(t, Options{}, m)
	garbage := []byte("\xc1 not msgpack")
	for _, subject := range []string{f.subj.Detokenize(), f.subj.TokenizeChat(), f.subj.ModelInfo()} {
		msg, err := f.nc.Request(subject, garbage, waitTimeout)
		if err != nil {
			t.Fatal(err)
		}
		// Every reply type carries the error in the same fields.
		rep, err := messages.Decode[messages.DetokenizeReply](msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Code != messages.CodeInvalid || rep.Error == "" {
			t.Errorf("%s: %q (%s)", subject, rep.Error, rep.Code)
		}
	}
	if st := w.Stats(); st.Malformed != 3 {
		t.Errorf("stats %+v", st)
	}
}
