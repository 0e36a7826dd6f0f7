package toyllm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// eventually polls cond until it holds, failing the test if it does not
// within a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// get sends a GET and returns the status and body.
func (c *testClient) get(path string) (int, []byte) {
	c.t.Helper()
	resp, err := http.Get(c.url + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// control posts to a control endpoint and requires a 200 with want as the
// body.
func (c *testClient) control(path string, body any, want string) {
	c.t.Helper()
	status, out := c.post(path, body)
	if status != http.StatusOK || strings.TrimSpace(string(out)) != want {
		c.t.Fatalf("POST %s: %d %s, want 200 %s", path, status, out, want)
	}
}

// updateSkill loads a new skill over HTTP.
func (c *testClient) updateSkill(skill float64) {
	c.t.Helper()
	c.control("/update_weights", map[string]any{"update_info": map[string]any{"skill": skill}}, `{"message":"Weights updated"}`)
}

// weightVersion reads GET /weight_info.
func (c *testClient) weightVersion() string {
	c.t.Helper()
	status, out := c.get("/weight_info")
	var r struct {
		WeightVersion string `json:"weight_version"`
	}
	decodeStrict(c.t, out, &r)
	if status != http.StatusOK {
		c.t.Fatalf("weight_info: %d %s", status, out)
	}
	return r.WeightVersion
}

// isPaused reads GET /is_paused.
func (c *testClient) isPaused() bool {
	c.t.Helper()
	status, out := c.get("/is_paused")
	var r struct {
		IsPaused bool `json:"is_paused"`
	}
	decodeStrict(c.t, out, &r)
	if status != http.StatusOK {
		c.t.Fatalf("is_paused: %d %s", status, out)
	}
	return r.IsPaused
}

// TestUpdateWeightsChangesPolicy loads skills over HTTP and checks that
// seeded replies change with them (the plan is the same, the slips are
// not), that the logprobs are those of the new distribution, and that
// loading the default skill back restores the original replies.
func TestUpdateWeightsChangesPolicy(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	prompt := gamePrompt()
	sp := samplingParams{temperature: 1, topP: 1}
	const seeds = 24
	reply := func(seed int) completionChoice {
		return c.complete(map[string]any{"prompt": prompt, "max_tokens": 120, "seed": seed, "logprobs": 0, "return_token_ids": true}).Choices[0]
	}
	var base [seeds]string
	for seed := range seeds {
		base[seed] = reply(seed).Text
	}
	for _, tc := range []struct {
		skill float64
		// maxSame bounds the replies identical to the default skill's.
		maxSame int
	}{
		{skill: 8, maxSame: seeds / 3},
		{skill: slipLogit, maxSame: 0},
		{skill: 2, maxSame: 0},
		{skill: MaxSkill, maxSame: seeds},
		{skill: DefaultSkill, maxSame: seeds},
	} {
		c.updateSkill(tc.skill)
		same := 0
		for seed := range seeds {
			ch := reply(seed)
			if ch.Text == base[seed] {
				same++
			}
			want := expectedLogprobs(prompt, uint64(seed), sp, tc.skill, ch.TokenIDs)
			for i, got := range ch.Logprobs.TokenLogprobs {
				if math.Abs(got-want[i]) > 1e-6*(1+math.Abs(want[i])) {
					t.Fatalf("skill %g seed %d token %d: logprob %v, recomputed %v", tc.skill, seed, i, got, want[i])
				}
			}
		}
		if same > tc.maxSame {
			t.Errorf("skill %g: %d of %d replies as at the default skill, want at most %d", tc.skill, same, seeds, tc.maxSame)
		}
		if tc.skill == DefaultSkill && same != seeds {
			t.Errorf("back at the default skill: %d of %d replies as before", same, seeds)
		}
	}
}

// TestGreedyFollowsSkill checks greedy decoding: the planned token wins
// above slipLogit, its first slip wins below.
func TestGreedyFollowsSkill(t *testing.T) {
	_, url := newTestServer(t, Options{Skill: 3})
	c := newClient(t, url)
	greedy := func() string {
		return c.complete(map[string]any{"prompt": gamePrompt(), "max_tokens": 60, "temperature": 0}).Choices[0].Text
	}
	low := greedy()
	c.updateSkill(DefaultSkill)
	high := greedy()
	if !strings.Contains(high, `\boxed{12}`) {
		t.Errorf("greedy reply at the default skill %q does not bisect to 12", high)
	}
	if strings.Contains(low, `\boxed{12}`) || len(low) != len(high) {
		t.Errorf("greedy reply at skill 3 %q, want the same length as %q with every planned token slipped", low, high)
	}
}

func TestOptionsSkill(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{0, DefaultSkill}, {-1, DefaultSkill}, {math.NaN(), DefaultSkill}, {5, 5}, {MaxSkill, MaxSkill}, {100, MaxSkill},
	} {
		s := New(Options{Skill: tc.in, Logger: discardLogger()})
		if got := s.currentPolicy().skill; got != tc.want {
			t.Errorf("Options.Skill %g: skill %g, want %g", tc.in, got, tc.want)
		}
	}
}

func TestWeightVersion(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	if v := c.weightVersion(); v != DefaultWeightVersion {
		t.Errorf("initial version %q", v)
	}
	_, url = newTestServer(t, Options{WeightVersion: "step-0", Skill: 9})
	c = newClient(t, url)
	steps := []struct {
		path, body, want string
	}{
		{"", "", "step-0"},
		{"/update_weights", `{"update_info":{"skill":10,"weight_version":"step-1"}}`, "step-1"},
		{"/update_weights", `{"update_info":{"skill":11}}`, "step-1"},
		{"/start_weight_update", ``, "step-1"},
		{"/update_weights", `{"update_info":{"skill":12.5,"weight_version":"partial"}}`, "partial"},
		{"/finish_weight_update", `{"weight_version":"step-2"}`, "step-2"},
		{"/finish_weight_update", ``, "step-2"},
		{"/finish_weight_update", `{}`, "step-2"},
	}
	for _, st := range steps {
		if st.path != "" {
			if status, out := c.post(st.path, st.body); status != http.StatusOK {
				t.Fatalf("POST %s %s: %d %s", st.path, st.body, status, out)
			}
		}
		if v := c.weightVersion(); v != st.want {
			t.Errorf("after %s %s: version %q, want %q", st.path, st.body, v, st.want)
		}
	}
	if v := metricsValue(t, url, "toyllm:skill"); v != 12.5 {
		t.Errorf("metrics skill %v", v)
	}
	_, out := c.get("/metrics")
	if want := `weight_version="step-2"} 1.0`; !strings.Contains(string(out), want) {
		t.Errorf("metrics lack %s:\n%s", want, out)
	}
}

// generation is a generation request sent in the background.
type generation struct {
	done   atomic.Bool
	result chan generationResult
}

type generationResult struct {
	status int
	body   []byte
}

// startGeneration posts body to path in a goroutine.
func startGeneration(c *testClient, path string, body any) *generation {
	g := &generation{result: make(chan generationResult, 1)}
	raw, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	go func() {
		resp, err := http.Post(c.url+path, "application/json", strings.NewReader(string(raw)))
		if err != nil {
			g.result <- generationResult{status: -1, body: []byte(err.Error())}
			g.done.Store(true)
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		g.done.Store(true)
		g.result <- generationResult{resp.StatusCode, out}
	}()
	return g
}

// wait returns the response, requiring a 200.
func (g *generation) wait(t *testing.T) []byte {
	t.Helper()
	r := <-g.result
	if r.status != http.StatusOK {
		t.Fatalf("generation: %d %s", r.status, r.body)
	}
	return r.body
}

// TestHoldNewRequests checks that a pause, or a weight update in progress,
// holds new generation requests of both endpoints until it ends, counting
// them as waiting.
func TestHoldNewRequests(t *testing.T) {
	holds := []struct {
		name       string
		hold, free string
		holdResp   string
		freeResp   string
	}{
		{"pause", "/pause", "/resume", `{"status":"paused"}`, `{"status":"resumed"}`},
		{"pause keep", "/pause?mode=keep", "/resume", `{"status":"paused"}`, `{"status":"resumed"}`},
		{"weight update", "/start_weight_update", "/finish_weight_update", `{"message":"Weight update started"}`, `{"message":"Weight update finished"}`},
	}
	requests := []struct {
		path string
		body map[string]any
	}{
		{"/v1/completions", map[string]any{"prompt": "Guess the number between 1 and 20", "max_tokens": 30}},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 30}},
	}
	for _, h := range holds {
		for _, rq := range requests {
			t.Run(h.name+rq.path, func(t *testing.T) {
				s, url := newTestServer(t, Options{})
				c := newClient(t, url)
				c.control(h.hold, "", h.holdResp)
				if !c.isPaused() {
					t.Errorf("is_paused false after %s", h.hold)
				}
				g := startGeneration(c, rq.path, rq.body)
				eventually(t, "the request waits", func() bool { return s.waiting.Load() == 1 })
				if g.done.Load() || s.running.Load() != 0 {
					t.Fatalf("request ran while held (%d running)", s.running.Load())
				}
				if w := metricsValue(t, url, "vllm:num_requests_waiting"); w != 1 {
					t.Errorf("metrics: %v waiting", w)
				}
				if p := metricsValue(t, url, "toyllm:is_paused"); p != 1 {
					t.Errorf("metrics: is_paused %v", p)
				}
				c.control(h.free, "", h.freeResp)
				g.wait(t)
				if c.isPaused() {
					t.Errorf("is_paused true after %s", h.free)
				}
				if w := s.waiting.Load(); w != 0 {
					t.Errorf("%d still waiting", w)
				}
			})
		}
	}
}

