package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/toyllm"
)

// sseEvent is one server-sent event: its name (empty for chat and completion chunks) and data.
type sseEvent struct {
	name, data string
}

// parseEvents splits an event stream into its events.
func parseEvents(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	for block := range strings.SplitSeq(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		var e sseEvent
		for line := range strings.SplitSeq(block, "\n") {
			switch k, v, _ := strings.Cut(line, ": "); k {
			case "event":
				e.name = v
			case "data":
				e.data = v
			default:
				t.Fatalf("line %q in event stream %s", line, body)
			}
		}
		out = append(out, e)
	}
	return out
}

// streamed sends a streamed request and checks the event stream's headers.
func (f *fixture) streamed(t *testing.T, path string, header map[string]string, body map[string]any) ([]sseEvent, *response) {
	t.Helper()
	body = maps.Clone(body)
	body["stream"] = true
	r := f.must(t, http.StatusOK, http.MethodPost, path, header, body)
	if ct, cc := r.header.Get("Content-Type"), r.header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-cache" {
		t.Errorf("Content-Type %q, Cache-Control %q", ct, cc)
	}
	return parseEvents(t, r.body), r
}

// chunks decodes the data of chat or completion chunks, checking that [DONE] ends them.
func chunks[T any](t *testing.T, events []sseEvent) []T {
	t.Helper()
	if len(events) == 0 || events[len(events)-1].data != "[DONE]" {
		t.Fatalf("stream %v does not end with [DONE]", events)
	}
	out := make([]T, len(events)-1)
	for i, e := range events[:len(events)-1] {
		if e.name != "" || json.Unmarshal([]byte(e.data), &out[i]) != nil {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	return out
}

// appendText appends s to a text that may not have begun.
func appendText(p *string, s *string) *string {
	if s == nil {
		return p
	}
	v := *s
	if p != nil {
		v = *p + v
	}
	return &v
}

// reassembleChat rebuilds a chat completion from its chunks as a client library does; it
// counts the usage chunks and the chunks carrying logprobs.
func reassembleChat(t *testing.T, events []sseEvent) (resp chatResponse, usages, withLogprobs int) {
	t.Helper()
	for i, c := range chunks[chatChunk](t, events) {
		if c.Object != "chat.completion.chunk" || c.ID == "" {
			t.Errorf("chunk %d: object %q, id %q", i, c.Object, c.ID)
		}
		resp.PromptTokenIDs = append(resp.PromptTokenIDs, c.PromptTokenIDs...)
		if len(c.Choices) == 0 {
			if c.Usage == nil {
				t.Fatalf("chunk %d has neither choices nor usage", i)
			}
			resp.Usage, usages = *c.Usage, usages+1
			continue
		}
		cc := c.Choices[0]
		for len(resp.Choices) <= cc.Index {
			resp.Choices = append(resp.Choices, chatChoice{Index: len(resp.Choices), Message: chatOut{ToolCalls: []apiToolCall{}}})
		}
		ch := &resp.Choices[cc.Index]
		ch.SessionID += cc.SessionID
		d := cc.Delta
		if d.Role != "" {
			ch.Message.Role = d.Role
		}
		ch.Message.Content = appendText(ch.Message.Content, d.Content)
		ch.Message.ReasoningContent = appendText(ch.Message.ReasoningContent, d.ReasoningContent)
		ch.Message.Reasoning = appendText(ch.Message.Reasoning, d.Reasoning)
		for _, tc := range d.ToolCalls {
			if tc.Index == len(ch.Message.ToolCalls) {
				ch.Message.ToolCalls = append(ch.Message.ToolCalls, apiToolCall{})
			}
			call := &ch.Message.ToolCalls[tc.Index]
			call.ID, call.Type = cmp.Or(tc.ID, call.ID), cmp.Or(tc.Type, call.Type)
			call.Function.Name += tc.Function.Name
			call.Function.Arguments += tc.Function.Arguments
		}
		if lp := cc.Logprobs; lp != nil {
			if ch.Logprobs == nil {
				ch.Logprobs = &chatLogprobs{Content: []chatLogprob{}}
			}
			ch.Logprobs.Content = append(ch.Logprobs.Content, lp.Content...)
			withLogprobs++
		}
		ch.TokenIDs = append(ch.TokenIDs, cc.TokenIDs...)
		if fr := cc.FinishReason; fr != nil {
			ch.FinishReason = *fr
		}
	}
	return resp, usages, withLogprobs
}

// reassembleCompletion rebuilds a completion from its chunks.
func reassembleCompletion(t *testing.T, events []sseEvent) (completionResponse, int) {
	t.Helper()
	var resp completionResponse
	usages := 0
	for i, c := range chunks[completionChunk](t, events) {
		if c.Object != "text_completion" || c.ID == "" {
			t.Errorf("chunk %d: object %q, id %q", i, c.Object, c.ID)
		}
		if len(c.Choices) == 0 {
			resp.Usage, usages = *c.Usage, usages+1
			continue
		}
		cc := c.Choices[0]
		for len(resp.Choices) <= cc.Index {
			resp.Choices = append(resp.Choices, completionChoice{Index: len(resp.Choices)})
		}
		ch := &resp.Choices[cc.Index]
		ch.SessionID += cc.SessionID
		ch.Text += cc.Text
		if lp := cc.Logprobs; lp != nil {
			if ch.Logprobs == nil {
				ch.Logprobs = &completionLogprobs{}
			}
			ch.Logprobs.TextOffset = append(ch.Logprobs.TextOffset, lp.TextOffset...)
			ch.Logprobs.TokenLogprobs = append(ch.Logprobs.TokenLogprobs, lp.TokenLogprobs...)
			ch.Logprobs.Tokens = append(ch.Logprobs.Tokens, lp.Tokens...)
			ch.Logprobs.TopLogprobs = append(ch.Logprobs.TopLogprobs, lp.TopLogprobs...)
		}
		ch.TokenIDs = append(ch.TokenIDs, cc.TokenIDs...)
		ch.PromptTokenIDs = append(ch.PromptTokenIDs, cc.PromptTokenIDs...)
		if cc.FinishReason != nil {
			ch.FinishReason = *cc.FinishReason
		}
	}
	return resp, usages
}

// reassembleResponse rebuilds a response's output items from the streamed events' deltas and
// returns them with the response that response.completed (or .incomplete) carries.
func reassembleResponse(t *testing.T, events []sseEvent) (items []outputItem, final responseObject) {
	t.Helper()
	for i, e := range events {
		var ev struct {
			Type           string          `json:"type"`
			SequenceNumber int             `json:"sequence_number"`
			Response       *responseObject `json:"response"`
			OutputIndex    int             `json:"output_index"`
			Item           outputItem      `json:"item"`
			Delta          string          `json:"delta"`
		}
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil || ev.Type != e.name || ev.SequenceNumber != i {
			t.Fatalf("event %d: %+v (%v)", i, e, err)
		}
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response == nil || ev.Response.Status != "in_progress" || len(ev.Response.Output) != 0 || i > 1 {
				t.Errorf("event %d: %s", i, e.data)
			}
		case "response.output_item.added":
			it := ev.Item
			it.Content, it.Summary = nil, nil
			items = append(items, it)
		case "response.content_part.added":
			items[ev.OutputIndex].Content = append(items[ev.OutputIndex].Content, outputText{Type: "output_text", Annotations: []any{}})
		case "response.output_text.delta":
			items[ev.OutputIndex].Content[0].Text += ev.Delta
		case "response.reasoning_summary_part.added":
			items[ev.OutputIndex].Summary = append(items[ev.OutputIndex].Summary, summaryText{Type: "summary_text"})
		case "response.reasoning_summary_text.delta":
			items[ev.OutputIndex].Summary[0].Text += ev.Delta
		case "response.function_call_arguments.delta":
			*items[ev.OutputIndex].Arguments += ev.Delta
		case "response.output_item.done":
			items[ev.OutputIndex].Status = ev.Item.Status
			items[ev.OutputIndex].PromptTokenIDs = ev.Item.PromptTokenIDs
			items[ev.OutputIndex].GenerationTokenIDs = ev.Item.GenerationTokenIDs
			items[ev.OutputIndex].GenerationLogProbs = ev.Item.GenerationLogProbs
		case "response.completed", "response.incomplete":
			if i != len(events)-1 {
				t.Fatalf("%s is event %d of %d", ev.Type, i, len(events))
			}
			final = *ev.Response
		case "response.output_text.done", "response.content_part.done", "response.reasoning_summary_text.done",
			"response.reasoning_summary_part.done", "response.function_call_arguments.done":
		default:
			t.Errorf("event %d: unknown type %q", i, ev.Type)
		}
	}
	return items, final
}

// anonymous blanks what differs between two calls' answers by nature: ids and times.
func anonymous[T any](t *testing.T, v T) T {
	t.Helper()
	switch x := any(&v).(type) {
	case *chatResponse:
		x.ID, x.Created, x.Object, x.Model = "", 0, "", ""
		x.Choices = slices.Clone(x.Choices)
		for k := range x.Choices {
			x.Choices[k].SessionID = anonymousSession(t, x.Choices[k].SessionID, len(x.Choices), k)
			x.Choices[k].Message.ToolCalls = slices.Clone(x.Choices[k].Message.ToolCalls)
			for i := range x.Choices[k].Message.ToolCalls {
				tc := &x.Choices[k].Message.ToolCalls[i]
				if tc.ID == "" {
					t.Errorf("tool call %d without an id", i)
				}
				tc.ID = ""
			}
		}
	case *completionResponse:
		x.ID, x.Created, x.Object, x.Model = "", 0, "", ""
		x.Choices = slices.Clone(x.Choices)
		for k := range x.Choices {
			x.Choices[k].SessionID = anonymousSession(t, x.Choices[k].SessionID, len(x.Choices), k)
		}
	case *responseObject:
		x.ID, x.CreatedAt = "", 0
		x.Output = anonymousItems(t, x.Output)
	}
	return v
}

// anonymousSession checks the session of choice k of n: none for n = 1, else the call's
// session for the first and "<session>~k" for the others; it returns the part they share.
func anonymousSession(t *testing.T, id string, n, k int) string {
	t.Helper()
	switch {
	case n == 1 && id != "":
		t.Errorf("choice of a call with n = 1 names session %q", id)
	case n > 1 && k == 0 && (id == "" || strings.Contains(id, ForkSuffix)):
		t.Errorf("choice 0 of %d names session %q", n, id)
	case n > 1 && k > 0 && !strings.HasSuffix(id, fmt.Sprintf("%s%d", ForkSuffix, k)):
		t.Errorf("choice %d of %d names session %q", k, n, id)
	}
	return ""
}

func anonymousItems(t *testing.T, items []outputItem) []outputItem {
	items = slices.Clone(items)
	for i := range items {
		if items[i].ID == "" {
			t.Errorf("output item %d without an id", i)
		}
		items[i].ID = ""
		if items[i].CallID != "" {
			items[i].CallID = "call"
		}
	}
	return items
}

// weatherTools offers one function in the chat API's shape.
var weatherTools = []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather of a city",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}}}

// TestStreamReassembles checks that a streamed answer reassembles to exactly the answer of
// the same request unstreamed (content, reasoning, tool calls, logprobs, token ids, finish
// reason, usage), and that both calls record the same tokens in their sessions.
func TestStreamReassembles(t *testing.T) {
	f := newFixture(t, fixtureOptions{gateway: Options{ReasoningParser: ReasoningParserQwen3}})
	user := []map[string]any{{"role": "user", "content": "Paris"}}
	thinking := map[string]any{"enable_thinking": true}
	tests := []struct {
		name, path string
		body       map[string]any
		wantTool   bool
	}{
		{"chat", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 40}, false},
		{"chat logprobs token ids usage", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 40, "logprobs": true,
			"return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}, false},
		{"chat length", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 3, "logprobs": true}, false},
		{"chat reasoning tools", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 200, "tools": weatherTools,
			"chat_template_kwargs": thinking, "logprobs": true, "return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}, true},
		{"chat tools", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 200, "tools": weatherTools,
			"chat_template_kwargs": map[string]any{"enable_thinking": false}}, true},
		{"chat n=3", "/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 40, "n": 3, "logprobs": true,
			"return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}, false},
		{"completion", "/v1/completions", map[string]any{"prompt": "Once upon", "max_tokens": 12}, false},
		{"completion n=2", "/v1/completions", map[string]any{"prompt": "Once upon", "max_tokens": 12, "n": 2, "logprobs": 0,
			"return_token_ids": true}, false},
		{"completion logprobs token ids usage", "/v1/completions", map[string]any{"prompt": "Once upon", "max_tokens": 12, "logprobs": 0,
			"return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}, false},
		{"responses", "/v1/responses", map[string]any{"input": "Paris", "max_output_tokens": 40}, false},
		{"responses length", "/v1/responses", map[string]any{"input": "Paris", "max_output_tokens": 3}, false},
		{"responses reasoning tools", "/v1/responses", map[string]any{"input": "Paris", "max_output_tokens": 200, "chat_template_kwargs": thinking,
			"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}}}, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := maps.Clone(tc.body)
			body["seed"], body["temperature"] = 7+i, 1.0
			plainID, streamID := fmt.Sprintf("plain-%d", i), fmt.Sprintf("stream-%d", i)
			unstreamed := body
			if _, ok := body["stream_options"]; ok {
				unstreamed = maps.Clone(body)
				delete(unstreamed, "stream_options")
			}
			plain := f.must(t, http.StatusOK, http.MethodPost, tc.path, map[string]string{HeaderSessionID: plainID}, unstreamed)
			events, r := f.streamed(t, tc.path, map[string]string{HeaderSessionID: streamID}, body)
			if r.header.Get(HeaderSessionID) != streamID || r.header.Get(HeaderCall) != "0" {
				t.Errorf("session headers %v", r.header)
			}
			_, wantUsage := body["stream_options"]
			sawTool := false
			switch tc.path {
			case "/v1/chat/completions":
				var want chatResponse
				if err := plain.decode(&want); err != nil {
					t.Fatal(err)
				}
				got, usages, pieces := reassembleChat(t, events)
				tokens := 0
				for _, c := range want.Choices {
					if c.Logprobs != nil {
						tokens += len(c.Logprobs.Content)
					}
				}
				if want.Choices[0].Logprobs != nil && pieces != tokens {
					t.Errorf("%d chunks carry the logprobs of %d tokens, want one per token", pieces, tokens)
				}
				if !wantUsage {
					got.Usage = want.Usage
				}
				if usages != map[bool]int{true: 1, false: 0}[wantUsage] {
					t.Errorf("%d usage chunks", usages)
				}
				got.PromptLogprobs, got.KVTransferParams = want.PromptLogprobs, want.KVTransferParams
				if g, w := anonymous(t, got), anonymous(t, want); !reflect.DeepEqual(g, w) {
					t.Errorf("streamed chat reassembles to\n%+v\nwant\n%+v", g.Choices[0], w.Choices[0])
				}
				sawTool = len(want.Choices[0].Message.ToolCalls) > 0
			case "/v1/completions":
				var want completionResponse
				if err := plain.decode(&want); err != nil {
					t.Fatal(err)
				}
				got, usages := reassembleCompletion(t, events)
				if !wantUsage {
					got.Usage = want.Usage
				}
				if usages != map[bool]int{true: 1, false: 0}[wantUsage] {
					t.Errorf("%d usage chunks", usages)
				}
				if g, w := anonymous(t, got), anonymous(t, want); !reflect.DeepEqual(g, w) {
					t.Errorf("streamed completion reassembles to\n%+v\nwant\n%+v", g, w)
				}
			case "/v1/responses":
				var want responseObject
				if err := plain.decode(&want); err != nil {
					t.Fatal(err)
				}
				items, final := reassembleResponse(t, events)
				if g, w := anonymous(t, final), anonymous(t, want); !reflect.DeepEqual(g, w) {
					t.Errorf("streamed response ends with\n%+v\nwant\n%+v", g, w)
				}
				if g, w := anonymousItems(t, items), anonymousItems(t, want.Output); !reflect.DeepEqual(g, w) {
					t.Errorf("streamed items reassemble to\n%+v\nwant\n%+v", g, w)
				}
				for _, it := range want.Output {
					sawTool = sawTool || it.Type == "function_call"
				}
			}
			if sawTool != tc.wantTool {
				t.Errorf("tool call made: %v, want %v", sawTool, tc.wantTool)
			}
			n, _ := body["n"].(int)
			n = max(n, 1)
			sessions := func(id string) []string {
				out := []string{id}
				for k := 1; k < n; k++ {
					out = append(out, fmt.Sprintf("%s%s%d", id, ForkSuffix, k))
				}
				return out
			}
			for _, id := range append(sessions(plainID), sessions(streamID)...) {
				f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/"+id+"/finish", nil, map[string]any{"reward": 1})
			}
			got := f.trajectories(t, DefaultEnv)
			for k, plainSample := range sessions(plainID) {
				a, b := got[plainSample], got[sessions(streamID)[k]]
				if a == nil || b == nil || a.Turns != 1 || b.Turns != 1 || a.SampleIndex != int32(k) || a.GroupSize != int32(n) ||
					a.GroupID != plainID || b.GroupID != streamID {
					t.Fatalf("sample %d: trajectories %+v and %+v", k, a, b)
				}
				if !slices.Equal(a.ObservationTokens, b.ObservationTokens) || !reflect.DeepEqual(a.ActionRanges, b.ActionRanges) ||
					!slices.Equal(a.RolloutLogProbs, b.RolloutLogProbs) || a.FinishReason != b.FinishReason {
					t.Errorf("streamed call recorded %v %v, unstreamed %v %v", b.ObservationTokens, b.ActionRanges, a.ObservationTokens, a.ActionRanges)
				}
			}
		})
	}
}

// TestStreamRequests checks the stream options the gateway takes and refuses.
func TestStreamRequests(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	user := []map[string]any{{"role": "user", "content": "hi"}}
	tests := []struct {
		name, path string
		body       map[string]any
		want       string
	}{
		{"chat options without stream", "/v1/chat/completions", map[string]any{"messages": user, "stream_options": map[string]any{"include_usage": true}}, "stream_options"},
		{"completion options without stream", "/v1/completions", map[string]any{"prompt": "hi", "stream_options": map[string]any{}}, "stream_options"},
		{"responses options without stream", "/v1/responses", map[string]any{"input": "hi", "stream_options": map[string]any{}}, "stream_options"},
		{"continuous usage", "/v1/chat/completions", map[string]any{"messages": user, "stream": true,
			"stream_options": map[string]any{"continuous_usage_stats": true}}, "continuous_usage_stats"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.must(t, http.StatusBadRequest, http.MethodPost, tc.path, nil, tc.body)
			if !strings.Contains(r.errorMessage(), tc.want) {
				t.Errorf("got %s, want a message naming %s", r, tc.want)
			}
		})
	}
	// A streamed request refused before generating gets an ordinary error answer.
	f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/chat/completions", nil, map[string]any{"messages": user, "stream": true, "top_p": 0})
	// A chat stream without include_usage ends with the finish chunk and [DONE].
	events, _ := f.streamed(t, "/v1/chat/completions", nil, map[string]any{"messages": user, "max_tokens": 4})
	cs := chunks[chatChunk](t, events)
	last := cs[len(cs)-1]
	if len(last.Choices) != 1 || last.Choices[0].FinishReason == nil || last.Usage != nil {
		t.Errorf("last chunk %+v, want the finish chunk", last)
	}
	if d := cs[0].Choices[0].Delta; d.Role != "assistant" || cs[0].Choices[0].FinishReason != nil {
		t.Errorf("first chunk %+v, want the assistant role", cs[0])
	}
}

// TestStreamDisconnect checks that a client going away mid-stream or before its answer
// leaves its session with the whole call recorded, or none of it, and the session usable.
func TestStreamDisconnect(t *testing.T) {
	f := newFixture(t, fixtureOptions{toy: toyllm.Options{TokenLatency: 20 * time.Millisecond}})
	tests := []struct {
		name string
		// afterFirstEvent cancels once the first event is read; otherwise once the session
		// is busy generating, before any byte of the answer.
		afterFirstEvent bool
		wantCalls       int
	}{
		{"after the first event", true, 1},
		{"while generating", false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "gone-" + strings.ReplaceAll(tc.name, " ", "-")
			body, _ := json.Marshal(map[string]any{"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": true, "logprobs": 0, "stream": true})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/completions", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(HeaderSessionID, id)
			done := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					done <- err
					return
				}
				defer resp.Body.Close()
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err == nil && !strings.HasPrefix(line, "data: {") {
					err = fmt.Errorf("first line %q", line)
				}
				cancel()
				_, _ = io.Copy(io.Discard, resp.Body)
				done <- err
			}()
			if !tc.afterFirstEvent {
				bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
					if s, err := f.gw.sessions.summary(id, time.Now()); err != nil || !s.Busy {
						return fmt.Errorf("session not generating yet: %v", err)
					}
					return nil
				})
				cancel()
			}
			err = <-done
			if tc.afterFirstEvent && err != nil {
				t.Fatal(err)
			}
			var s summary
			bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
				s, err = f.gw.sessions.summary(id, time.Now())
				switch {
				case errors.Is(err, ErrSessionNotFound):
					s = summary{} // the session opened for the call closed with nothing recorded
				case err != nil || s.Busy:
					return fmt.Errorf("session still busy: %v", err)
				}
				return nil
			})
			if s.Calls != tc.wantCalls {
				t.Fatalf("session %+v, want %d calls recorded", s, tc.wantCalls)
			}
			// The session takes its next call, and its trajectory holds whole calls only.
			next := f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", map[string]string{HeaderSessionID: id},
				map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": true})
			if next.header.Get(HeaderCall) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("next call is call %s, want %d", next.header.Get(HeaderCall), tc.wantCalls)
			}
			f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/"+id+"/finish", nil, map[string]any{"reward": 0})
			tr := f.trajectories(t, DefaultEnv)[id]
			if tr == nil {
				t.Fatal("no trajectory")
			}
			if len(tr.ActionRanges) < 1 || int(tr.ActionRanges[0].End-tr.ActionRanges[0].Start) != map[int]int{1: 24, 0: 4}[tc.wantCalls] {
				t.Errorf("action ranges %v, want the first call whole", tr.ActionRanges)
			}
		})
	}
}
