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

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// TestConsumeServesMetrics: rollout consume --metrics serves the reader's
// counts (records read, records it could not decode) and its readiness
// while it reads.
func TestConsumeServesMetrics(t *testing.T) {
	bin := rolloutBin(t)
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir()})
	js := bustest.JetStream(t, s, "producer")
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
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
	p := &process{cmd: exec.CommandContext(ctx, bin, "consume", "--nats", s.ClientURL(), "--kind", "failures", "--run", "r1",
		"--out", filepath.Join(t.TempDir(), "failures.jsonl"), "--every", "0", "--metrics", addr), done: make(chan error, 1)}
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