// TestPauseAbort checks that an abort-mode pause ends a generation in flight
// at once, answering the tokens generated so far with finish_reason
// "abort", and that new requests wait until resume.
func TestPauseAbort(t *testing.T) {
	for _, query := range []string{"", "?mode=abort", "?wait_for_inflight_requests=false&clear_cache=true"} {
		t.Run(query, func(t *testing.T) {
			// 20000 tokens at 50µs take a second: the abort lands mid-reply.
			s, url := newTestServer(t, Options{TokenLatency: 50 * time.Microsecond})
			c := newClient(t, url)
			body := map[string]any{"prompt": gamePrompt(), "max_tokens": 20000, "ignore_eos": true, "seed": 7,
				"logprobs": 1, "return_token_ids": true}
			g := startGeneration(c, "/v1/completions", body)
			eventually(t, "the request runs", func() bool { return s.running.Load() == 1 })
			c.control("/pause"+query, "", `{"status":"paused"}`)
			if r := s.running.Load(); r != 0 {
				t.Errorf("%d running after an abort pause returned", r)
			}
			var r completionResponse
			decodeStrict(t, g.wait(t), &r)
			ch := r.Choices[0]
			n := len(ch.TokenIDs)
			t.Logf("aborted after %d tokens", n)
			if ch.FinishReason != "abort" || n >= 20000 || len(ch.Logprobs.TokenLogprobs) != n || len(ch.Logprobs.TopLogprobs) != n ||
				r.Usage.CompletionTokens != n || ch.StopReason != nil {
				t.Fatalf("aborted reply: finish %q, %d tokens, %d logprobs, usage %+v",
					ch.FinishReason, n, len(ch.Logprobs.TokenLogprobs), r.Usage)
			}
			// The tokens are the start of the reply the request would have
			// got: the same seed on a server without latency.
			if n > 0 {
				_, fast := newTestServer(t, Options{})
				body["max_tokens"] = n
				full := newClient(t, fast).complete(body).Choices[0]
				if !slices.Equal(full.TokenIDs, ch.TokenIDs) || !slices.Equal(full.Logprobs.TokenLogprobs, ch.Logprobs.TokenLogprobs) || full.Text != ch.Text {
					t.Errorf("aborted reply %v %q is not the start of the full reply %v %q", ch.TokenIDs, ch.Text, full.TokenIDs, full.Text)
				}
			}

			// Paused: a new request waits, then runs after resume.
			body["max_tokens"] = 3
			g = startGeneration(c, "/v1/completions", body)
			eventually(t, "the request waits", func() bool { return s.waiting.Load() == 1 })
			c.control("/resume", "", `{"status":"resumed"}`)
			decodeStrict(t, g.wait(t), &r)
			if f := r.Choices[0].FinishReason; f != "length" {
				t.Errorf("after resume: finish %q", f)
			}
		})
	}
}

