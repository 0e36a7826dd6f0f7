package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// harness is a running in-process fleet that tests feed raw messages.
type harness struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj messages.Subjects
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	opts.DataDir = t.TempDir()
	opts.setDefaults()
	var stack cleanup
	t.Cleanup(stack.run)
	ctx := context.Background()
	connect, err := startBus(&stack, opts)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := connect("test")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := messages.NewSubjects("")
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := startActors(ctx, &stack, opts, "", connect); err != nil {
		t.Fatal(err)
	}
	return &harness{nc: nc, js: js, subj: subj}
}

func (h *harness) publish(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := bus.Publish(context.Background(), h.js, subject, data, ""); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) submit(t *testing.T, req *messages.EpisodeRequest) {
	t.Helper()
	data, err := messages.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(t, h.subj.Episodes(req.RunID, req.Env), data)
}

// next waits, with a deadline, for the first message stored on stream
// that match accepts. It reads the stream directly: the output streams are
// work queues, and nothing here consumes them.
func next[T any, P interface {
	*T
	Validate() error
}](t *testing.T, h *harness, stream string, match func(*T) bool) *T {
	t.Helper()
	var found *T
	seq := uint64(1) // the next stored message to look at
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		msgs, err := bustest.ReadStored(context.Background(), h.js, stream, "")
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Sequence < seq {
				continue
			}
			seq = m.Sequence + 1
			if v, err := messages.Decode[T, P](m.Data); err == nil && match(v) {
				found = v
				return nil
			}
		}
		return fmt.Errorf("no matching message on %s yet", stream)
	})
	return found
}

func episode(id, env string) *messages.EpisodeRequest {
	seed := int64(1)
	es := uint64(3)
	return &messages.EpisodeRequest{
		V: messages.Version, EpisodeID: id, GroupID: id, GroupSize: 1, Env: env, EnvSeed: &es,
		Sampling:  messages.SamplingParams{Temperature: 1, MaxTokens: 64, Seed: &seed},
		MaxLength: 2048, SubmitTime: time.Now().UnixNano(),
	}
}

func (h *harness) trajectory(t *testing.T, id string) *messages.Trajectory {
	t.Helper()
	return next[messages.Trajectory](t, h, h.subj.StreamTrajectories(), func(tr *messages.Trajectory) bool { return tr.EpisodeID == id })
}

func (h *harness) failure(t *testing.T, match func(*messages.Failure) bool) *messages.Failure {
	t.Helper()
	return next[messages.Failure](t, h, h.subj.StreamFailures(), match)
}

func TestUnknownEnvBecomesFailure(t *testing.T) {
	h := newHarness(t, Options{})
	h.submit(t, episode("bad-env", "game:NoSuchGame-v0"))
	f := h.failure(t, func(f *messages.Failure) bool { return f.EpisodeID == "bad-env" })
	if f.Kind != messages.FailureEpisode || !strings.Contains(f.Reason, "unknown env") || !strings.Contains(f.Reason, "game:GuessTheNumber-v0") {
		t.Fatalf("failure should name the problem and the known ids: %+v", f)
	}
	// The fleet carries on.
	h.submit(t, episode("after-bad-env", "game:GuessTheNumber-v0"))
	h.trajectory(t, "after-bad-env")
}

