package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// waitTimeout bounds every wait in these tests; only a failing test reaches it.
const waitTimeout = 20 * time.Second

// sample is one generation the model server reported through toyllm's Record hook.
type sample struct {
	prompt, generated []int32
}

// fixture is an embedded NATS server, the stand-in model server over real HTTP recording
// what it generated, a real LLM worker forwarding to it, and a gateway in front of them.
type fixture struct {
	srv   *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	subj  messages.Subjects
	run   string // the gateway's run id
	model string // the stand-in model's URL
	url   string // the gateway's URL
	gw    *Gateway

	mu      sync.Mutex
	samples []sample
}

type fixtureOptions struct {
	toy      toyllm.Options
	gateway  Options
	noWorker bool
}

func newFixture(t testing.TB, fo fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{subj: messages.NewSubjects(""), run: cmp.Or(fo.gateway.Run, DefaultRun)}
	f.srv = bustest.RunServer(t)
	f.nc = bustest.Connect(t, f.srv, "test")
	var err error
	if f.js, err = jetstream.New(f.nc); err != nil {
		t.Fatal(err)
	}

	fo.toy.Logger = slog.New(slog.DiscardHandler)
	fo.toy.Record = func(prompt, generated []int32) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.samples = append(f.samples, sample{prompt, generated})
	}
	url, stopModel, err := toyllm.New(fo.toy).Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopModel)
	f.model = url

	if !fo.noWorker {
		f.startWorker(t)
	}

	if fo.gateway.Logger == nil {
		fo.gateway.Logger = slog.New(slog.DiscardHandler)
	}
	f.gw, err = New(bustest.Connect(t, f.srv, "gateway"), fo.gateway)
	if err != nil {
		t.Fatal(err)
	}
	gwURL, stop, err := f.gw.Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	f.url = gwURL
	return f
}

// startWorker runs an LLM worker for the model server until the test ends, and waits until
// it answers every subject the gateway uses.
func (f *fixture) startWorker(t testing.TB) {
	t.Helper()
	w, err := llm.New(bustest.Connect(t, f.srv, "llm"), llm.Options{Endpoints: []string{f.model}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(waitTimeout):
			t.Error("LLM worker did not stop")
		}
	})
	bustest.CheckFor(t, waitTimeout, time.Millisecond, func() error {
		for _, s := range []string{f.subj.Generate(), f.subj.Tokenize(), f.subj.TokenizeChat(), f.subj.Detokenize(), f.subj.ModelInfo()} {
			if !f.srv.GlobalAccount().SubscriptionInterest(s) {
				return fmt.Errorf("no subscriber on %s", s)
			}
		}
		return nil
	})
}

// generatedFor returns what the model server generated for prompt.
func (f *fixture) generatedFor(prompt []int32) ([][]int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]int32
	for _, s := range f.samples {
		if slices.Equal(s.prompt, prompt) {
			out = append(out, s.generated)
		}
	}
	return out, len(out) > 0
}

// response is an HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// decode decodes the body into v.
func (r *response) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("decoding %s: %w", r.body, err)
	}
	return nil
}

// errorMessage returns the message of a vLLM error body, or "" when the body is not one.
func (r *response) errorMessage() string {
	var e errorBody
	if json.Unmarshal(r.body, &e) != nil {
		return ""
	}
	return e.Error.Message
}

// internalWords are what an error message must never show a client: addresses, subjects,
// Go package and type names, Go's own JSON error wording.
var internalWords = []string{"http://", "https://", "127.0.0.1", "gateway.", "gateway: model", "vllm:", "llm:", "rf.llm.", "json:", "Go value", "[]"}

// checkError checks an error answer: its status, OpenAI's error body with exactly message,
// type (invalid_request_error for a 4xx, server_error for a 5xx), param and a null code, and a
// message that says nothing internal. It returns the message and the param.
func checkError(t testing.TB, r *response, status int) (message string, param *string) {
	t.Helper()
	var body map[string]map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &body); err != nil || len(body) != 1 || body["error"] == nil {
		t.Fatalf("got %s, want status %d with an error body", r, status)
	}
	e := body["error"]
	wantType := "invalid_request_error"
	if status >= 500 {
		wantType = "server_error"
	}
	var typ string
	if r.status != status || len(e) != 4 || json.Unmarshal(e["message"], &message) != nil || message == "" ||
		json.Unmarshal(e["type"], &typ) != nil || typ != wantType || json.Unmarshal(e["param"], &param) != nil ||
		string(e["code"]) != "null" {
		t.Fatalf("got %s, want status %d with {message, type %q, param, code null}", r, status, wantType)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q of %s", ct, r)
	}
	checkClientTerms(t, message)
	return message, param
}

