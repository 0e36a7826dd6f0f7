package cmdutil

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, "debug", LogJSON).With("episode", "ep-1", "trace_id", "4bf92f3577b34da6a3ce929d0e0e4736").Debug("episode started", "attempt", 2)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("json log line %q: %v", buf.String(), err)
	}
	if rec["msg"] != "episode started" || rec["episode"] != "ep-1" || rec["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || rec["attempt"] != float64(2) || rec["level"] != "DEBUG" {
		t.Fatalf("json log line %v", rec)
	}
	buf.Reset()
	newLogger(&buf, "warn", LogText).Info("hidden")
	newLogger(&buf, "warn", LogText).Warn("shown", "episode", "ep-2")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `msg=shown episode=ep-2`) {
		t.Fatalf("text log %q", got)
	}
}

func TestStartTracingOff(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	exp, stop, err := StartTracing(context.Background(), "", "x", log)
	if exp != nil || err != nil {
		t.Fatalf("no --otlp: %v, %v", exp, err)
	}
	stop()
	if _, _, err := StartTracing(context.Background(), "localhost:4318", "x", log); err == nil {
		t.Fatal("a collector URL without a scheme is accepted")
	}
}
