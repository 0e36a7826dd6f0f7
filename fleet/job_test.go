package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
	"github.com/rollfleet/rollfleet/toyllm"
)

// closedURL is the URL of a TCP port on 127.0.0.1 nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	return url
}

// brokenEnv is a remote env whose every episode fails at /reset.
func brokenEnv(t *testing.T) remoteenv.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "env crashed", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return remoteenv.Config{ID: "gym:broken", Kind: remoteenv.KindGym, URL: srv.URL}
}

// TestRunExitStatus runs jobs whose episodes all succeed, partly fail and
// all fail, and checks the summary's failure counts and the exit status.
func TestRunExitStatus(t *testing.T) {
	broken := brokenEnv(t)
	for _, tc := range []struct {
		env        string
		status     int
		failures   int
		outcomeErr error
	}{
		{"game:GuessTheNumber-v0-easy", ExitOK, 0, nil},
		{"game:GuessTheNumber-v0-easy,gym:broken", ExitSomeFailed, 4, ErrSomeFailed},
		{"gym:broken", ExitAllFailed, 8, ErrAllFailed},
	} {
		t.Run(tc.env, func(t *testing.T) {
			seed := uint64(5)
			sum, err := Run(context.Background(), Options{
				Env: tc.env, Episodes: 8, Seed: &seed, Remote: []remoteenv.Config{broken},
				DataDir: filepath.Join(t.TempDir(), "nats"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := ExitStatus(sum, err); got != tc.status || sum.Failures != tc.failures || !sum.Started {
				t.Fatalf("exit status %d with %d failures (started %v), want %d with %d: %s", got, sum.Failures, sum.Started, tc.status, tc.failures, sum)
			}
			if oerr := sum.Outcome(); !errors.Is(oerr, tc.outcomeErr) || (oerr == nil) != (tc.outcomeErr == nil) {
				t.Fatalf("outcome %v, want %v", oerr, tc.outcomeErr)
			}
			if tc.failures == 0 {
				return
			}
			if sum.FailureKinds[messages.FailureEpisode] != tc.failures {
				t.Errorf("failure kinds %v", sum.FailureKinds)
			}
			want := fmt.Sprintf("failure kinds: episode=%d", tc.failures)
			if s := sum.String(); !strings.Contains(s, want) || !strings.Contains(s, "/reset: HTTP 500: env crashed") {
				t.Errorf("summary does not name the failures' kinds and reason:\n%s", s)
			}
		})
	}
}

func TestExitStatusMapping(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		sum  Summary
		err  error
		want int
	}{
		{Summary{}, boom, ExitStartup},
		{Summary{Started: true, Episodes: 4, Trajectories: 1}, boom, ExitUnfinished},
		{Summary{Started: true, Episodes: 4, Trajectories: 4}, nil, ExitOK},
		{Summary{Started: true, Episodes: 4, Trajectories: 3, Failures: 1}, nil, ExitSomeFailed},
		{Summary{Started: true, Episodes: 4, Failures: 4}, nil, ExitAllFailed},
	} {
		if got := ExitStatus(tc.sum, tc.err); got != tc.want {
			t.Errorf("ExitStatus(%+v, %v) = %d, want %d", tc.sum, tc.err, got, tc.want)
		}
	}
}

// TestRunUnreachableModelFailsFast: with no model server answering, the run
// ends at once, naming each URL and why, before writing anything.
func TestRunUnreachableModelFailsFast(t *testing.T) {
	urls := []string{closedURL(t), closedURL(t)}
	var out bytes.Buffer
	start := time.Now()
	sum, err := Run(context.Background(), Options{
		Env: "game:GuessTheNumber-v0", Episodes: 4, VLLM: urls, Out: &out,
		DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if !errors.Is(err, ErrNoModelServer) {
		t.Fatalf("want ErrNoModelServer, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to fail", took)
	}
	for _, u := range urls {
		if !strings.Contains(err.Error(), u+"/v1/models") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("error %q does not name %s and the cause", err, u)
		}
	}
	if sum.Started || ExitStatus(sum, err) != ExitStartup || out.Len() != 0 {
		t.Errorf("started %v, status %d, %d bytes written", sum.Started, ExitStatus(sum, err), out.Len())
	}
}

// TestCheckModels checks the model servers' check: the model's name, a
// server down beside one up, and a server with /health but no /v1/models.
func TestCheckModels(t *testing.T) {
	ctx := context.Background()
	toy := httptest.NewServer(toyllm.New(toyllm.Options{}).Handler())
	t.Cleanup(toy.Close)
	healthOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(healthOnly.Close)
	down := closedURL(t)

	if err := CheckModels(ctx, []string{toy.URL}, "", 0, nil); err != nil {
		t.Errorf("any model: %v", err)
	}
	if err := CheckModels(ctx, []string{toy.URL}, toyllm.DefaultModel, 0, nil); err != nil {
		t.Errorf("the served model: %v", err)
	}
	err := CheckModels(ctx, []string{toy.URL}, "Qwen/Qwen3-1.7B", 0, nil)
	if !errors.Is(err, ErrModelNotServed) || !strings.Contains(err.Error(), toyllm.DefaultModel) || !strings.Contains(err.Error(), toy.URL) {
		t.Errorf("another model: want ErrModelNotServed naming the server and what it serves, got %v", err)
	}
	logs := &bustest.LogRecorder{Min: slog.LevelWarn}
	if err := CheckModels(ctx, []string{down, toy.URL}, "", 0, slog.New(logs)); err != nil {
		t.Errorf("one of two down: %v", err)
	}
	if lines := logs.Lines(); len(lines) != 1 || !strings.Contains(lines[0], down) {
		t.Errorf("the server down is not logged: %q", lines)
	}
	if err := CheckModels(ctx, []string{healthOnly.URL}, "m", 0, nil); err != nil {
		t.Errorf("/health only, model named: %v", err)
	}
	if err := CheckModels(ctx, []string{healthOnly.URL}, "", 0, nil); !errors.Is(err, ErrNoModelServer) || !strings.Contains(err.Error(), "answers /health") {
		t.Errorf("/health only, no model named: want ErrNoModelServer, got %v", err)
	}
}

// TestRunUnknownEnvNamesDatasetLine: a dataset row naming an unknown env
// stops the run before it starts, naming the row's line in the file.
func TestRunUnknownEnvNamesDatasetLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	rows := `{"prompt": "a", "env": "game:GuessTheNumber-v0"}

{"prompt": "b"}
{"prompt": "c", "env": "game:NoSuchGame-v0"}
{"prompt": "d", "env": "game:NoSuchGame-v1"}
`
	if err := os.WriteFile(path, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Dataset: path, Env: "game:GuessTheNumber-v0", Out: &out, DataDir: filepath.Join(t.TempDir(), "nats")})
	if !errors.Is(err, envs.ErrUnknownEnv) {
		t.Fatalf("want ErrUnknownEnv, got %v", err)
	}
	for _, want := range []string{path + " line 4", "(and line 5)", `"game:NoSuchGame-v0"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if sum.Started || out.Len() != 0 {
		t.Errorf("started %v, %d bytes written", sum.Started, out.Len())
	}
}

// TestRunDataDirInUse runs two jobs on one data dir at once: the second
// fails before it starts, naming the first's process; the first is
// unaffected until it is cancelled (an unfinished run).
func TestRunDataDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		sum Summary
		err error
	}
	first := make(chan result, 1)
	progress := make(chan int, 8)
	go func() {
		// Slow episodes, one at a time: the run is still going when the
		// second starts, and when it is cancelled.
		sum, err := Run(ctx, Options{
			Env: "game:GuessTheNumber-v0", Episodes: 8, Concurrency: 1, DataDir: dir,
			ToyLLM:   toyllm.Options{TokenLatency: 5 * time.Millisecond},
			Progress: func(done, _ int) { progress <- done },
		})
		first <- result{sum, err}
	}()
	lock := filepath.Join(dir, bus.LockFileName)
	bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		data, err := os.ReadFile(lock)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), strconv.Itoa(os.Getpid())) {
			return fmt.Errorf("lock file says %q", data)
		}
		return nil
	})

	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Env: "game:GuessTheNumber-v0", Episodes: 4, DataDir: dir, Out: &out})
	if !errors.Is(err, bus.ErrDataDirInUse) {
		t.Fatalf("second run on %s: want ErrDataDirInUse, got %v", dir, err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || sum.Started || out.Len() != 0 {
		t.Errorf("error %q, started %v, %d bytes written", err, sum.Started, out.Len())
	}

	select {
	case <-progress:
	case <-time.After(60 * time.Second):
		t.Fatal("the first run finished no episode")
	}
	cancel()
	var r result
	select {
	case r = <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("the first run did not end when cancelled")
	}
	if !errors.Is(r.err, context.Canceled) || ExitStatus(r.sum, r.err) != ExitUnfinished {
		t.Errorf("cancelled run: %v, status %d", r.err, ExitStatus(r.sum, r.err))
	}
	// The dir is free again.
	seed := uint64(1)
	if sum, err := Run(context.Background(), Options{Env: "game:GuessTheNumber-v0", Episodes: 2, Seed: &seed, DataDir: dir}); err != nil || sum.Trajectories != 2 {
		t.Fatalf("after the first ended: %v (%s)", err, sum)
	}
}