// TestPauseWait checks that a wait-mode pause answers only once the
// generation in flight has finished, and that the generation completes.
func TestPauseWait(t *testing.T) {
	for _, query := range []string{"?mode=wait", "?wait_for_inflight_requests=true"} {
		t.Run(query, func(t *testing.T) {
			var recorded atomic.Bool
			s, url := newTestServer(t, Options{TokenLatency: time.Millisecond, Record: func(_, _ []int32) { recorded.Store(true) }})
			c := newClient(t, url)
			g := startGeneration(c, "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 40, "ignore_eos": true})
			eventually(t, "the request runs", func() bool { return s.running.Load() == 1 })
			c.control("/pause"+query, "", `{"status":"paused"}`)
			if !recorded.Load() || s.running.Load() != 0 {
				t.Errorf("pause returned before the generation in flight finished")
			}
			var r completionResponse
			decodeStrict(t, g.wait(t), &r)
			if f := r.Choices[0].FinishReason; f != "length" || r.Usage.CompletionTokens != 40 {
				t.Errorf("finish %q with %d tokens", f, r.Usage.CompletionTokens)
			}
		})
	}
}

// TestPauseKeep checks that a keep-mode pause leaves the generation in
// flight to finish after resume, whole, and that an abort-mode pause
// following it aborts the frozen generation.
func TestPauseKeep(t *testing.T) {
	for _, then := range []string{"/resume", "/pause?mode=abort"} {
		t.Run(then, func(t *testing.T) {
			s, url := newTestServer(t, Options{TokenLatency: 2 * time.Millisecond})
			c := newClient(t, url)
			g := startGeneration(c, "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 50, "ignore_eos": true, "seed": 1})
			eventually(t, "the request runs", func() bool { return s.running.Load() == 1 })
			c.control("/pause?mode=keep", "", `{"status":"paused"}`)
			if !c.isPaused() {
				t.Errorf("not paused")
			}
			status, _ := c.post(then, "")
			if status != http.StatusOK {
				t.Fatalf("%s: %d", then, status)
			}
			var r completionResponse
			decodeStrict(t, g.wait(t), &r)
			want := "length"
			if strings.HasPrefix(then, "/pause") {
				want = "abort"
			}
			if f := r.Choices[0].FinishReason; f != want {
				t.Errorf("finish %q, want %q", f, want)
			}
		})
	}
}

// TestInflightKeepsItsPolicy checks that a weight update during a
// generation does not change the distribution it samples from.
func TestInflightKeepsItsPolicy(t *testing.T) {
	s, url := newTestServer(t, Options{TokenLatency: time.Millisecond})
	c := newClient(t, url)
	prompt := gamePrompt()
	body := map[string]any{"prompt": prompt, "max_tokens": 60, "seed": 5, "logprobs": 0, "return_token_ids": true}
	g := startGeneration(c, "/v1/completions", body)
	eventually(t, "the request runs", func() bool { return s.running.Load() == 1 })
	c.updateSkill(4)
	var r completionResponse
	decodeStrict(t, g.wait(t), &r)
	ch := r.Choices[0]
	want := expectedLogprobs(prompt, 5, samplingParams{temperature: 1, topP: 1}, DefaultSkill, ch.TokenIDs)
	for i, got := range ch.Logprobs.TokenLogprobs {
		if math.Abs(got-want[i]) > 1e-6*(1+math.Abs(want[i])) {
			t.Fatalf("token %d: logprob %v, want %v under the skill the generation started with", i, got, want[i])
		}
	}
}

// TestHeldRequestHonoursContext checks that a request held by a pause ends
// when its client goes away.
func TestHeldRequestHonoursContext(t *testing.T) {
	s, url := newTestServer(t, Options{})
	c := newClient(t, url)
	c.control("/pause", "", `{"status":"paused"}`)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		if err != nil {
			errc <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually(t, "the request waits", func() bool { return s.waiting.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("request error %v, want context.Canceled", err)
	}
	eventually(t, "the request leaves", func() bool { return s.waiting.Load() == 0 })
}

func TestWeightEndpointsBadRequests(t *testing.T) {
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/pause?mode=later", "", `invalid pause mode "later"`},
		{"/pause?mode=", "", `invalid pause mode ""`},
		{"/pause?wait_for_inflight_requests=maybe", "", "invalid wait_for_inflight_requests"},
		{"/update_weights", `{}`, "Missing 'update_info'"},
		{"/update_weights", `{"update_info":null}`, "Missing 'update_info'"},
		{"/update_weights", `{"update_info":[1]}`, "update_info"},
		{"/update_weights", `{"update_info":{}}`, "skill is required"},
		{"/update_weights", `{"update_info":{"weight_version":"v1"}}`, "skill is required"},
		{"/update_weights", `{"update_info":{"skill":0}}`, "skill must be in (0, 30]"},
		{"/update_weights", `{"update_info":{"skill":-3}}`, "skill must be in (0, 30]"},
		{"/update_weights", `{"update_info":{"skill":30.5}}`, "skill must be in (0, 30]"},
		{"/update_weights", `{"update_info":{"skill":"high"}}`, "skill must be a number"},
		{"/update_weights", `{"update_info":{"skill":10,"weight_version":3}}`, "weight_version must be a string"},
		{"/update_weights", `{"update_info":{"skill":10,"names":["w"],"dtype_names":["bf16"]}}`, "unknown keys dtype_names, names"},
		{"/update_weights", `{"update_info":`, "invalid JSON body"},
		{"/finish_weight_update", `{"weight_version":1}`, "weight_version"},
		{"/finish_weight_update", `nope`, "invalid JSON body"},
	} {
		status, out := c.post(tc.path, tc.body)
		checkError(t, status, out, http.StatusBadRequest, tc.want)
	}
	if v := c.weightVersion(); v != DefaultWeightVersion {
		t.Errorf("version %q after bad requests", v)
	}
	if c.isPaused() {
		t.Errorf("paused after bad requests")
	}
}
