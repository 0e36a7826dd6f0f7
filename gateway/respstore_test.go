package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestResponseStore(t *testing.T) {
	now := time.Unix(1000, 0)
	item := func(s string) []json.RawMessage { return []json.RawMessage{json.RawMessage(fmt.Sprintf("%q", s))} }
	s := newResponseStore(time.Minute, 3, 1<<20)
	s.put("r1", "", "A", item("a"), now)
	s.put("r2", "r1", "A", item("b"), now.Add(time.Second))
	got, err := s.conversation("r2", "A", now.Add(2*time.Second))
	if err != nil || len(got) != 2 || string(got[0]) != `"a"` || string(got[1]) != `"b"` {
		t.Fatalf("conversation r2 = %s, %v", got, err)
	}
	// Another caller's response is as unknown as one never issued.
	if _, err := s.conversation("r2", "B", now.Add(2*time.Second)); err == nil {
		t.Fatal("another scope continued the response")
	}
	// Reading kept r1 and r2 alive and made them the newest: beyond the count bound the
	// oldest unread one goes first.
	s.put("x", "", "A", item("x"), now.Add(3*time.Second))
	if _, err := s.conversation("r2", "A", now.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	s.put("y", "", "A", item("y"), now.Add(5*time.Second))
	if _, err := s.conversation("x", "A", now.Add(6*time.Second)); err == nil {
		t.Fatal("x, the least recently used, is still stored")
	}
	// A conversation in use outlives the TTL of its first response.
	if _, err := s.conversation("r2", "A", now.Add(62*time.Second)); err != nil {
		t.Fatalf("a conversation read a minute ago expired: %v", err)
	}
	// Past the TTL unread, nothing is left.
	if _, err := s.conversation("r2", "A", now.Add(10*time.Minute)); err == nil || s.len() != 0 {
		t.Fatalf("after the TTL: %v, %d stored", err, s.len())
	}
	// The byte bound holds, and one part over a 64th of it is not stored.
	b := newResponseStore(time.Hour, 1000, 64*200)
	for i := range 200 {
		b.put(fmt.Sprint(i), "", "", item(strings.Repeat("x", 100)), now)
		if b.bytes > 64*200 {
			t.Fatalf("%d bytes stored, bound %d", b.bytes, 64*200)
		}
	}
	if b.put("big", "", "", item(strings.Repeat("x", 300)), now) {
		t.Fatal("a part over a 64th of the byte bound was stored")
	}
}

// TestPreviousResponseID continues a Responses conversation by its previous response, as the
// Agents SDK does: the stored input and output come first, the session's trace is extended,
// and a response stored with store false, or never, cannot be continued.
func TestPreviousResponseID(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	hdr := map[string]string{HeaderSessionID: "prev-1"}
	type output struct {
		ID     string `json:"id"`
		Output []struct {
			Type           string  `json:"type"`
			CallID         string  `json:"call_id"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
			GenTokenIDs    []int32 `json:"generation_token_ids"`
		} `json:"output"`
	}
	call := func(body map[string]any, status int) output {
		t.Helper()
		body["temperature"] = 0 // greedy: the stand-in's tool call is never cut by a slip
		r := f.must(t, status, http.MethodPost, "/v1/responses", hdr, body)
		var out output
		if status == http.StatusOK {
			if err := r.decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	tool := map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	first := call(map[string]any{"input": "Weather in Paris?", "tools": []any{tool}, "max_output_tokens": 100}, http.StatusOK)
	fc := first.Output[len(first.Output)-1]
	if fc.Type != "function_call" {
		t.Fatalf("first reply %+v, want a function call", first.Output)
	}
	second := call(map[string]any{"previous_response_id": first.ID, "tools": []any{tool}, "max_output_tokens": 100,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": fc.CallID, "output": `{"temp_c": 21}`}}}, http.StatusOK)
	last := second.Output[len(second.Output)-1]
	trace := append(slices.Clone(fc.PromptTokenIDs), fc.GenTokenIDs...)
	if len(last.PromptTokenIDs) <= len(trace) || !slices.Equal(last.PromptTokenIDs[:len(trace)], trace) {
		t.Fatalf("the continued call's prompt does not extend the first call's prompt and reply")
	}
	var sum summary
	if err := f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/prev-1", nil, nil).decode(&sum); err != nil || sum.Segments != 1 || sum.Calls != 2 {
		t.Fatalf("session %+v, %v: want one segment of two calls", sum, err)
	}
	hdr = map[string]string{HeaderSessionID: "prev-2"}
	unstored := call(map[string]any{"input": "Hi", "store": false, "max_output_tokens": 16}, http.StatusOK)
	call(map[string]any{"input": "Again", "previous_response_id": unstored.ID}, http.StatusNotFound)
	call(map[string]any{"input": "Again", "previous_response_id": "resp_nope"}, http.StatusNotFound)
}
