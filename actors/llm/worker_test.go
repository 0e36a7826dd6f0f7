package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// post sends a JSON body straight to a model server and decodes the answer
// into out.
func post(t *testing.T, url string, body map[string]any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
}

// direct is a completion asked of the model server over plain HTTP, as
// vLLM's API documents it, without the worker's client.
type direct struct {
	ids      []int32
	logprobs []float32
	text     string
	finish   string
}

func completeDirect(t *testing.T, url string, req *messages.GenerateRequest) direct {
	t.Helper()
	sp := req.Sampling
	body := map[string]any{
		"prompt": req.Prompt, "max_tokens": req.MaxTokens, "temperature": sp.Temperature,
		"logprobs": 0, "return_token_ids": true, "skip_special_tokens": false,
	}
	if sp.TopP != 0 {
		body["top_p"] = sp.TopP
	}
	if sp.TopK != 0 {
		body["top_k"] = sp.TopK
	}
	if sp.Seed != nil {
		body["seed"] = *sp.Seed
	}
	var r struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason string  `json:"finish_reason"`
			TokenIDs     []int32 `json:"token_ids"`
			Logprobs     struct {
				// Numbers, so that each is read as the float32 it was
				// written from, not through a float64.
				TokenLogprobs []json.Number `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	post(t, url+"/v1/completions", body, &r)
	if len(r.Choices) != 1 {
		t.Fatalf("%d choices", len(r.Choices))
	}
	c := r.Choices[0]
	d := direct{ids: c.TokenIDs, text: c.Text, finish: c.FinishReason}
	for _, n := range c.Logprobs.TokenLogprobs {
		f, err := strconv.ParseFloat(n.String(), 32)
		if err != nil {
			t.Fatal(err)
		}
		d.logprobs = append(d.logprobs, float32(f))
	}
	return d
}

func TestGenerateMatchesModel(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	w := f.start(t, Options{}, m)
	for _, tc := range []struct {
		name     string
		sampling messages.SamplingParams
		max      int32
		finish   string
		eot      bool
	}{
		{"sampled turn", messages.SamplingParams{Temperature: 1, Seed: new(int64(1))}, 200, "stop", true},
		{"greedy turn", messages.SamplingParams{Temperature: 0}, 200, "stop", true},
		{"top-p and top-k", messages.SamplingParams{Temperature: 0.8, TopP: 0.9, TopK: 20, Seed: new(int64(7))}, 200, "stop", true},
		{"cut by max_tokens", messages.SamplingParams{Temperature: 1, Seed: new(int64(3))}, 4, "length", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &messages.GenerateRequest{
				V: messages.Version, EpisodeID: "ep", Turn: 2, Prompt: gamePrompt(), Sampling: tc.sampling, MaxTokens: tc.max,
			}
			rep := f.generate(t, req)
			if rep.Error != "" {
				t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
			}
			want := completeDirect(t, m.url, req)
			if !slices.Equal(rep.Tokens, want.ids) || !slices.Equal(rep.Logprobs, want.logprobs) {
				t.Errorf("reply differs from the model's own answer:\n tokens %v\n  model %v\nlogprobs %v\n   model %v",
					rep.Tokens, want.ids, rep.Logprobs, want.logprobs)
			}
			if rep.Text != want.text || rep.FinishReason != want.finish || rep.Endpoint != m.url {
				t.Errorf("text %q finish %q endpoint %q, model says %q %q at %q", rep.Text, rep.FinishReason, rep.Endpoint, want.text, want.finish, m.url)
			}
			// The cases are chosen so that the model ends its turn on
			// <|im_end|> unless max_tokens cuts it.
			last := rep.Tokens[len(rep.Tokens)-1]
			if rep.FinishReason != tc.finish || (last == toyllm.ImEndID) != tc.eot {
				t.Fatalf("finish %q, last token %d: the case does not test what it should", rep.FinishReason, last)
			}
			if rep.EndOfTurn != tc.eot {
				t.Errorf("EndOfTurn = %v, want %v", rep.EndOfTurn, tc.eot)
			}
		})
	}
	if st := w.Stats(); st.Generate != 4 || st.Errors != 0 || st.Retries != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestTokenizeMatchesModel(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	f.start(t, Options{}, m)
	msgs := []messages.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Guess a number."}}
	jsonMsgs := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Guess a number."}}
	for _, tc := range []struct {
		name   string
		req    messages.TokenizeRequest
		direct map[string]any
	}{
		{
			"feedback text",
			messages.TokenizeRequest{Text: "\n" + chat.ImStart + "user\nAt turn 1, you guessed 10.\\boxed{}" + chat.ImEnd + "\n"},
			map[string]any{"prompt": "\n" + chat.ImStart + "user\nAt turn 1, you guessed 10.\\boxed{}" + chat.ImEnd + "\n", "add_special_tokens": false},
		},
		{
			"messages with generation prompt",
			messages.TokenizeRequest{Messages: msgs, AddGenerationPrompt: true},
			map[string]any{"messages": jsonMsgs, "add_generation_prompt": true},
		},
		{
			"messages without generation prompt",
			messages.TokenizeRequest{Messages: msgs},
			map[string]any{"messages": jsonMsgs, "add_generation_prompt": false},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.V, req.EpisodeID = messages.Version, "ep"
			rep := f.tokenize(t, &req)
			if rep.Error != "" {
				t.Fatalf("error reply: %s (%s)", rep.Error, rep.Code)
			}
			var want struct {
				Tokens []int32 `json:"tokens"`
			}
			post(t, m.url+"/tokenize", tc.direct, &want)
			if len(want.Tokens) == 0 || !slices.Equal(rep.Tokens, want.Tokens) {
				t.Errorf("tokens %v, model says %v", rep.Tokens, want.Tokens)
			}
		})
	}
}

// TestStickyRouting checks that every turn of an episode reaches the same
// model server, whichever of two workers answers it, and that episodes
// spread over the servers.
func TestStickyRouting(t *testing.T) {
	f := newFixture(t)
	models := []*model{newModel(t, toyllm.Options{}, nil), newModel(t, toyllm.Options{}, nil), newModel(t, toyllm.Options{}, nil)}
	workers := []*running{f.start(t, Options{}, models...), f.start(t, Options{}, models...)}
	const episodes, turns = 60, 3
	perURL := map[string]int{}
	for e := range episodes {
		id := fmt.Sprintf("episode-%d", e)
		first := ""
		for turn := range int32(turns) {
			req := generateRequest(id, int64(e))
			req.Turn = turn
			rep := f.generate(t, req)
			if rep.Error != "" {
				t.Fatalf("%s turn %d: %s", id, turn, rep.Error)
			}
			if turn == 0 {
				first = rep.Endpoint
			} else if rep.Endpoint != first {
				t.Errorf("%s: turn %d went to %s, turn 0 to %s", id, turn, rep.Endpoint, first)
			}
			perURL[rep.Endpoint]++
		}
	}
	for i, m := range models {
		if got := len(m.completions()); got != perURL[m.url] || got == 0 || got%turns != 0 {
			t.Errorf("model %d served %d completions; replies name it for %d", i, got, perURL[m.url])
		}
	}
	for i, w := range workers {
		if st := w.Stats(); st.Generate == 0 {
			t.Errorf("worker %d answered nothing; the test shows no agreement between workers", i)
		}
	}
}

// TestOverloadGoesElsewhere fills the sticky server of an episode: another
// episode that prefers it must be served by a free one.
func TestOverloadGoesElsewhere(t *testing.T) {
	f := newFixture(t)
	busy := newModel(t, toyllm.Options{}, func(m *model) { m.hold = make(chan struct{}) })
	models := []*model{newModel(t, toyllm.Options{}, nil), busy, newModel(t, toyllm.Options{}, nil)}
	f.start(t, Options{MaxInFlight: 1}, models...)
	ids := preferring(urls(models...), 1, 2)

	first := make(chan *messages.GenerateReply, 1)
	go func() {
		data, _ := messages.Marshal(generateRequest(ids[0], 1))
		rep, err := decodeReply[messages.GenerateReply](f.nc.Request(f.subj.Generate(), data, waitTimeout))
		if err != nil {
			t.Error(err)
		}
		first <- rep
	}()
	select {
	case <-busy.entered:
	case <-time.After(waitTimeout):
		t.Fatal("the first episode never reached its sticky server")
	}

	rep := f.generate(t, generateRequest(ids[1], 2))
	if rep.Error != "" || len(rep.Tokens) == 0 {
		t.Fatalf("second episode: %s (%s)", rep.Error, rep.Code)
	}
	if rep.Endpoint == busy.url {
		t.Errorf("second episode went to the full server")
	}
	close(busy.hold)
	if rep := <-first; rep == nil || rep.Error != "" || rep.Endpoint != busy.url {
		t.Errorf("first episode: %+v, want a reply from its sticky server", rep)
	}
	if n := len(busy.completions()); n != 1 {
		t.Errorf("the full server got %d completions, want 1", n)
	}
}

// TestInFlightBound sends more requests than an episode's sticky server
// may take at once: no more than MaxInFlight may reach it together, the
// rest go to the other server, and all are answered.
func TestInFlightBound(t *testing.T) {
	f := newFixture(t)
	// Both servers hold completions through the same channels, so the
	// test releases them one at a time in arrival order.
	hold, entered := make(chan struct{}), make(chan struct{}, 64)
	shared := func(m *model) { m.hold, m.entered = hold, entered }
	sticky, spare := newModel(t, toyllm.Options{}, shared), newModel(t, toyllm.Options{}, shared)
	const limit, requests = 2, 8
	f.start(t, Options{MaxInFlight: limit}, sticky, spare)
	ids := preferring(urls(sticky, spare), 0, requests)

	replies := make(chan *messages.GenerateReply, requests)
	for i, id := range ids {
		go func() {
			data, _ := messages.Marshal(generateRequest(id, int64(i)))
			rep, err := decodeReply[messages.GenerateReply](f.nc.Request(f.subj.Generate(), data, waitTimeout))
			if err != nil {
				t.Error(err)
			}
			replies <- rep
		}()
	}
	// Release a completion only once another has arrived while both
	// servers are as full as the worker lets them be, so that a worker
	// without the bound would show more than limit at the sticky server.
	const capacity = 2 * limit
	for i := range requests {
		select {
		case <-entered:
		case <-time.After(waitTimeout):
			t.Fatalf("only %d completions reached the servers", i)
		}
		if i >= capacity-1 {
			hold <- struct{}{}
		}
	}
	for range capacity - 1 {
		hold <- struct{}{}
	}
	for range requests {
		if rep := <-replies; rep == nil || rep.Error != "" || len(rep.Tokens) == 0 {
			t.Errorf("reply %+v", rep)
		}
	}
	if p, q := sticky.peakInFlight(), spare.peakInFlight(); p != limit || q > limit {
		t.Errorf("at most %d and %d completions at once at the sticky and the spare server, want %d and at most %d", p, q, limit, limit)
	}
}

// TestFailover breaks an episode's sticky server in each way an
// infrastructure failure shows: the request must succeed on the other
// server with the identical prompt, and the broken server must be left
// alone afterwards.
func TestFailover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*model)
		// refused closes the server before the request, so it receives
		// nothing.
		refused bool
	}{
		{name: "503", setup: func(m *model) { m.down.Store(true) }},
		{name: "500", setup: func(m *model) {
			m.fault = func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, `{"object":"error","message":"engine dead","type":"InternalServerError","code":500}`)
			}
		}},
		{name: "truncated body", setup: func(m *model) {
			m.fault = func(w http.ResponseWriter, _ *http.Request) {
				io.WriteString(w, `{"choices": [{"text": "oops", "token_ids": [1,2`)
			}
		}},
		{name: "logprobs missing", setup: func(m *model) {
			m.fault = func(w http.ResponseWriter, _ *http.Request) {
				io.WriteString(w, `{"choices":[{"text":"ab","token_ids":[97,98],"finish_reason":"stop",`+
					`"logprobs":{"token_logprobs":[-0.5],"tokens":["token_id:97"]}}]}`)
			}
		}},
		{name: "stalled past the call timeout", setup: func(m *model) {
			m.fault = func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
		}},
		{name: "refused", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			bad := newModel(t, toyllm.Options{}, tc.setup)
			good := newModel(t, toyllm.Options{}, nil)
			if tc.refused {
				bad.srv.Close()
			}
			// A long health interval keeps the broken server marked down
			// for the whole test.
			w := f.start(t, Options{CallTimeout: time.Second, HealthInterval: time.Hour}, bad, good)
			ids := preferring(urls(bad, good), 0, 2)

			req := generateRequest(ids[0], 1)
			rep := f.generate(t, req)
			if rep.Error != "" || rep.Endpoint != good.url {
				t.Fatalf("reply from %s: %q (%s), want a reply from the healthy server", rep.Endpoint, rep.Error, rep.Code)
			}
			want := [][]int32{req.Prompt}
			if got := good.completions(); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("healthy server got prompts %v, want %v", got, want)
			}
			if got := bad.completions(); !tc.refused && !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("broken server got prompts %v, want %v", got, want)
			}

			// The broken server is marked down: the next episode that
			// prefers it does not try it.
			if rep := f.generate(t, generateRequest(ids[1], 2)); rep.Error != "" || rep.Endpoint != good.url {
				t.Errorf("second episode: reply from %s: %q", rep.Endpoint, rep.Error)
			}
			if n := len(bad.completions()); !tc.refused && n != 1 {
				t.Errorf("broken server got %d completions, want 1", n)
			}
			if st := w.Stats(); st.Retries != 1 || st.Errors != 0 {
				t.Errorf("stats %+v, want one retry", st)
			}
		})
	}
}

// TestAllServersFail checks the reply when no server can answer.
func TestAllServersFail(t *testing.T) {
	f := newFixture(t)
	a := newModel(t, toyllm.Options{}, func(m *model) { m.down.Store(true) })
	b := newModel(t, toyllm.Options{}, func(m *model) { m.down.Store(true) })
	w := f.start(t, Options{HealthInterval: time.Hour}, a, b)
	rep := f.generate(t, generateRequest("ep", 1))
	if rep.Code != messages.CodeUnavailable || rep.Error == "" || len(rep.Tokens) != 0 {
		t.Errorf("reply %+v, want an unavailable error", rep)
	}
	if na, nb := len(a.completions()), len(b.completions()); na != 1 || nb != 1 {
		t.Errorf("servers got %d and %d completions, want each tried once", na, nb)
	}
	if st := w.Stats(); st.Errors != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestRequestErrorsAreNotRetried checks errors that another server cannot
// fix: the reply says why, and no other server is asked.
func TestRequestErrorsAreNotRetried(t *testing.T) {
	short := toyllm.Options{MaxModelLen: 64}
	for _, tc := range []struct {
		name   string
		opts   Options
		prompt []int32
		code   string
		calls  int // completions the sticky server sees
	}{
		// The worker knows the model's window from /v1/models, so a prompt
		// that fills it is answered without a call.
		{"context length", Options{}, gamePrompt(), messages.CodeContextLength, 0},
		{"token out of vocabulary", Options{}, []int32{1, 2, toyllm.VocabSize}, messages.CodeInvalid, 1},
		{"unknown model", Options{Model: "no-such-model"}, []int32{1, 2, 3}, messages.CodeInvalid, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			models := []*model{newModel(t, short, nil), newModel(t, short, nil)}
			w := f.start(t, tc.opts, models...)
			ids := preferring(urls(models...), 1, 1)
			req := generateRequest(ids[0], 1)
			req.Prompt, req.MaxTokens = tc.prompt, 16
			if len(gamePrompt())+16 <= short.MaxModelLen {
				t.Fatal("the game prompt fits the short context; the test proves nothing")
			}
			rep := f.generate(t, req)
			if rep.Code != tc.code || rep.Error == "" || rep.Endpoint != models[1].url {
				t.Errorf("reply %+v, want code %q from the sticky server", rep, tc.code)
			}
			if n0, n1 := len(models[0].completions()), len(models[1].completions()); n0 != 0 || n1 != tc.calls {
				t.Errorf("servers got %d and %d completions, want %d, from the sticky one only", n0, n1, tc.calls)
			}
			if st := w.Stats(); st.Retries != 0 || st.Errors != 1 {
				t.Errorf("stats %+v, want one error and no retry", st)
			}
		})
	}
}

// TestContextLengthKeepsServer checks that a prompt too long for the model
// does not mark its server down.
func TestContextLengthKeepsServer(t *testing.T) {
	f := newFixture(t)
	short := toyllm.Options{MaxModelLen: 64}
	models := []*model{newModel(t, short, nil), newModel(t, short, nil)}
	f.start(t, Options{HealthInterval: time.Hour}, models...)
	ids := preferring(urls(models...), 0, 1)
	long := generateRequest(ids[0], 1)
	if rep := f.generate(t, long); rep.Code != messages.CodeContextLength {
		t.Fatalf("reply %+v, want a context-length error", rep)
	}
	fits := generateRequest(ids[0], 1)
	fits.Prompt, fits.MaxTokens = fits.Prompt[len(fits.Prompt)-16:], 8
	if rep := f.generate(t, fits); rep.Error != "" || rep.Endpoint != models[0].url {
		t.Errorf("reply from %s: %q, want a reply from the sticky server", rep.Endpoint, rep.Error)
	}
}

// TestHealthLoopRestoresServer takes an episode's sticky server down and
// brings it back: the health checks must mark it down before any request
// finds it dead, the worker must route around it while it is down, and
// return to it once its health check passes.
func TestHealthLoopRestoresServer(t *testing.T) {
	f := newFixture(t)
	flaky := newModel(t, toyllm.Options{}, func(m *model) { m.down.Store(true) })
	other := newModel(t, toyllm.Options{}, nil)
	w := f.start(t, Options{HealthInterval: 5 * time.Millisecond}, flaky, other)
	id := preferring(urls(flaky, other), 0, 1)[0]

	healthy := func(want bool) func() error {
		return func() error {
			if got := w.Endpoints()[0].Healthy; got != want {
				return fmt.Errorf("%s healthy: %v", flaky.url, got)
			}
			return nil
		}
	}
	bustest.CheckFor(t, waitTimeout, time.Millisecond, healthy(false))
	for seed := range int64(2) {
		if rep := f.generate(t, generateRequest(id, seed)); rep.Error != "" || rep.Endpoint != other.url {
			t.Fatalf("reply from %s: %q, want the other server while the sticky one is down", rep.Endpoint, rep.Error)
		}
	}
	if n := len(flaky.completions()); n != 0 {
		t.Fatalf("the down server got %d completions, want none", n)
	}
	if st := w.Stats(); st.Retries != 0 {
		t.Errorf("stats %+v, want no retry: the down server is not tried", st)
	}

	flaky.down.Store(false)
	bustest.CheckFor(t, waitTimeout, time.Millisecond, healthy(true))
	if rep := f.generate(t, generateRequest(id, 3)); rep.Error != "" || rep.Endpoint != flaky.url {
		t.Fatalf("reply from %s: %q, want the sticky server back", rep.Endpoint, rep.Error)
	}
}

// TestHealthCheckFailingOnceKeepsServer: a server whose health checks
// fail one at a time, never twice in a row, stays in use: one slow check of
// a loaded server does not take it out of routing.
func TestHealthCheckFailingOnceKeepsServer(t *testing.T) {
	f := newFixture(t)
	flaky := newModel(t, toyllm.Options{}, func(m *model) { m.flap.Store(true) })
	w := f.start(t, Options{HealthInterval: 5 * time.Millisecond}, flaky)
	start := flaky.health.Load()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if !w.Endpoints()[0].Healthy {
			t.Fatalf("marked down after %d checks, every other one failing", flaky.health.Load()-start)
		}
		if n := flaky.health.Load() - start; n < 20 {
			return fmt.Errorf("%d health checks so far, want 20", n)
		}
		return nil
	})
}

func TestMalformedRequests(t *testing.T) {
	garbage := []byte("\xc1 not msgpack")
	marshal := func(v any) []byte {
		b, err := messages.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	noTokens := generateRequest("ep", 1)
	noTokens.MaxTokens = 0
	newer := generateRequest("ep", 1)
	newer.V = messages.Version + 1
	for _, tc := range []struct {
		name     string
		generate bool // the generate subject, else tokenize
		data     []byte
		reason   string // in the error
	}{
		{"garbage generate", true, garbage, "GenerateRequest"},
		{"garbage tokenize", false, garbage, "TokenizeRequest"},
		{"zero max_tokens", true, marshal(noTokens), "max_tokens"},
		{"newer version", true, marshal(newer), "version"},
		{"nothing to tokenize", false, marshal(&messages.TokenizeRequest{V: messages.Version}), "text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := newModel(t, toyllm.Options{}, nil)
			w := f.start(t, Options{}, m)
			subject := f.subj.Tokenize()
			if tc.generate {
				subject = f.subj.Generate()
			}
			msg, err := f.nc.Request(subject, tc.data, waitTimeout)
			if err != nil {
				t.Fatal(err)
			}
			// Both replies carry the error in the same fields; decode
			// each as its own type.
			var code, text string
			if tc.generate {
				rep, err := messages.Decode[messages.GenerateReply](msg.Data)
				if err != nil {
					t.Fatal(err)
				}
				code, text = rep.Code, rep.Error
			} else {
				rep, err := messages.Decode[messages.TokenizeReply](msg.Data)
				if err != nil {
					t.Fatal(err)
				}
				code, text = rep.Code, rep.Error
			}
			if code != messages.CodeInvalid || !strings.Contains(text, tc.reason) {
				t.Errorf("reply code %q error %q, want an invalid-request error naming %q", code, text, tc.reason)
			}
			if n := len(m.completions()); n != 0 {
				t.Errorf("the server got %d completions", n)
			}
			if st := w.Stats(); st.Malformed != 1 || st.Errors != 1 {
				t.Errorf("stats %+v", st)
			}
			// The worker carries on.
			if rep := f.generate(t, generateRequest("ep", 1)); rep.Error != "" {
				t.Errorf("next request: %s", rep.Error)
			}
		})
	}
}

// TestRunDrains cancels a worker while a request is at the model server:
// Run must answer it before returning, and take no new requests.
func TestRunDrains(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, func(m *model) { m.hold = make(chan struct{}) })
	w := f.start(t, Options{}, m)

	reply := make(chan *messages.GenerateReply, 1)
	go func() {
		data, _ := messages.Marshal(generateRequest("ep", 1))
		rep, err := decodeReply[messages.GenerateReply](f.nc.Request(f.subj.Generate(), data, waitTimeout))
		if err != nil {
			t.Error(err)
		}
		reply <- rep
	}()
	select {
	case <-m.entered:
	case <-time.After(waitTimeout):
		t.Fatal("the request never reached the server")
	}
	w.cancel()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if f.srv.GlobalAccount().SubscriptionInterest(f.subj.Generate()) {
			return fmt.Errorf("still subscribed")
		}
		return nil
	})
	select {
	case err := <-w.done:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	default:
	}
	close(m.hold)
	if rep := <-reply; rep == nil || rep.Error != "" || len(rep.Tokens) == 0 {
		t.Errorf("in-flight request: %+v, want an answer", rep)
	}
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
}

// TestRunReturnsWhenConnectionCloses closes the worker's connection under
// it: Run must still return once cancelled.
func TestRunReturnsWhenConnectionCloses(t *testing.T) {
	f := newFixture(t)
	w := f.start(t, Options{}, newModel(t, toyllm.Options{}, nil))
	w.nc.Close()
	w.cancel()
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
}

// TestTokenizeCache checks that a repeated plain text is tokenized by the
// model server once, with the same ids, while chat-template renders and a
// different special-token flag still reach the server.
func TestTokenizeCache(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	f.start(t, Options{}, m)
	text := "\n" + chat.ImStart + "user\nAt turn 2, you guessed 7, and the target number is lower than 7." + chat.ImEnd
	var first []int32
	for i := range 5 {
		rep := f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, EpisodeID: fmt.Sprint("ep", i), Text: text})
		if rep.Error != "" {
			t.Fatal(rep.Error)
		}
		if i == 0 {
			first = rep.Tokens
		} else if !slices.Equal(rep.Tokens, first) {
			t.Fatalf("call %d: cached ids differ", i)
		}
	}
	if n := m.tokenizes.Load(); n != 1 {
		t.Fatalf("5 tokenizations of one text reached the server %d times, want 1", n)
	}
	f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, Text: text, AddSpecialTokens: true})
	msgs := []messages.ChatMessage{{Role: "user", Content: "hi"}}
	f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, Messages: msgs})
	f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, Messages: msgs})
	if n := m.tokenizes.Load(); n != 4 {
		t.Fatalf("want 4 server tokenizations (1 cached text, 1 other flag, 2 chat renders), got %d", n)
	}
}

// TestCachedTokenizeSkipsBusyPool: with every worker of the pool waiting on
// a generation, a tokenization the endpoint has served before is answered
// at once instead of queueing behind the generations.
func TestCachedTokenizeSkipsBusyPool(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, func(m *model) { m.hold = make(chan struct{}) })
	f.start(t, Options{MaxInFlight: 1}, m)
	req := &messages.TokenizeRequest{V: messages.Version, EpisodeID: "ep", Text: "At turn 1, you guessed 3."}
	want := f.tokenize(t, req).Tokens

	data, err := messages.Marshal(generateRequest("busy", 1))
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		_, err := f.nc.Request(f.subj.Generate(), data, waitTimeout)
		busy <- err
	}()
	<-m.entered // the pool's only worker now waits on the model

	got := f.tokenize(t, req)
	if got.Error != "" || !slices.Equal(got.Tokens, want) {
		t.Fatalf("cached tokenize while the pool is busy: %+v", got)
	}
	if n := m.tokenizes.Load(); n != 1 {
		t.Fatalf("the server tokenized %d times, want 1", n)
	}
	close(m.hold)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

// TestCachedTokenizeOnAnyEndpoint: under a routing policy that is not sticky an episode's
// texts are tokenized on any server, so a text another endpoint tokenized before is answered
// from that endpoint's cache right away, even while the pool waits on a generation.
func TestCachedTokenizeOnAnyEndpoint(t *testing.T) {
	f := newFixture(t)
	hold := make(chan struct{})
	held := func(m *model) { m.hold = hold }
	a, b := newModel(t, toyllm.Options{}, held), newModel(t, toyllm.Options{}, held)
	w := f.start(t, Options{Routing: RoutingLeastLoaded, MaxInFlight: 1}, a, b)
	text := "At turn 1, you guessed 3."
	want := f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, EpisodeID: "ep", Text: text}).Tokens
	// An episode whose sticky endpoint is not the one that tokenized the text.
	tokenized := a.url
	if b.tokenizes.Load() == 1 {
		tokenized = b.url
	}
	other := ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("ep-%d", i); w.router.preferred(id).url != tokenized {
			other = id
		}
	}

	data, err := messages.Marshal(generateRequest("busy", 1))
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		_, err := f.nc.Request(f.subj.Generate(), data, waitTimeout)
		busy <- err
	}()
	select { // the pool's only worker now waits on a model
	case <-a.entered:
	case <-b.entered:
	}
	got := f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, EpisodeID: other, Text: text})
	close(hold)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if got.Error != "" || !slices.Equal(got.Tokens, want) {
		t.Fatalf("tokenize of a cached text while the pool is busy: %+v", got)
	}
	if n := a.tokenizes.Load() + b.tokenizes.Load(); n != 1 {
		t.Fatalf("the servers tokenized %d times, want 1", n)
	}
}

// TestExpiredRequestIsDropped: work whose requester has stopped waiting is
// not sent to the model, so a retried request is not generated twice.
func TestExpiredRequestIsDropped(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	r := f.start(t, Options{}, m)
	req := generateRequest("late", 1)
	req.Deadline = time.Now().Add(-time.Second).UnixNano()
	rep := f.generate(t, req)
	if rep.Code != messages.CodeUnavailable || rep.Error == "" {
		t.Fatalf("want an unavailable reply for an expired request, got %+v", rep)
	}
	if n := len(m.completions()); n != 0 {
		t.Fatalf("an expired request reached the model %d times", n)
	}
	if st := r.Stats(); st.Expired != 1 {
		t.Fatalf("stats %+v, want one expired request", st)
	}
	req.Deadline = time.Now().Add(time.Minute).UnixNano()
	if rep := f.generate(t, req); rep.Error != "" {
		t.Fatalf("a request inside its deadline must be served: %+v", rep)
	}
}

// TestMaxTokensFitsTheWindow: a per-turn budget larger than what is left of
// the model's context window is cut to fit, instead of being refused.
func TestMaxTokensFitsTheWindow(t *testing.T) {
	f := newFixture(t)
	prompt := gamePrompt()
	m := newModel(t, toyllm.Options{MaxModelLen: len(prompt) + 8}, nil)
	f.start(t, Options{}, m)
	req := generateRequest("window", 1)
	req.Prompt, req.MaxTokens = prompt, 64
	rep := f.generate(t, req)
	if rep.Error != "" {
		t.Fatalf("want a generation cut to the window, got %+v", rep)
	}
	if len(rep.Tokens) > 8 || (len(rep.Tokens) == 8 && rep.FinishReason != "length") {
		t.Fatalf("generated %d tokens (%s) with 8 left in the window", len(rep.Tokens), rep.FinishReason)
	}
}

// Start returns once the worker is ready, and fails, without waiting, when
// the worker stops before it is (here: its connection is closed).
func TestStart(t *testing.T) {
	f := newFixture(t)
	m := newModel(t, toyllm.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	nc := bustest.Connect(t, f.srv, "llm")
	w, err := New(nc, Options{Endpoints: []string{m.url}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep := f.tokenize(t, &messages.TokenizeRequest{V: messages.Version, Text: "ready"}); rep.Error != "" || len(rep.Tokens) == 0 {
		t.Errorf("tokenize after Start: %+v", rep)
	}
	stop()

	closed := bustest.Connect(t, f.srv, "llm-closed")
	closed.Close()
	w, err = New(closed, Options{Endpoints: []string{m.url}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Start(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Start on a closed connection: %v (context %v)", err, ctx.Err())
	}
}
