package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// TestConsumeServesMetrics: rollout consume --metrics serves the reader's
// counts (records read, records it could not decode) and its readiness
// while it reads.
func TestConsumeServesMetrics(t *testing.T) {
	bin := rolloutBin(t)
	s, js, subj, ctx := consumeServer(t)
	failure, err := os.ReadFile("../../clients/python/tests/fixtures/failure.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{failure, failure, []byte("\xc1 not msgpack")} {
		if _, err := js.Publish(ctx, subj.Failures("r1", messages.FailureEpisode), data); err != nil {
			t.Fatal(err)
		}
	}

	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startConsume(t, ctx, bin, "--nats", s.ClientURL(), "--kind", "failures", "--run", "r1",
		"--out", filepath.Join(t.TempDir(), "failures.jsonl"), "--every", "0", "--metrics", addr)
	want := []string{
		`rollfleet_records_read_total{kind="failures"} 3`,
		`rollfleet_records_malformed_total{kind="failures"} 1`,
		`rollfleet_stream_messages{stream="RF_FAILURES"} 0`,
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		code, body, err := httpGet("http://" + addr + "/metrics")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/metrics: %d %v", code, err)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/metrics has no %s", w)
			}
		}
		return nil
	})
	if code, body, err := httpGet("http://" + addr + "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz: %d %q %v", code, body, err)
	}
	p.stop(t)
}

// httpGet fetches url and returns its status and body.
func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String(), err
}

// startConsume starts "rollout consume args…", killed at the end of the test
// if it still runs.
func startConsume(t *testing.T, ctx context.Context, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.CommandContext(ctx, bin, append([]string{"consume"}, args...)...), done: make(chan error, 1)}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// TestConsumeGroupsDrainsTrajectories: a reader of one run's groups with
// --drain takes that run's trajectories off their stream too (a group holds
// them), leaves another run's where they are, and deletes its trajectories
// consumer when it stops.
func TestConsumeGroupsDrainsTrajectories(t *testing.T) {
	bin := rolloutBin(t)
	s, js, subj, ctx := consumeServer(t)
	fixture := func(name string) []byte {
		data, err := os.ReadFile("../../clients/python/tests/fixtures/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	group, trajectory := fixture("group.msgpack"), fixture("trajectory_chat.msgpack")
	for _, m := range []struct {
		subject string
		data    []byte
	}{
		{subj.Groups("r1", "env"), group},
		{subj.Trajectories("r1", "env"), trajectory},
		{subj.Trajectories("r1", "env"), trajectory},
		{subj.Trajectories("r2", "env"), trajectory},
	} {
		if _, err := js.Publish(ctx, m.subject, m.data); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "groups.jsonl")
	p := startConsume(t, ctx, bin, "--nats", s.ClientURL(), "--run", "r1", "--drain", "--out", out, "--every", "0")
	left := func(stream string) uint64 {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if g, tr := left(subj.StreamGroups()), left(subj.StreamTrajectories()); g != 0 || tr != 1 {
			return fmt.Errorf("%d groups and %d trajectories stored, want 0 and r2's 1", g, tr)
		}
		return nil
	})
	p.stop(t)
	if data, err := os.ReadFile(out); err != nil || strings.Count(string(data), "\n") != 1 {
		t.Errorf("%s: %d lines (%v), want the one group", out, strings.Count(string(data), "\n"), err)
	}
	// Its trajectories consumer went with it: a later reader of them is let in.
	if _, err := js.CreateOrUpdateConsumer(ctx, subj.StreamTrajectories(), jetstream.ConsumerConfig{
		Durable: "later", FilterSubject: subj.TrajectoriesOfRun("r1"), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Errorf("a later reader of r1's trajectories: %v", err)
	}
}

// consumeServer starts a listening server with rollfleet's streams and
// returns it, a producer's JetStream context, the subjects and a context
// that ends with the test (a minute at most).
func consumeServer(t *testing.T) (*server.Server, jetstream.JetStream, messages.Subjects, context.Context) {
	t.Helper()
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir()})
	js := bustest.JetStream(t, s, "producer")
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return s, js, subj, ctx
}
