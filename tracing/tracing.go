// Package tracing exports OpenTelemetry spans of episodes over OTLP/HTTP. The env worker records
// a span per delivery of an episode ("episode") and one per turn ("turn"), in a trace whose id is
// the episode's trace id; the LLM worker records one per generate request ("generate"), the child
// of its turn through the request's traceparent header; the collector records one per outcome
// stored ("outcome"), in the same trace. Export is off unless a collector URL is given; the
// actors then skip all span work (a nil trace.Tracer).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/messages"
)

// TracesPath is the OTLP/HTTP path of traces, added to a collector URL that has no path.
const TracesPath = "/v1/traces"

// Options configures an Exporter.
type Options struct {
	// URL is the OTLP/HTTP collector: http(s)://host:port, with TracesPath added when it has
	// no path (Jaeger and the OpenTelemetry Collector listen on port 4318), or a full URL.
	URL string
	// Service is the service.name of the spans: the process (envworker, llmworker …).
	Service string
	// BatchTimeout is the longest a span waits to be sent (default 5s).
	BatchTimeout time.Duration
	// Logger receives export errors, at most one line a minute (default slog.Default()).
	Logger *slog.Logger
}

// Exporter sends a process's spans to an OTLP/HTTP collector. A nil *Exporter is export turned
// off: its Tracer is nil and its Shutdown does nothing.
type Exporter struct {
	tp *sdktrace.TracerProvider
}

// EndpointURL checks a collector URL and returns the URL spans are posted to.
func EndpointURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("tracing: collector URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("tracing: collector URL %q: want http(s)://host:port[/path]", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = TracesPath
	}
	return u.String(), nil
}

// Start sets up export to opts.URL. Spans are sent in batches, in the background; Shutdown
// sends what is left. Nothing is sent to the collector before the first span ends, so an
// unreachable collector shows only as logged export errors.
func Start(ctx context.Context, opts Options) (*Exporter, error) {
	endpoint, err := EndpointURL(opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 5 * time.Second
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	setErrorHandler(opts.Logger)
	res := resource.NewSchemaless(attribute.String("service.name", opts.Service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(opts.BatchTimeout)),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	)
	return &Exporter{tp: tp}, nil
}

// Tracer returns the named tracer, or nil when e is nil (export off).
func (e *Exporter) Tracer(name string) trace.Tracer {
	if e == nil {
		return nil
	}
	return e.tp.Tracer(name)
}

// Shutdown sends the spans not yet sent and stops the exporter; ctx bounds the wait.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e == nil {
		return nil
	}
	if err := e.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// errorLog paces OpenTelemetry's export errors: one line a minute, with how many were left out.
var errorLog struct {
	sync.Mutex
	log     *slog.Logger
	last    time.Time
	skipped int
}

var errorHandlerOnce sync.Once

// setErrorHandler routes OpenTelemetry's errors (a collector that cannot be reached, say) to
// log, paced. The handler is process-wide; the latest logger wins.
func setErrorHandler(log *slog.Logger) {
	errorLog.Lock()
	errorLog.log = log
	errorLog.Unlock()
	errorHandlerOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			errorLog.Lock()
			defer errorLog.Unlock()
			if now := time.Now(); now.Sub(errorLog.last) >= time.Minute {
				errorLog.log.Warn("OpenTelemetry export failed", "err", err, "errors_not_logged", errorLog.skipped)
				errorLog.last, errorLog.skipped = now, 0
				return
			}
			errorLog.skipped++
		}))
	})
}

type traceIDKey struct{}

// WithTraceID returns ctx in which a new root span takes the given trace id (32 hex digits)
// instead of a random one: an episode's spans then belong to the episode's trace. An invalid id
// leaves ctx as it is.
func WithTraceID(ctx context.Context, traceID string) context.Context {
	id, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, traceIDKey{}, id)
}

// idGenerator makes random ids, and takes a root span's trace id from its context when
// WithTraceID put one there.
type idGenerator struct{}

// NewIDs returns the ids of a root span.
func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	for !ok || !tid.IsValid() {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			tid[i], tid[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
		ok = true
	}
	return tid, newSpanID()
}

// NewSpanID returns the id of a child span.
func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		x := rand.Uint64()
		for i := range 8 {
			sid[i] = byte(x >> (56 - 8*i))
		}
	}
	return sid
}

// Traceparent is the W3C traceparent header value of span, in trace traceID: the span's own
// ids when it is recorded, else traceID and a fresh random span id.
func Traceparent(span trace.Span, traceID string) string {
	if span != nil {
		if sc := span.SpanContext(); sc.IsValid() {
			return messages.Traceparent(sc.TraceID().String(), sc.SpanID().String())
		}
	}
	return messages.Traceparent(traceID, messages.NewSpanID())
}

// RemoteParent returns ctx with the span context of a traceparent header as the remote parent of
// the spans started in it; ctx as it is when the header is not a valid traceparent.
func RemoteParent(ctx context.Context, traceparent string) context.Context {
	tid, sid, ok := messages.ParseTraceparent(traceparent)
	if !ok {
		return ctx
	}
	var sc trace.SpanContextConfig
	var err error
	if sc.TraceID, err = trace.TraceIDFromHex(tid); err != nil {
		return ctx
	}
	if sc.SpanID, err = trace.SpanIDFromHex(sid); err != nil {
		return ctx
	}
	sc.TraceFlags, sc.Remote = trace.FlagsSampled, true
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(sc))
}

// StartIf starts export when opts.URL is set and returns nil (export off) otherwise.
func StartIf(ctx context.Context, opts Options) (*Exporter, error) {
	if strings.TrimSpace(opts.URL) == "" {
		return nil, nil
	}
	return Start(ctx, opts)
}
