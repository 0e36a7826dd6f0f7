package cmdutil

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/rollfleet/rollfleet/tracing"
)

// Log formats of --log-format.
const (
	LogText = "text"
	LogJSON = "json"
)

// NewLogger returns a logger on stderr at the given level, in the given format: "text"
// (key=value pairs) or "json" (one JSON object per line); anything else is text.
func NewLogger(level, format string) *slog.Logger { return newLogger(os.Stderr, level, format) }

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// tracingShutdownTimeout bounds the flush of the spans left when a process stops.
const tracingShutdownTimeout = 10 * time.Second

// StartTracing starts OpenTelemetry export to an OTLP/HTTP collector when url is set, for the
// process named service. It returns the exporter (nil when url is empty: no export) and a stop
// function that sends the spans left and shuts the exporter down; call it once the process's
// work is over.
func StartTracing(ctx context.Context, url, service string, log *slog.Logger) (*tracing.Exporter, func(), error) {
	exp, err := tracing.StartIf(ctx, tracing.Options{URL: url, Service: service, Logger: log})
	if err != nil || exp == nil {
		return nil, func() {}, err
	}
	log.Info("exporting OpenTelemetry spans", "otlp", url)
	return exp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := exp.Shutdown(sctx); err != nil {
			log.Warn("OpenTelemetry spans not all sent", "err", err)
		}
	}, nil
}