func TestMalformedMessages(t *testing.T) {
	h := newHarness(t, Options{})
	bad := episode("zero-length", "game:GuessTheNumber-v0")
	bad.MaxLength = 0
	invalid, err := messages.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte("\xc1 this is not msgpack")
	mutated := func(mut func(*messages.EpisodeRequest)) []byte {
		r := episode("mutated", "game:GuessTheNumber-v0")
		mut(r)
		data, err := messages.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	valid := mutated(func(*messages.EpisodeRequest) {})
	var step bytes.Buffer
	step.Write(mutated(func(r *messages.EpisodeRequest) { r.V = messages.Version + 1 }))
	gtn := h.subj.Episodes("", "game:GuessTheNumber-v0")
	for _, tc := range []struct {
		name, subject string
		data          []byte
		want          string // in the failure reason
	}{
		{"garbage episode", gtn, garbage, "EpisodeRequest"},
		{"invalid episode field", gtn, invalid, "max_length"},
		{"truncated msgpack", gtn, valid[:len(valid)/2], "EpisodeRequest"},
		{"newer wire version", gtn, step.Bytes(), "version"},
		{"negative max_tokens", gtn, mutated(func(r *messages.EpisodeRequest) { r.Sampling.MaxTokens = -5 }), "max_tokens"},
		{"NaN temperature", gtn, mutated(func(r *messages.EpisodeRequest) { r.Sampling.Temperature = math.NaN() }), "temperature"},
		{"top_p above 1", gtn, mutated(func(r *messages.EpisodeRequest) { r.Sampling.TopP = 7 }), "top_p"},
		{"unknown obs style", gtn, mutated(func(r *messages.EpisodeRequest) { r.ObsStyle = "telepathy" }), "obs_style"},
		{"garbage step", h.subj.Steps("", "nobody", "nobody"), garbage, "StepEvent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.publish(t, tc.subject, tc.data)
			f := h.failure(t, func(f *messages.Failure) bool { return f.Subject == tc.subject && strings.Contains(f.Reason, tc.want) })
			if f.Kind != messages.FailureMalformed || len(f.Payload) == 0 {
				t.Fatalf("want a malformed record with the payload, got %+v", f)
			}
		})
	}
	for _, subject := range []string{h.subj.Generate(), h.subj.Tokenize()} {
		t.Run("garbage request "+subject, func(t *testing.T) {
			m, err := h.nc.Request(subject, garbage, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// Both reply types share the error fields.
			rep, err := messages.Decode[messages.TokenizeReply](m.Data)
			if err != nil {
				t.Fatalf("reply must be decodable: %v", err)
			}
			if rep.Code != messages.CodeInvalid || rep.Error == "" {
				t.Fatalf("want an invalid-request error, got %+v", rep)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  *messages.GenerateRequest
		want string
	}{
		{"token ids outside the vocabulary", &messages.GenerateRequest{
			V: messages.Version, EpisodeID: "x", Prompt: messages.Tokens{1 << 30}, MaxTokens: 4,
		}, "out of vocabulary"},
		{"NaN temperature", &messages.GenerateRequest{
			V: messages.Version, EpisodeID: "x", Prompt: messages.Tokens{65}, MaxTokens: 4,
			Sampling: messages.SamplingParams{Temperature: math.NaN()},
		}, "temperature"},
		{"negative max_tokens", &messages.GenerateRequest{
			V: messages.Version, EpisodeID: "x", Prompt: messages.Tokens{65}, MaxTokens: -1,
		}, "max_tokens"},
	} {
		t.Run("generate: "+tc.name, func(t *testing.T) {
			data, err := msgpackUnchecked(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			m, err := h.nc.Request(h.subj.Generate(), data, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := messages.Decode[messages.GenerateReply](m.Data)
			if err != nil {
				t.Fatalf("reply must be decodable: %v", err)
			}
			if rep.Code != messages.CodeInvalid || !strings.Contains(rep.Error, tc.want) {
				t.Fatalf("want an invalid-request error naming %q, got %+v", tc.want, rep)
			}
		})
	}
	t.Run("oversize payload", func(t *testing.T) {
		err := bus.Publish(context.Background(), h.js, gtn, make([]byte, h.nc.MaxPayload()+1), "")
		if !errors.Is(err, bus.ErrTooLarge) {
			t.Fatalf("want ErrTooLarge, got %v", err)
		}
	})
	h.submit(t, episode("after-garbage", "game:GuessTheNumber-v0"))
	h.trajectory(t, "after-garbage")
}

// msgpackUnchecked encodes a message without validating it, as a faulty or
// hostile peer would send it.
func msgpackUnchecked(v any) ([]byte, error) { return msgpack.Marshal(v) }

// faultyModel serves the stand-in's API but breaks /v1/completions: HTTP 500
// or 400 with vLLM's error body, a cut-off body, logprobs that do not match
// the tokens, or (fault "equal") a text saying NeMo Gym's judge verdict
// "equal" whatever was asked.
func faultyModel(t *testing.T, fault string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	good := toyllm.New(toyllm.Options{}).Handler()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			good.ServeHTTP(w, r)
			return
		}
		hits.Add(1)
		switch fault {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"object":"error","message":"engine dead","type":"InternalServerError","code":500}`)
		case "400":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"object":"error","message":"judge refuses","type":"BadRequestError","code":400}`)
		case "garbage":
			io.WriteString(w, `{"choices": [{"text": "oops", "token_ids": [1,2`)
		case "mismatch", "equal":
			rec := httptest.NewRecorder()
			good.ServeHTTP(rec, r)
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Errorf("stand-in reply: %v", err)
				return
			}
			choice := body["choices"].([]any)[0].(map[string]any)
			if fault == "equal" {
				choice["text"] = "My final verdict is equivalent " + envs.JudgeEqualLabel
			} else {
				lp := choice["logprobs"].(map[string]any)
				tl := lp["token_logprobs"].([]any)
				lp["token_logprobs"] = tl[:len(tl)-1]
			}
			json.NewEncoder(w).Encode(body)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestModelServerFaults(t *testing.T) {
	for _, fault := range []string{"500", "garbage", "mismatch"} {
		t.Run(fault+"/only endpoint", func(t *testing.T) {
			bad, hits := faultyModel(t, fault)
			var failures bytes.Buffer
			sum, err := Run(context.Background(), Options{
				Env: "game:GuessTheNumber-v0-easy", Episodes: 4, VLLM: []string{bad.URL}, MaxDeliver: 2,
				DataDir: filepath.Join(t.TempDir(), "nats"), FailuresOut: &failures,
			})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Failures != 4 || sum.Trajectories != 0 {
				t.Fatalf("every episode must end as one failure record: %s", sum)
			}
			if hits.Load() == 0 {
				t.Fatal("the faulty server was never called")
			}
			for line := range strings.SplitSeq(strings.TrimSpace(failures.String()), "\n") {
				if !strings.Contains(line, "generate") || !strings.Contains(line, "gave up after 2 deliveries") {
					t.Fatalf("failure reason should say what failed: %s", line)
				}
			}
		})
		t.Run(fault+"/with a healthy endpoint", func(t *testing.T) {
			bad, hits := faultyModel(t, fault)
			good := httptest.NewServer(toyllm.New(toyllm.Options{}).Handler())
			t.Cleanup(good.Close)
			sum, err := Run(context.Background(), Options{
				Env: "game:GuessTheNumber-v0-easy", Episodes: 32, VLLM: []string{bad.URL, good.URL},
				DataDir: filepath.Join(t.TempDir(), "nats"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Trajectories != 32 {
				t.Fatalf("a failing endpoint must be retried on the healthy one: %s", sum)
			}
			if hits.Load() == 0 {
				t.Fatal("sticky routing never chose the faulty server; the test proves nothing")
			}
		})
	}
}
