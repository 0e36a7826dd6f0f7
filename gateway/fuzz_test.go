package gateway

import (
	"errors"
	"net/http"
	"testing"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// FuzzChatRequest decodes arbitrary chat completion bodies: decoding never panics, every
// refusal is a 400, and an accepted request is one the gateway can serve.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"logprobs":true,"top_logprobs":0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"n":1}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[]}],"stop":"x","seed":-1,"top_k":-1}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}],"add_generation_prompt":false,"continue_final_message":true,"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"messages":[],"session_id":"s","extra_body":{"session_id":"s"}}`,
		`{"messages":[{"role":"user","content":"x"}],"n":2}`,
		`{"messages":[{"role":"user","content":"x"}],"temperature":-1,"top_p":2,"min_p":0.5}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":["a",""],"stop_token_ids":[1,-1]}`,
		`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`,
		`{"messages":[{"role":"user","content":{"a":1}}]}`,
		`[]`, `null`, `{`, `{"messages":"x"}`, `{"max_tokens":1e999}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, sp, err := decodeChat(body)
		if err != nil {
			var ae *vllmapi.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
				t.Fatalf("refusal %v is not a 400", err)
			}
			return
		}
		if len(req.Messages) == 0 {
			t.Fatal("accepted a request without messages")
		}
		for _, m := range req.Messages {
			if m.Role == "" {
				t.Fatal("accepted a message without a role")
			}
		}
		if err := sp.Validate(); err != nil {
			t.Fatalf("accepted invalid sampling: %v", err)
		}
		if n := req.choices(); n < 1 || n > MaxChoices {
			t.Fatalf("accepted n = %d", n)
		}
		if req.addGenerationPrompt() && req.ContinueFinalMessage {
			t.Fatal("accepted both add_generation_prompt and continue_final_message")
		}
		if id, err := req.sessionFromBody(); err == nil && id != "" {
			_ = checkSessionID(id)
		}
		_ = templateKwargs(req.ChatTemplateKwargs)
	})
}

// FuzzCompletionRequest decodes arbitrary completion bodies: decoding never panics, and an
// accepted prompt is non-empty with token ids in range.
func FuzzCompletionRequest(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":[1,2,3],"max_tokens":4,"logprobs":0}`,
		`{"prompt":"hello","add_special_tokens":false}`,
		`{"prompt":[[1,2]]}`, `{"prompt":["a"]}`, `{"prompt":["a","b"]}`, `{"prompt":[[[1]]]}`,
		`{"prompt":[]}`, `{"prompt":[1.5]}`, `{"prompt":[-1]}`, `{"prompt":[4294967296]}`, `{"prompt":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, err := decodeCompletion(body)
		if err != nil {
			return
		}
		if req.Prompt.isText {
			if req.Prompt.text == "" {
				t.Fatal("accepted an empty text prompt")
			}
			return
		}
		if len(req.Prompt.ids) == 0 {
			t.Fatal("accepted an empty token prompt")
		}
		for _, id := range req.Prompt.ids {
			if id < 0 {
				t.Fatalf("accepted token id %d", id)
			}
		}
	})
}
