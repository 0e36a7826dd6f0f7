package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
)

// choicesTurn is a chat completion with n choices, as the gateway answers it.
type choicesTurn struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Choices        []struct {
		Index     int    `json:"index"`
		SessionID string `json:"session_id"`
		Message   struct {
			Content string `json:"content"`
		} `json:"message"`
		TokenIDs []int32 `json:"token_ids"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

// TestSamplesFormAGroup checks a chat call with n = 4: four samples of one prompt, each
// recorded in its own session (the call's, then "<session>~k"), sampled as four calls with
// seeds seed+k would be, continued separately, and finished as one group.
func TestSamplesFormAGroup(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	msgs := []map[string]any{{"role": "user", "content": gamePrompt}}
	body := func(seed, n int) map[string]any {
		return map[string]any{"messages": msgs, "max_tokens": 48, "temperature": 1.0, "seed": seed, "n": n, "return_token_ids": true}
	}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "q1"}, body(11, 4))
	var turn choicesTurn
	if err := r.decode(&turn); err != nil {
		t.Fatal(err)
	}
	if len(turn.Choices) != 4 || r.header.Get(HeaderSessionID) != "q1" {
		t.Fatalf("%d choices, session %q", len(turn.Choices), r.header.Get(HeaderSessionID))
	}
	generated, _ := f.generatedFor(turn.PromptTokenIDs)
	if len(generated) != 4 {
		t.Fatalf("the model server generated %d samples of the prompt, want 4", len(generated))
	}
	completion := 0
	for k, c := range turn.Choices {
		want := "q1"
		if k > 0 {
			want = fmt.Sprintf("q1~%d", k)
		}
		if c.Index != k || c.SessionID != want {
			t.Errorf("choice %d: index %d, session %q, want %q", k, c.Index, c.SessionID, want)
		}
		completion += len(c.TokenIDs)
		// Sample k is what one call with seed 11+k samples.
		one := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: fmt.Sprintf("one-%d", k)}, body(11+k, 1))
		var single choicesTurn
		if err := one.decode(&single); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(single.Choices[0].TokenIDs, c.TokenIDs) {
			t.Errorf("choice %d sampled %v, a call with seed %d %v", k, c.TokenIDs, 11+k, single.Choices[0].TokenIDs)
		}
	}
	if turn.Usage.CompletionTokens != completion || turn.Usage.PromptTokens != len(turn.PromptTokenIDs) {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", turn.Usage, len(turn.PromptTokenIDs), completion)
	}

	// Sample 2's conversation goes on in its own session, in the same segment.
	next := append(slices.Clone(msgs),
		map[string]any{"role": "assistant", "content": turn.Choices[2].Message.Content},
		map[string]any{"role": "user", "content": feedback(1, turn.Choices[2].Message.Content)})
	r = f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "q1~2"},
		map[string]any{"messages": next, "max_tokens": 48, "return_token_ids": true})
	if r.header.Get(HeaderDrift) != "false" || r.header.Get(HeaderCall) != "1" {
		t.Errorf("second turn of sample 2: headers %v", r.header)
	}

	for k, c := range turn.Choices {
		f.must(t, http.StatusOK, http.MethodPost, "/v1/sessions/"+c.SessionID+"/finish", nil, map[string]any{"reward": float64(k)})
	}
	got := f.trajectories(t, DefaultEnv)
	for k, c := range turn.Choices {
		tr := got[c.SessionID]
		if tr == nil {
			t.Fatalf("no trajectory for sample %d", k)
		}
		if tr.GroupID != "q1" || tr.SampleIndex != int32(k) || tr.GroupSize != 4 || tr.Reward != float64(k) {
			t.Errorf("sample %d: group %q index %d size %d reward %v", k, tr.GroupID, tr.SampleIndex, tr.GroupSize, tr.Reward)
		}
		first := append(slices.Clone(turn.PromptTokenIDs), c.TokenIDs...)
		if !slices.Equal(tr.ObservationTokens[:len(first)], first) || tr.ActionRanges[0] != (messages.Range{Start: int32(len(turn.PromptTokenIDs)), End: int32(len(first))}) {
			t.Errorf("sample %d recorded %v %v, want its first turn %v", k, tr.ObservationTokens, tr.ActionRanges, first)
		}
		if wantTurns := map[bool]int32{true: 2, false: 1}[k == 2]; tr.Turns != wantTurns {
			t.Errorf("sample %d: %d turns, want %d", k, tr.Turns, wantTurns)
		}
	}
}

// TestSamplesRefused checks the calls with n > 1 the gateway refuses, and that a refused
// call leaves no session behind.
func TestSamplesRefused(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	msgs := []map[string]any{{"role": "user", "content": gamePrompt}}
	call := func(session string, n, status int) *response {
		return f.must(t, status, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: session},
			map[string]any{"messages": msgs, "max_tokens": 16, "n": n})
	}
	call("g", 2, http.StatusOK)
	// A sample of a group cannot be split again, nor the group's first session.
	for _, s := range []string{"g", "g~1"} {
		if msg := call(s, 3, http.StatusBadRequest).errorMessage(); msg == "" {
			t.Errorf("n = 3 on %q: no message", s)
		}
	}
	// A session in the way of a sample: 409, and the call's own new session is not kept.
	call("h~2", 1, http.StatusOK)
	call("h", 3, http.StatusConflict)
	f.must(t, http.StatusNotFound, http.MethodGet, "/v1/sessions/h", nil, nil)
	f.must(t, http.StatusNotFound, http.MethodGet, "/v1/sessions/h~1", nil, nil)

	// A call whose generation fails records no sample and leaves its session as it was:
	// the stand-in model refuses penalties, after the samples' sessions were opened.
	call("p", 1, http.StatusOK)
	f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/chat/completions", map[string]string{HeaderSessionID: "p"},
		map[string]any{"messages": msgs, "max_tokens": 16, "n": 3, "presence_penalty": 0.5})
	f.must(t, http.StatusNotFound, http.MethodGet, "/v1/sessions/p~1", nil, nil)
	call("p", 2, http.StatusOK)

	// The Responses API has no n.
	f.must(t, http.StatusBadRequest, http.MethodPost, "/v1/responses", nil, map[string]any{"input": "hi", "n": 2})

	// A discarded sample is a failure of its group.
	f.must(t, http.StatusOK, http.MethodDelete, "/v1/sessions/g~1", nil, nil)
	var found bool
	for _, fl := range f.failures(t) {
		if fl.EpisodeID == "g~1" {
			found = true
			if fl.GroupID != "g" {
				t.Errorf("failure of the discarded sample in group %q, want g", fl.GroupID)
			}
		}
	}
	if !found {
		t.Error("no failure record for the discarded sample")
	}
}

// TestSamplesWithoutSessionID checks n > 1 on calls that name no session: the samples'
// sessions are opened under the generated id, and a later call continuing one sample's
// conversation finds that sample's session.
func TestSamplesWithoutSessionID(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	msgs := []map[string]any{{"role": "user", "content": gamePrompt}}
	r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil,
		map[string]any{"messages": msgs, "max_tokens": 48, "n": 3, "temperature": 1.0, "seed": 5})
	var turn choicesTurn
	if err := r.decode(&turn); err != nil {
		t.Fatal(err)
	}
	auto := r.header.Get(HeaderSessionID)
	if auto == "" || len(turn.Choices) != 3 || turn.Choices[0].SessionID != auto || turn.Choices[1].SessionID != auto+"~1" {
		t.Fatalf("session %q, choices %+v", auto, turn.Choices)
	}
	for k := range turn.Choices {
		next := append(slices.Clone(msgs),
			map[string]any{"role": "assistant", "content": turn.Choices[k].Message.Content},
			map[string]any{"role": "user", "content": feedback(1, turn.Choices[k].Message.Content)})
		r := f.must(t, http.StatusOK, http.MethodPost, "/v1/chat/completions", nil, map[string]any{"messages": next, "max_tokens": 16})
		if got := r.header.Get(HeaderSessionID); got != turn.Choices[k].SessionID || r.header.Get(HeaderDrift) != "false" {
			t.Errorf("sample %d's next turn landed in %q (drift %s), want %q", k, got, r.header.Get(HeaderDrift), turn.Choices[k].SessionID)
		}
	}
}
