package messages

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// gatewayRoundTrip encodes v and decodes it back as T, which must give v again.
func gatewayRoundTrip[T any, P interface {
	*T
	Validate() error
}](t *testing.T, v *T) {
	t.Helper()
	data, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode[T, P](data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip changed the message\n got %+v\nwant %+v", got, v)
	}
}

func TestGatewayMessagesRoundTrip(t *testing.T) {
	gatewayRoundTrip(t, &ModelInfoRequest{V: Version, Deadline: 12345})
	gatewayRoundTrip(t, &ModelInfoReply{V: Version, Models: []ModelInfo{{ID: "Qwen/Qwen3-1.7B", MaxModelLen: 40960}}})
	gatewayRoundTrip(t, &ModelInfoReply{V: Version, Error: "down", Code: CodeUnavailable})
	gatewayRoundTrip(t, &DetokenizeRequest{V: Version, EpisodeID: "s", Tokens: Tokens{0, 151645}, Pieces: true, Deadline: 1})
	gatewayRoundTrip(t, &DetokenizeReply{V: Version, Text: "hi<|im_end|>", Pieces: []string{"hi", "<|im_end|>"}})
	gatewayRoundTrip(t, &ChatTokenizeRequest{
		V: Version, EpisodeID: "s", Messages: []ChatMessage{{Role: "user", Content: "x"}, {Role: "assistant", Content: "y"}},
		ContinueFinalMessage: true, AddSpecialTokens: true, ChatTemplateKwargs: []byte(`{"enable_thinking":false}`), Deadline: 9,
	})
	gatewayRoundTrip(t, &ChatTokenizeRequest{
		V: Version, Messages: []ChatMessage{{Role: "tool", Content: "21", ToolCallID: "c1"}}, AddGenerationPrompt: true, AfterAssistant: true,
	})
	// The optional sampling fields travel in a GenerateRequest.
	req := sampleGenerateRequest()
	req.Sampling.MinP, req.Sampling.PresencePenalty, req.Sampling.FrequencyPenalty = 0.05, -0.5, 1
	req.Sampling.RepetitionPenalty, req.Sampling.MinTokens, req.Sampling.StopTokenIDs = 1.1, 3, Tokens{151643}
	req.Sampling.IgnoreEOS, req.Sampling.SkipSpecialTokens, req.Sampling.IncludeStopStrInOutput = true, true, true
	gatewayRoundTrip(t, req)
}

func TestGatewayMessagesValidate(t *testing.T) {
	msgs := []ChatMessage{{Role: "user", Content: "x"}}
	for _, tc := range []struct {
		field string // "" when valid
		v     interface{ Validate() error }
	}{
		{"", &ModelInfoRequest{V: Version}},
		{"ModelInfoRequest.v", &ModelInfoRequest{}},
		{"", &ModelInfoReply{V: Version, Models: []ModelInfo{{ID: "m"}}}},
		{"", &ModelInfoReply{V: Version, Error: "x", Code: CodeInvalid}},
		{"ModelInfoReply.code", &ModelInfoReply{V: Version, Error: "x"}},
		{"ModelInfoReply.models", &ModelInfoReply{V: Version}},
		{"ModelInfoReply.models[1].id", &ModelInfoReply{V: Version, Models: []ModelInfo{{ID: "m"}, {}}}},
		{"ModelInfoReply.models[0].max_model_len", &ModelInfoReply{V: Version, Models: []ModelInfo{{ID: "m", MaxModelLen: -1}}}},
		{"", &DetokenizeRequest{V: Version}},
		{"DetokenizeRequest.tokens[1]", &DetokenizeRequest{V: Version, Tokens: Tokens{1, -1}}},
		{"DetokenizeRequest.episode_id", &DetokenizeRequest{V: Version, EpisodeID: strings.Repeat("x", MaxIDLength+1)}},
		{"DetokenizeRequest.v", &DetokenizeRequest{V: Version + 1}},
		{"", &DetokenizeReply{V: Version}},
		{"DetokenizeReply.code", &DetokenizeReply{V: Version, Error: "x"}},
		{"", &ChatTokenizeRequest{V: Version, Messages: msgs, AddGenerationPrompt: true, ChatTemplateKwargs: []byte(` {}`)}},
		{"ChatTokenizeRequest.messages", &ChatTokenizeRequest{V: Version}},
		{"ChatTokenizeRequest.messages[0].role", &ChatTokenizeRequest{V: Version, Messages: []ChatMessage{{Content: "x"}}}},
		{"ChatTokenizeRequest.continue_final_message", &ChatTokenizeRequest{V: Version, Messages: msgs, AddGenerationPrompt: true, ContinueFinalMessage: true}},
		{"ChatTokenizeRequest.chat_template_kwargs", &ChatTokenizeRequest{V: Version, Messages: msgs, ChatTemplateKwargs: []byte(`[1]`)}},
		{"ChatTokenizeRequest.chat_template_kwargs", &ChatTokenizeRequest{V: Version, Messages: msgs, ChatTemplateKwargs: []byte(`{`)}},
	} {
		err := tc.v.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.v, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want an error on %s", tc.v, err, tc.field)
		}
	}
}

func TestGatewaySubjects(t *testing.T) {
	s := NewSubjects("fleet1")
	for got, want := range map[string]string{
		s.Detokenize(): "fleet1.llm.detokenize", s.TokenizeChat(): "fleet1.llm.tokenize_chat", s.ModelInfo(): "fleet1.llm.info",
	} {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
}
