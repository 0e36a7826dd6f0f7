package remoteenv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/envs"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, err string
		want    Config
	}{
		{in: "gym:gtn=http-gym,http://127.0.0.1:9000", want: Config{ID: "gym:gtn", Kind: KindGym, URL: "http://127.0.0.1:9000"}},
		{in: "judge = http-verify , https://h/x", want: Config{ID: "judge", Kind: KindVerify, URL: "https://h/x"}},
		{in: "noequals", err: "want ID=KIND,URL"},
		{in: "a=http-gym", err: "want ID=KIND,URL"},
		{in: "=http-gym,http://h", err: "empty env id"},
		{in: "a=grpc,http://h", err: `kind "grpc"`},
		{in: "a=http-gym,ftp://h", err: "not an http(s) URL"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want ErrBadConfig with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v", tc.in, got, err)
		}
	}
}

// A remote GuessTheNumber played through the reference server gives what
// the native env gives for the same seed and actions; the session cookie
// carries the game from call to call.
func TestGymSessionMatchesNativeEnv(t *testing.T) {
	const id = "game:GuessTheNumber-v0-easy"
	h, err := GymHandler(id)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	native, err := envs.New(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantObs, wantInfo := native.Reset(envs.NewRNG(42))

	s := NewSession(Config{ID: "gym:gtn", Kind: KindGym, URL: srv.URL}, nil)
	obs, info, err := s.Reset(context.Background(), Task{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	if obs != wantObs || info["suffix"] != wantInfo["suffix"] {
		t.Fatalf("reset %q %v, native %q %v", obs, info, wantObs, wantInfo)
	}
	for _, action := range []string{`\boxed{5}`, `\boxed{3}`, "no box", `\boxed{8}`} {
		want := native.Step(action)
		got, err := s.Step(context.Background(), action)
		if err != nil {
			t.Fatal(err)
		}
		if got.Observation != want.Observation || got.Reward != want.Reward || got.Terminated != want.Terminated ||
			got.Truncated != want.Truncated || got.Info["suffix"] != want.Info["suffix"] {
			t.Fatalf("%q: remote %+v, native %+v", action, got, want)
		}
		if want.Done() {
			break
		}
	}
}

func TestVerifySession(t *testing.T) {
	var seeded atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /seed_session", func(w http.ResponseWriter, r *http.Request) {
		var row map[string]any
		_ = json.NewDecoder(r.Body).Decode(&row)
		if row["question"] != "What is 2+3?" || row["expected_answer"] != "5" || row["extra"] != "x" {
			http.Error(w, "bad row", http.StatusBadRequest)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "1"})
		seeded.Store(true)
	})
	mux.HandleFunc("POST /verify", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("s"); err != nil || c.Value != "1" {
			http.Error(w, "no session", http.StatusBadRequest)
			return
		}
		var body struct {
			Response struct {
				OutputText string `json:"output_text"`
			} `json:"response"`
			ExpectedAnswer string `json:"expected_answer"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		reward := 0.0
		if strings.Contains(body.Response.OutputText, `\boxed{`+body.ExpectedAnswer+`}`) {
			reward = 1
		}
		writeJSON(w, map[string]any{"reward": reward, "extracted_answer": "5", "judge": map[string]int{"n": 1}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	s := NewSession(Config{ID: "v", Kind: KindVerify, URL: srv.URL}, nil)
	obs, _, err := s.Reset(context.Background(), Task{Prompt: "What is 2+3?", Label: "5", Options: json.RawMessage(`{"extra": "x"}`)})
	if err != nil || obs != "What is 2+3?" || !seeded.Load() {
		t.Fatalf("reset %q, %v", obs, err)
	}
	st, err := s.Step(context.Background(), `it is \boxed{5}`)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reward != 1 || !st.Terminated || st.Info["extracted_answer"] != "5" || st.Info["judge"] != `{"n":1}` {
		t.Fatalf("verify %+v", st)
	}
}

// misbehaving serves /reset with a fault.
func misbehaving(t *testing.T, fault func(n int64, w http.ResponseWriter, r *http.Request) bool) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fault(calls.Add(1), w, r) {
			return
		}
		writeJSON(w, map[string]any{"observation": "hello", "info": map[string]string{}})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     func(n int64, w http.ResponseWriter, r *http.Request) bool
		calls     int64
		wantError string
	}{
		{"503 then fine", func(n int64, w http.ResponseWriter, _ *http.Request) bool {
			if n == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			}
			return false
		}, 2, ""},
		{"500 is not retried", func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
			http.Error(w, "boom", http.StatusInternalServerError)
			return true
		}, 1, "HTTP 500: boom"},
		{"always 502", func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
			http.Error(w, "gateway", http.StatusBadGateway)
			return true
		}, 3, "HTTP 502"},
		{"not json", func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
			_, _ = w.Write([]byte("<html>"))
			return true
		}, 1, "unreadable answer"},
		{"hangs", func(_ int64, w http.ResponseWriter, r *http.Request) bool {
			_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leave
			<-r.Context().Done()               // until the client gives up
			return true
		}, 3, "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, calls := misbehaving(t, tc.fault)
			s := NewSession(Config{ID: "g", Kind: KindGym, URL: srv.URL, Timeout: 100 * time.Millisecond}, nil)
			obs, _, err := s.Reset(context.Background(), Task{})
			if tc.wantError == "" {
				if err != nil || obs != "hello" {
					t.Fatalf("reset %q, %v", obs, err)
				}
			} else if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), tc.wantError) || !strings.Contains(err.Error(), "g: /reset") {
				t.Fatalf("err %v, want ErrRemote naming the env, the call and %q", err, tc.wantError)
			}
			if got := calls.Load(); got != tc.calls {
				t.Fatalf("%d calls, want %d", got, tc.calls)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	s := NewSession(Config{ID: "g", Kind: KindGym, URL: url}, nil)
	if _, _, err := s.Reset(context.Background(), Task{}); !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("err %v", err)
	}
}

func TestMatch(t *testing.T) {
	remote := []Config{{ID: "gym:gtn"}}
	ids, err := Match("gym:gtn, game:GuessTheNumber-v0-easy", remote)
	if err != nil || len(ids) != 2 || ids[0] != "gym:gtn" {
		t.Fatalf("Match = %v, %v", ids, err)
	}
	if _, err := Match("gym:other", remote); !errors.Is(err, envs.ErrUnknownEnv) {
		t.Fatalf("unknown id: %v", err)
	}
}

// A step the server may have applied is not sent twice: a game must not
// advance by one action twice.
func TestStepIsNotRetriedOnceSent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(w http.ResponseWriter, r *http.Request)
		calls int64
	}{
		{"502 after the request", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "gw", http.StatusBadGateway) }, 1},
		{"timeout after the request", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, 1},
		{"503: the server did not act", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var steps atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, map[string]any{"observation": "hi", "info": map[string]string{}})
			})
			mux.HandleFunc("POST /step", func(w http.ResponseWriter, r *http.Request) {
				steps.Add(1)
				tc.fault(w, r)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			s := NewSession(Config{ID: "g", Kind: KindGym, URL: srv.URL, Timeout: 100 * time.Millisecond}, nil)
			if _, _, err := s.Reset(context.Background(), Task{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Step(context.Background(), "a"); !errors.Is(err, ErrRemote) {
				t.Fatalf("err %v", err)
			}
			if got := steps.Load(); got != tc.calls {
				t.Fatalf("%d /step calls, want %d", got, tc.calls)
			}
		})
	}
}
