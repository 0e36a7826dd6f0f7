package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return url
}

// answerGenerate answers every generate request on the fixture's NATS with reply, as an LLM
// worker that misbehaves would, until the test ends.
func answerGenerate(t *testing.T, f *fixture, reply []byte) {
	t.Helper()
	sub, err := f.nc.QueueSubscribe(f.subj.Generate(), "llm", func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestUpstreamErrors checks what a client is told when the LLM workers or their model servers
// fail: a status and a message in its own terms, while the log keeps the whole failure.
func TestUpstreamErrors(t *testing.T) {
	tokens := map[string]any{"prompt": []int{65, 66}, "max_tokens": 4}
	for _, tc := range []struct {
		name string
		// setup starts what answers the gateway's requests.
		setup  func(t *testing.T, f *fixture)
		status int
		want   string
		logged string // in the gateway's log, besides the status
	}{
		{"model server down", func(t *testing.T, f *fixture) {
			f.model = closedURL(t)
			f.startWorker(t)
		}, http.StatusServiceUnavailable, "the model server is unavailable", "http://127.0.0.1:"},
		{"no LLM worker", func(*testing.T, *fixture) {}, http.StatusServiceUnavailable,
			"the model server is unavailable: no LLM worker answered", "rf.llm.generate"},
		{"undecodable reply", func(t *testing.T, f *fixture) { answerGenerate(t, f, []byte("not msgpack")) },
			http.StatusBadGateway, "the model server's answer could not be read", "bad reply"},
		{"reply with an unknown code", func(t *testing.T, f *fixture) {
			answerGenerate(t, f, wire(t, &messages.GenerateReply{V: messages.Version, Error: "llm: disk on fire", Code: "fire"}))
		}, http.StatusBadGateway, "the model server's answer could not be read", "disk on fire"},
		{"refused by the worker itself", func(t *testing.T, f *fixture) {
			answerGenerate(t, f, wire(t, &messages.GenerateReply{V: messages.Version, Error: "llm: decode: bad request", Code: messages.CodeInvalid}))
		}, http.StatusBadGateway, "the LLM worker refused the request", "llm: decode: bad request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &bustest.LogRecorder{Min: slog.LevelDebug}
			f := newFixture(t, fixtureOptions{noWorker: true, gateway: Options{Model: "toy", MaxModelLen: 4096, Logger: slog.New(rec)}})
			tc.setup(t, f)
			r, err := f.do(http.MethodPost, "/v1/completions", nil, tokens)
			if err != nil {
				t.Fatal(err)
			}
			if msg, _ := checkError(t, r, tc.status); msg != tc.want {
				t.Errorf("message %q, want %q", msg, tc.want)
			}
			if !logged(rec, "status="+strconv.Itoa(tc.status), tc.logged) {
				t.Errorf("no log line with status %d and %q in %q", tc.status, tc.logged, rec.Lines())
			}
		})
	}
}

// logged reports whether a line of rec holds every one of parts.
func logged(rec *bustest.LogRecorder, parts ...string) bool {
	for _, line := range rec.Lines() {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// wire encodes a message as it travels on NATS.
func wire(t *testing.T, v any) []byte {
	t.Helper()
	b, err := messages.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClientDisconnect logs a call whose client went away as a client disconnect, not as a
// failure of the gateway or its model servers.
func TestClientDisconnect(t *testing.T) {
	rec := &bustest.LogRecorder{Min: slog.LevelDebug}
	f := newFixture(t, fixtureOptions{
		toy:     toyllm.Options{TokenLatency: time.Second},
		gateway: Options{Model: "toy", MaxModelLen: 4096, Logger: slog.New(rec)},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/completions",
		strings.NewReader(`{"prompt":[65,66],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if f.gw.Stats().Requests == 0 {
			return errors.New("the call has not reached the gateway")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want it cancelled", err)
	}
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		if !logged(rec, "INFO client disconnected", "status=499") {
			return fmt.Errorf("no client disconnect logged: %q", rec.Lines())
		}
		return nil
	})
	for _, line := range rec.Lines() {
		if strings.HasPrefix(line, "WARN") || strings.HasPrefix(line, "ERROR") {
			t.Errorf("logged as a failure: %s", line)
		}
	}
	if st := f.gw.Stats(); st.Errors != 0 {
		t.Errorf("a disconnect counted as an error answer: %+v", st)
	}
}

// FuzzErrorAnswers posts arbitrary bodies to the gateway's endpoints, through an LLM worker
// and the stand-in model server: every answer is a success or OpenAI's error body with a
// message in the client's terms.
func FuzzErrorAnswers(f *testing.F) {
	paths := []string{
		"/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize", "/detokenize",
		"/v1/sessions/finish", "/v1/sessions/verify", "/v1/sessions/s1/finish",
	}
	for i, body := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"session_id":"s1"}`,
		`{"prompt":[1,2,3],"max_tokens":4}`,
		`{"input":"hi","max_output_tokens":4}`,
		`{"prompt":"hi","return_token_strs":true}`,
		`{"tokens":[72,105]}`,
		`{"reward":1,"metadata":{"a":"b"}}`,
		`{"reward":1,"response":{"output":[{"prompt_token_ids":[1],"generation_token_ids":[2]}]}}`,
		`{"reward":1}`,
		`{"messages":"hi"}`, `{"prompt":[1,99999]}`, `{"prompt":"hi","presence_penalty":1}`, `{"input":[{"type":"x"}]}`,
		`{"prompt":"x","model":["m"]}`, `{"tokens":{"a":1}}`, `{"reward":"1"}`, `[`, `null`, `"x"`, ``,
	} {
		f.Add(uint8(i), []byte(body))
	}
	fx := newFixture(f, fixtureOptions{toy: toyllm.Options{MaxModelLen: 256}, gateway: Options{NoIdlessSessions: true}})
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		r, err := fx.do(http.MethodPost, paths[int(path)%len(paths)], nil, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK {
			checkError(t, r, r.status)
			return
		}
		var ok map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &ok); err != nil || (ok["error"] != nil && string(ok["error"]) != "null") {
			t.Fatalf("200 with %s", r.body)
		}
	})
}

// TestFinishNotStored answers a finish whose trajectories JetStream cannot store with a 503
// that says so, and keeps the session open for the retry.
func TestFinishNotStored(t *testing.T) {
	rec := &bustest.LogRecorder{Min: slog.LevelDebug}
	f := newFixture(t, fixtureOptions{gateway: Options{RequestTimeout: 2 * time.Second, Logger: slog.New(rec)}})
	f.must(t, http.StatusOK, http.MethodPost, "/v1/completions", map[string]string{HeaderSessionID: "kept"},
		map[string]any{"prompt": []int{65, 66}, "max_tokens": 2})
	if err := f.js.DeleteStream(context.Background(), f.subj.StreamTrajectories()); err != nil {
		t.Fatal(err)
	}
	r := f.must(t, http.StatusServiceUnavailable, http.MethodPost, "/v1/sessions/kept/finish", nil, map[string]any{"reward": 1})
	if msg, _ := checkError(t, r, http.StatusServiceUnavailable); msg != "the session's records could not be stored; the session stays open: try again" {
		t.Errorf("message %q", msg)
	}
	if !logged(rec, "WARN request failed", "status=503", "publishing session") {
		t.Errorf("the failure is not logged: %q", rec.Lines())
	}
	f.must(t, http.StatusOK, http.MethodGet, "/v1/sessions/kept", nil, nil)
}

// TestAnswer checks what a client is told of each kind of error, wrapped as the gateway wraps
// it with internal detail: the detail never reaches the message.
func TestAnswer(t *testing.T) {
	detail := "rf.llm.generate at http://10.0.0.7:8000: vllm: HTTP 500"
	for _, tc := range []struct {
		err    error
		status int
		want   string
	}{
		{fmt.Errorf("%w on %s", ErrNoWorker, detail), 503, "the model server is unavailable: no LLM worker answered"},
		{fmt.Errorf("%w: %s", ErrUnavailable, detail), 503, "the model server is unavailable"},
		{fmt.Errorf("%w: %s", ErrTimeout, detail), 504, "the model server did not answer in time"},
		{fmt.Errorf("%w: %s", ErrBadReply, detail), 502, "the model server's answer could not be read"},
		{fmt.Errorf("%w: %s", ErrRefused, detail), 502, "the LLM worker refused the request"},
		{fmt.Errorf("%w: publishing session %q: %s", ErrNotStored, "s", detail), 503, "could not be stored"},
		{fmt.Errorf("%w: %q", ErrSessionNotFound, "s"), 404, `no such session: "s"`},
		{fmt.Errorf("%w: %d open sessions with %s", ErrSessionAmbiguous, 2, "metadata"), 409, "more than one session matches"},
		{fmt.Errorf("%w: %d open", ErrTooManySessions, 9), 429, "too many open sessions"},
		{fmt.Errorf("%w: 300 tokens", ErrSessionTooLong), 400, "token limit exceeded"},
		{replyError("rf.llm.tokenize", "vllm: tokenize http://10.0.0.7:8000/tokenize: vllm: HTTP 413", messages.CodeInvalid, 0), 400,
			"the prompt is too long for the model: the model server refused it as too large (Request Entity Too Large)"},
		{replyError("rf.llm.generate", "vllm: complete http://10.0.0.7:8000/v1/completions: vllm: HTTP 400 BadRequestError: see http://10.0.0.7:8000/docs",
			messages.CodeInvalid, 0), 400, "the model server refused the request: see <address>"},
		{replyError("rf.llm.generate", "vllm: HTTP 400 BadRequestError: This model's maximum context length is 8 tokens.",
			messages.CodeContextLength, 0), 400, "This model's maximum context length is 8 tokens."},
		{replyError("rf.llm.generate", "llm: prompt too long", messages.CodeContextLength, 0), 400, "the prompt is too long for the model"},
		{fmt.Errorf("gateway: session %q: %s", "s", detail), 500, "internal error"},
	} {
		status, info := answer(tc.err)
		wantType := "invalid_request_error"
		if tc.status >= 500 {
			wantType = "server_error"
		}
		if status != tc.status || info.Type != wantType || !strings.Contains(info.Message, tc.want) || info.Param != nil || info.Code != nil {
			t.Errorf("%v: got %d %+v, want %d %s with %q", tc.err, status, info, tc.status, wantType, tc.want)
		}
		checkClientTerms(t, info.Message)
	}
}
