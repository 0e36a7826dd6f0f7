package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/internal/tokenizertest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestRestore matches re-sent conversations against a remembered call: each rule of sameMessage
// keeps the match (and hands back the originals), each edit of meaning breaks it.
func TestRestore(t *testing.T) {
	calls := func(id, args string) json.RawMessage {
		b, _ := json.Marshal([]apiToolCall{{ID: id, Type: "function", Function: apiToolFunction{Name: "get_weather", Arguments: args}}})
		return b
	}
	system := messages.ChatMessage{Role: "system", Content: "Use the tools."}
	user := messages.ChatMessage{Role: "user", Content: "Weather in Paris?"}
	lc := &lastCall{
		msgs: []messages.ChatMessage{system, user},
		reply: messages.ChatMessage{Role: "assistant", Content: "Let me look \xff\xfe up.", Reasoning: "I call a tool first.",
			ToolCalls: calls("call-1", `{"city": "Paris", "days": 1.0, "units": {"t": "C", "w": "kmh"}}`)},
	}
	tool := messages.ChatMessage{Role: "tool", Content: `{"temp_c": 21}`, ToolCallID: "call-1"}
	tests := []struct {
		name   string
		edit   func(ms []messages.ChatMessage) // edits the conversation a faithful client sends back
		match  bool
		toolID string // the tool message's call id after restoring, when matched
	}{
		{name: "as returned", edit: func([]messages.ChatMessage) {}, match: true},
		{name: "arguments re-serialized", match: true, edit: func(ms []messages.ChatMessage) {
			ms[2].ToolCalls = calls("call-1", `{"units":{"w":"kmh","t":"C"},"city":"Paris","days":1}`)
		}},
		{name: "arguments as an object", match: true, edit: func(ms []messages.ChatMessage) {
			ms[2].ToolCalls = json.RawMessage(`[{"id":"call-1","function":{"name":"get_weather","arguments":{"city":"Paris","days":1,"units":{"t":"C","w":"kmh"}}}}]`)
		}},
		{name: "reasoning dropped", match: true, edit: func(ms []messages.ChatMessage) { ms[2].Reasoning = "" }},
		{name: "names added", match: true, edit: func(ms []messages.ChatMessage) { ms[1].Name, ms[2].Name = "alice", "bot" }},
		{name: "invalid bytes as one U+FFFD each", match: true, edit: func(ms []messages.ChatMessage) {
			ms[2].Content = "Let me look \uFFFD\uFFFD up."
		}},
		{name: "invalid bytes as one U+FFFD", match: true, edit: func(ms []messages.ChatMessage) { ms[2].Content = "Let me look \uFFFD up." }},
		{name: "call ids rewritten", match: true, toolID: "call-1", edit: func(ms []messages.ChatMessage) {
			ms[2].ToolCalls = calls("sdk-7", `{"city":"Paris","days":1,"units":{"t":"C","w":"kmh"}}`)
			ms[3].ToolCallID = "sdk-7"
		}},
		{name: "content edited", edit: func(ms []messages.ChatMessage) { ms[2].Content = "Let me look it up." }},
		{name: "U+FFFD where the text was valid", edit: func(ms []messages.ChatMessage) { ms[2].Content = "Let me look \uFFFD\uFFFD up\uFFFD" }},
		{name: "reasoning edited", edit: func(ms []messages.ChatMessage) { ms[2].Reasoning = "I know it." }},
		{name: "argument value changed", edit: func(ms []messages.ChatMessage) {
			ms[2].ToolCalls = calls("call-1", `{"city":"Oslo","days":1,"units":{"t":"C","w":"kmh"}}`)
		}},
		{name: "argument added", edit: func(ms []messages.ChatMessage) {
			ms[2].ToolCalls = calls("call-1", `{"city":"Paris","days":1,"units":{"t":"C","w":"kmh"},"x":null}`)
		}},
		{name: "tool calls dropped", edit: func(ms []messages.ChatMessage) { ms[2].ToolCalls = nil }},
		{name: "earlier message edited", edit: func(ms []messages.ChatMessage) { ms[1].Content = "Weather in Oslo?" }},
		{name: "tool answer to an unknown call", edit: func(ms []messages.ChatMessage) { ms[3].ToolCallID = "call-9" }, match: true, toolID: "call-9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := slices.Concat(lc.msgs, []messages.ChatMessage{lc.reply, tool})
			tc.edit(sent)
			before := slices.Clone(sent)
			got, n := lc.restore(sent)
			if !slices.EqualFunc(sent, before, equalMessage) {
				t.Fatal("restore modified its argument")
			}
			if !tc.match {
				if n != 0 || !slices.EqualFunc(got, sent, equalMessage) {
					t.Fatalf("restored %d messages of an edited conversation", n)
				}
				return
			}
			if n != 3 {
				t.Fatalf("restored %d messages, want 3", n)
			}
			// Calls without a session id find it by this hash.
			if h, orig := conversationHashes(sent)[2], conversationHashes(slices.Concat(lc.msgs, []messages.ChatMessage{lc.reply}))[2]; h != orig {
				t.Fatalf("conversation hash %x, the remembered call's %x", h, orig)
			}
			want := slices.Concat(lc.msgs, []messages.ChatMessage{lc.reply, sent[3]})
			if tc.toolID != "" {
				want[3].ToolCallID = tc.toolID
			}
			if !slices.EqualFunc(got, want, equalMessage) {
				t.Fatalf("restored\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func equalMessage(a, b messages.ChatMessage) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Reasoning == b.Reasoning && string(a.ToolCalls) == string(b.ToolCalls) &&
		a.ToolCallID == b.ToolCallID && a.Name == b.Name
}

// TestRestoreNeedsTheReply leaves a conversation alone that repeats the last call's messages
// without its reply, or is shorter.
func TestRestoreNeedsTheReply(t *testing.T) {
	user := messages.ChatMessage{Role: "user", Content: "hi"}
	lc := &lastCall{msgs: []messages.ChatMessage{user}, reply: messages.ChatMessage{Role: "assistant", Content: "hello"}}
	for _, sent := range [][]messages.ChatMessage{
		{user},
		{user, {Role: "user", Content: "again"}},
		{},
	} {
		if _, n := lc.restore(sent); n != 0 {
			t.Errorf("%v: restored %d messages", sent, n)
		}
	}
}

// TestContentParts decodes content given as text parts to the text a string gives, so a
// client sending parts repeats the message.
func TestContentParts(t *testing.T) {
	var parts, text chatMessage
	if err := json.Unmarshal([]byte(`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`), &parts); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"role":"assistant","content":"a\nb"}`), &text); err != nil {
		t.Fatal(err)
	}
	if !sameMessage(parts.ChatMessage, text.ChatMessage, map[string]string{}) {
		t.Fatalf("parts %q and text %q differ", parts.Content, text.Content)
	}
}

// agentRewrite changes an assistant message as an agent framework sends it back (tool
// messages answer its calls by the ids it ends up with).
type agentRewrite func(reply map[string]any)

// TestAgentRewritesKeepOneSegment runs a tool-using conversation of three calls (a tool call,
// an answer after the tool result, an answer to a new user message) as agents send it back:
// each rewrite that keeps the meaning keeps the session one segment; an edit starts a new one.
func TestAgentRewritesKeepOneSegment(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	tests := []struct {
		name    string
		rewrite agentRewrite
		drift   []bool // per call
	}{
		{"as returned", func(map[string]any) {}, []bool{false, false, false}},
		{"arguments through JSON.stringify", func(reply map[string]any) {
			for _, c := range asList(reply["tool_calls"]) {
				fn := c.(map[string]any)["function"].(map[string]any)
				var v any
				if err := json.Unmarshal([]byte(fn["arguments"].(string)), &v); err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(v)
				fn["arguments"] = string(b)
			}
		}, []bool{false, false, false}},
		{"content as text parts", func(reply map[string]any) {
			if text, ok := reply["content"].(string); ok {
				reply["content"] = []any{map[string]any{"type": "text", "text": text}}
			}
		}, []bool{false, false, false}},
		{"names added", func(reply map[string]any) { reply["name"] = "weather-bot" }, []bool{false, false, false}},
		{"call ids rewritten", func(reply map[string]any) {
			for i, c := range asList(reply["tool_calls"]) {
				c.(map[string]any)["id"] = "sdk-call-" + strconv.Itoa(i)
			}
		}, []bool{false, false, false}},
		{"history edited", func(reply map[string]any) {
			if text, ok := reply["content"].(string); ok {
				reply["content"] = text + " (edited)"
			}
		}, []bool{false, false, true}},
	}
	for k, tc := range tests {
		for _, named := range []bool{true, false} {
			t.Run(tc.name+"/named="+strconv.FormatBool(named), func(t *testing.T) {
				runAgent(t, f, "agent-"+strconv.Itoa(k), named, tc.rewrite, tc.drift)
			})
		}
	}
}

// runAgent runs the conversation of TestAgentRewritesKeepOneSegment, in a session named
// session, or without an id in a scope of that name. A call expected to drift begins a new
// segment of a named session; without an id it opens a new session.
func runAgent(t *testing.T, f *fixture, session string, named bool, rewrite agentRewrite, drift []bool) {
	header := map[string]string{HeaderSessionID: session}
	if !named {
		header = map[string]string{HeaderSessionScope: session}
	}
	msgs := []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}}
	first, kept := "", 0 // the first call's session, and the calls it kept
	for call, wantDrift := range drift {
		r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", header, map[string]any{
			"messages": msgs, "tools": []any{jsonValue(t, weatherTool)}, "max_tokens": 400, "temperature": 0,
		})
		id := r.header.Get(HeaderSessionID)
		if call == 0 {
			first = id
		}
		if named && r.header.Get(HeaderDrift) != strconv.FormatBool(wantDrift) || !named && (id == first) == wantDrift {
			t.Fatalf("call %d: in session %q (first %q), %s %q; want drift %v", call, id, first, HeaderDrift, r.header.Get(HeaderDrift), wantDrift)
		}
		if named || !wantDrift {
			kept++
		}
		var out struct {
			Choices []struct {
				Message map[string]any `json:"message"`
			} `json:"choices"`
		}
		if err := r.decode(&out); err != nil {
			t.Fatal(err)
		}
		reply := out.Choices[0].Message
		if call == 0 && len(asList(reply["tool_calls"])) != 1 {
			t.Fatalf("first reply %v, want a tool call", reply)
		}
		rewrite(reply)
		msgs = append(msgs, reply)
		if calls := asList(reply["tool_calls"]); len(calls) > 0 {
			for _, c := range calls {
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.(map[string]any)["id"], "content": `{"temp_c": 21}`})
			}
		} else {
			msgs = append(msgs, map[string]any{"role": "user", "content": "And tomorrow?"})
		}
	}
	var sum summary
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/"+first, nil, nil).decode(&sum); err != nil {
		t.Fatal(err)
	}
	want := 1
	if named && slices.Contains(drift, true) {
		want = 2
	}
	if sum.Calls != kept || sum.Segments != want {
		t.Fatalf("session of %d calls in %d segments, want %d in %d", sum.Calls, sum.Segments, kept, want)
	}
}

// TestReplacementCharactersContinueTrace sends back a reply whose sampled bytes are not valid
// UTF-8 as the client read it, with U+FFFD: the conversation matches, and since no rendering
// of the text gives the sampled bytes back, the prompt continues the trace, unless
// NoContinueTrace, which starts a new segment.
func TestReplacementCharactersContinueTrace(t *testing.T) {
	for _, noContinue := range []bool{false, true} {
		t.Run("NoContinueTrace="+strconv.FormatBool(noContinue), func(t *testing.T) {
			f := newFixture(t, fixtureOptions{gateway: Options{NoContinueTrace: noContinue}})
			user := messages.ChatMessage{Role: "user", Content: "hi"}
			var tok struct {
				Tokens []int32 `json:"tokens"`
			}
			if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, map[string]any{"messages": []any{user}}).decode(&tok); err != nil {
				t.Fatal(err)
			}
			// The session's first call, recorded as the gateway records one: its reply sampled
			// two bytes that are no UTF-8.
			text := "ok \xff\xfe done"
			reply := &messages.GenerateReply{Tokens: append(toyllm.Tokenizer{}.Encode(text), toyllm.ImEndID), Text: text,
				FinishReason: "stop", EndOfTurn: true}
			reply.Logprobs = make(messages.Logprobs, len(reply.Tokens))
			l, err := f.gw.sessions.acquire("fffd", true, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			l.record(tok.Tokens, reply, user.Content, 0, time.Now())
			l.remember([]messages.ChatMessage{user}, &chatOut{Role: "assistant", Content: &text}, reply.EndOfTurn, templateSettings(&messages.ChatTokenizeRequest{AddGenerationPrompt: true}))
			trace := slices.Concat(tok.Tokens, reply.Tokens)
			l.release(true, time.Now())

			r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "fffd"}, map[string]any{
				"messages":   []any{user, map[string]any{"role": "assistant", "content": "ok \uFFFD\uFFFD done"}, map[string]any{"role": "user", "content": "more"}},
				"max_tokens": 8, "return_token_ids": true,
			})
			var out chatTurn
			if err := r.decode(&out); err != nil {
				t.Fatal(err)
			}
			extended := len(out.PromptTokenIDs) > len(trace) && slices.Equal(out.PromptTokenIDs[:len(trace)], trace)
			if drift := r.header.Get(HeaderDrift) == "true"; drift != noContinue || extended == noContinue {
				t.Fatalf("drift %v, prompt extends the trace %v; want drift %v", drift, extended, noContinue)
			}
			if !noContinue {
				want := toyllm.Tokenizer{}.Encode("\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
				if tail := out.PromptTokenIDs[len(trace):]; !slices.Equal(tail, want) {
					t.Fatalf("prompt after the trace %q, want the new user turn %q", toyllm.Tokenizer{}.Decode(tail), toyllm.Tokenizer{}.Decode(want))
				}
			}
		})
	}
}

// TestThinkingTemplateContinuesTrace runs a Qwen3 conversation of three calls (a tool call, an
// answer to the tool result, an answer to a new user message) with the real tokenizer and a
// model that reasons. The template drops the earlier turns' reasoning once the new user
// message follows, so the third call's messages no longer render to the trace: the prompt is
// the trace followed by the new user turn, and the session stays one segment, unless
// NoContinueTrace, which renders as vLLM does and starts a second segment.
func TestThinkingTemplateContinuesTrace(t *testing.T) {
	mt, err := toyllm.LoadModelTokenizer(tokenizertest.Dir(t, "qwen3"), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, noContinue := range []bool{false, true} {
		t.Run("NoContinueTrace="+strconv.FormatBool(noContinue), func(t *testing.T) {
			f := newFixture(t, fixtureOptions{toy: toyllm.Options{Tokenizer: mt, Reasoning: true},
				gateway: Options{ReasoningParser: ReasoningParserQwen3, NoContinueTrace: noContinue}})
			tools := []any{jsonValue(t, weatherTool)}
			msgs := []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}}
			var trace []int32
			for call := range 3 {
				r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "qwen"}, map[string]any{
					"messages": msgs, "tools": tools, "max_tokens": 200, "temperature": 0, "return_token_ids": true,
				})
				var out struct {
					PromptTokenIDs []int32 `json:"prompt_token_ids"`
					Choices        []struct {
						Message  map[string]any `json:"message"`
						TokenIDs []int32        `json:"token_ids"`
					} `json:"choices"`
				}
				if err := r.decode(&out); err != nil {
					t.Fatal(err)
				}
				reply := out.Choices[0].Message
				if reply["reasoning_content"] == nil || call == 0 && len(asList(reply["tool_calls"])) != 1 {
					t.Fatalf("call %d: reply %v, want reasoning, and a tool call first", call, reply)
				}
				wantDrift := noContinue && call == 2
				if got := r.header.Get(HeaderDrift); got != strconv.FormatBool(wantDrift) {
					t.Fatalf("call %d: %s %q, want %v", call, HeaderDrift, got, wantDrift)
				}
				if call == 2 {
					var plain struct {
						Tokens []int32 `json:"tokens"`
					}
					if err := f.must(t, http.StatusOK, http.MethodPost, "/tokenize", nil, map[string]any{"messages": msgs, "tools": tools}).decode(&plain); err != nil {
						t.Fatal(err)
					}
					if len(plain.Tokens) > len(trace) && slices.Equal(plain.Tokens[:len(trace)], trace) {
						t.Fatal("the template kept the earlier reasoning: nothing to continue")
					}
					if !noContinue {
						// The reply's sampled <|im_end|> closes its turn; the new user turn follows.
						tail := mt.Tokenizer().Encode("\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n", false)
						if want := slices.Concat(trace, tail); !slices.Equal(out.PromptTokenIDs, want) {
							t.Fatalf("third prompt\n%q\nwant the trace and the new user turn\n%q",
								mt.Tokenizer().Decode(out.PromptTokenIDs, false), mt.Tokenizer().Decode(want, false))
						}
					}
				}
				trace = slices.Concat(out.PromptTokenIDs, out.Choices[0].TokenIDs)
				if trace[len(trace)-1] != mt.EndOfTurn() {
					t.Fatalf("call %d: reply %q does not end its turn", call, mt.Tokenizer().Decode(out.Choices[0].TokenIDs, false))
				}
				msgs = append(msgs, reply)
				if calls := asList(reply["tool_calls"]); len(calls) > 0 {
					for _, c := range calls {
						msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.(map[string]any)["id"], "content": `{"temp_c": 21}`})
					}
				} else {
					msgs = append(msgs, map[string]any{"role": "user", "content": "And tomorrow?"})
				}
			}
			var sum summary
			if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/qwen", nil, nil).decode(&sum); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 1, true: 2}[noContinue]; sum.Calls != 3 || sum.Segments != want {
				t.Fatalf("session of %d calls in %d segments, want 3 in %d", sum.Calls, sum.Segments, want)
			}
		})
	}
}

// TestChangedToolsRenderAnew repeats a conversation with a tool added: the remembered call
// was rendered without it, so the call renders as sent (its prompt shows the tool) and starts
// a new segment rather than continuing a trace the tool is missing from.
func TestChangedToolsRenderAnew(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	hdr := map[string]string{HeaderSessionID: "tools-added"}
	msgs := []map[string]any{{"role": "user", "content": "Guess a number between 1 and 20."}}
	var first struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", hdr, map[string]any{
		"messages": msgs, "max_tokens": 32, "seed": 1}).decode(&first); err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": first.Choices[0].Message.Content},
		map[string]any{"role": "user", "content": "Higher."})
	f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", hdr, map[string]any{
		"messages": msgs, "max_tokens": 32, "seed": 2, "tools": []any{jsonValue(t, weatherTool)}, "tool_choice": "none"})
	var sum summary
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/tools-added", nil, nil).decode(&sum); err != nil || sum.Segments != 2 {
		t.Fatalf("session %+v, %v: want a second segment for the call with a tool added", sum, err)
	}
}