// checkClientTerms fails the test when an error message shows one of internalWords.
func checkClientTerms(t testing.TB, message string) {
	t.Helper()
	for _, w := range internalWords {
		if strings.Contains(message, w) {
			t.Errorf("message %q shows %q", message, w)
		}
	}
}

// do sends one request to the gateway; body is encoded as JSON unless it is a []byte.
// It returns an error rather than failing the test, so that agents can call it from their
// own goroutines.
func (f *fixture) do(method, path string, header map[string]string, body any) (*response, error) {
	var rd io.Reader = http.NoBody
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// must is do that fails the test on a transport error or a status other than want, and on
// an error answer not in OpenAI's shape or not in the client's terms.
func (f *fixture) must(t *testing.T, want int, method, path string, header map[string]string, body any) *response {
	t.Helper()
	r, err := f.do(method, path, header, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != want {
		t.Fatalf("%s %s: got %s, want status %d", method, path, r, want)
	}
	if want >= http.StatusBadRequest {
		checkError(t, r, want)
	}
	return r
}

// stored returns the messages stored on subject in stream, decoded as T, in order.
func stored[T any, P interface {
	*T
	Validate() error
}](t *testing.T, f *fixture, stream, subject string) []*T {
	t.Helper()
	var out []*T
	// Read without a consumer: the output streams are work queues.
	for _, m := range bustest.StoredMessages(t, f.js, stream, subject) {
		v, err := messages.Decode[T, P](m.Data)
		if err != nil {
			t.Fatalf("stored message on %s: %v", subject, err)
		}
		out = append(out, v)
	}
	return out
}

// trajectories returns the trajectories stored for env by episode id.
func (f *fixture) trajectories(t *testing.T, env string) map[string]*messages.Trajectory {
	t.Helper()
	out := make(map[string]*messages.Trajectory)
	for _, tr := range stored[messages.Trajectory](t, f, f.subj.StreamTrajectories(), f.subj.Trajectories(f.run, env)) {
		if _, dup := out[tr.EpisodeID]; dup {
			t.Errorf("trajectory %q stored twice", tr.EpisodeID)
		}
		if tr.RunID != f.run {
			t.Errorf("trajectory %q of run %q, want the gateway's %q", tr.EpisodeID, tr.RunID, f.run)
		}
		out[tr.EpisodeID] = tr
	}
	return out
}

// failures returns the episode failure records stored.
func (f *fixture) failures(t *testing.T) []*messages.Failure {
	t.Helper()
	fails := stored[messages.Failure](t, f, f.subj.StreamFailures(), f.subj.Failures(f.run, messages.FailureEpisode))
	for _, fl := range fails {
		if fl.RunID != f.run {
			t.Errorf("failure of %q of run %q, want the gateway's %q", fl.EpisodeID, fl.RunID, f.run)
		}
	}
	return fails
}

// chatTurn is one chat completion as an agent sees it.
type chatTurn struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Choices        []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string  `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
		Logprobs     *struct {
			Content []struct {
				Token string `json:"token"`
				// Numbers, so that each is read as the float32 it was written from.
				Logprob     json.Number       `json:"logprob"`
				Bytes       []int             `json:"bytes"`
				TopLogprobs []json.RawMessage `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// logprobs returns the turn's logprobs as float32s.
func (c *chatTurn) logprobs() ([]float32, error) {
	lp := c.Choices[0].Logprobs
	if lp == nil {
		return nil, errors.New("no logprobs")
	}
	out := make([]float32, len(lp.Content))
	for i, e := range lp.Content {
		f, err := parseFloat32(string(e.Logprob))
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

func parseFloat32(s string) (float32, error) {
	var f float32
	_, err := fmt.Sscan(s, &f)
	return f, err
}

// gamePrompt is the first user turn of a GuessTheNumber game.
const gamePrompt = "You are playing Guess The Number. Guess the number between 1 and 20 and put your guess in \\boxed{}."

// feedback is the environment's answer to a guess, as the agent writes it.
func feedback(turn int, content string) string {
	guess := "10"
	if i := strings.LastIndex(content, `\boxed{`); i >= 0 {
		rest := content[i+len(`\boxed{`):]
		if j := strings.IndexByte(rest, '}'); j >= 0 {
			guess = rest[:j]
		}
	}
	return fmt.Sprintf("At turn %d, you guessed %s, and the target number is higher than %s. Enter your next guess within \\boxed{}.", turn, guess, guess)
}
