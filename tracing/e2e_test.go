package tracing_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
)

// span is one received span, flattened.
type span struct {
	service, name       string
	traceID, id, parent string
	attrs               map[string]any
}

// receiver is an in-process OTLP/HTTP trace collector: it decodes every export the way a real
// collector does and keeps the spans.
type receiver struct {
	mu    sync.Mutex
	spans []span
	posts int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != tracing.TracesPath {
		http.Error(w, "want POST "+tracing.TracesPath, http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.posts++
	for _, rs := range export.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, flatten(service, s))
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func flatten(service string, s *tracepb.Span) span {
	out := span{
		service: service, name: s.Name, traceID: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId),
		parent: hex.EncodeToString(s.ParentSpanId), attrs: map[string]any{},
	}
	for _, kv := range s.Attributes {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out.attrs[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out.attrs[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			out.attrs[kv.Key] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			out.attrs[kv.Key] = v.BoolValue
		}
	}
	return out
}

func (r *receiver) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...)
}

// tapped is every message a plain NATS subscriber saw on the subjects of an episode's way:
// requests, steps, and the generate and tokenize requests.
type tapped struct {
	mu   sync.Mutex
	msgs map[string][]*nats.Msg // by kind: episode, step, generate, tokenize
}

func tap(t *testing.T, url string) *tapped {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tp := &tapped{msgs: map[string][]*nats.Msg{}}
	subj := messages.NewSubjects("")
	for kind, subject := range map[string]string{
		"episode": "rf.episodes.>", "step": "rf.steps.>", "generate": subj.Generate(), "tokenize": subj.Tokenize(),
	} {
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
			tp.mu.Lock()
			tp.msgs[kind] = append(tp.msgs[kind], m)
			tp.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tp
}

func (tp *tapped) get(kind string) []*nats.Msg {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]*nats.Msg(nil), tp.msgs[kind]...)
}

// syncBuffer is a bytes.Buffer safe for the actors' concurrent log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// traj is what the test reads of a trajectory's JSON line.
type traj struct {
	EpisodeID string                 `json:"episode_id"`
	Turns     int                    `json:"turns"`
	TraceID   string                 `json:"trace_id"`
	Timings   []messages.TurnTimings `json:"timings"`
	SubmitNs  int64                  `json:"submit_time_ns"`
	DoneNs    int64                  `json:"done_time_ns"`
}

// TestTracingEndToEnd runs real episodes through a real fleet (a NATS server, the stand-in
// model over HTTP, the three actors) with OTLP export to an in-process collector, in a
// multi-turn chat style and a single-turn style, and checks the trace from submission to
// trajectory: the same trace id in the request, every step, every traceparent header and the
// trajectory; a timing entry per turn whose parts fit in its wall time; a turn span per turn
// and a generate span per model call, the child of its turn, and the collector's outcome span
// in the same trace; and JSON log lines naming the episode and its trace.
func TestTracingEndToEnd(t *testing.T) {
	for _, style := range []string{messages.ObsChat, messages.ObsConcat} {
		t.Run(style, func(t *testing.T) { testTracing(t, style) })
	}
}

func testTracing(t *testing.T, style string) {
	const episodes = 6
	s := bustest.RunListeningServer(t, bus.ServerOptions{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir()})
	tp := tap(t, s.ClientURL())

	var rcv receiver
	collector := httptest.NewServer(&rcv)
	defer collector.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp, err := tracing.Start(ctx, tracing.Options{URL: collector.URL, Service: "rollout-test"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	var out bytes.Buffer
	sum, err := fleet.Run(ctx, fleet.Options{
		Env: "game:GuessTheNumber-v0", Episodes: episodes, ObsStyle: style, NATS: s.ClientURL(), Concurrency: 4,
		Out: &out, Tracer: exp.Tracer("rollfleet/test"),
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Trajectories != episodes {
		t.Fatalf("%d trajectories of %d episodes", sum.Trajectories, episodes)
	}
	// The spans of a process go out with its exporter's shutdown.
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	trajs := map[string]traj{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var tr traj
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			t.Fatal(err)
		}
		trajs[tr.EpisodeID] = tr
	}
	if len(trajs) != episodes {
		t.Fatalf("%d trajectory lines", len(trajs))
	}

	// The trace id: set at submission, the same on every message of the episode.
	requests := map[string]string{} // episode → trace id
	for _, m := range tp.get("episode") {
		req, err := messages.Decode[messages.EpisodeRequest](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		tid := headerTrace(t, m)
		if req.TraceID == "" || tid != req.TraceID {
			t.Fatalf("episode %s: body trace id %q, header %q", req.EpisodeID, req.TraceID, tid)
		}
		requests[req.EpisodeID] = req.TraceID
	}
	if len(requests) != episodes {
		t.Fatalf("saw %d episode requests", len(requests))
	}
	turnsSeen := map[string]int{}
	for _, m := range tp.get("step") {
		ev, err := messages.Decode[messages.StepEvent](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		want := requests[ev.EpisodeID]
		if ev.TraceID != want || headerTrace(t, m) != want {
			t.Fatalf("step %s/%d: trace id %q, header %q, want %q", ev.EpisodeID, ev.Turn, ev.TraceID, headerTrace(t, m), want)
		}
		if ev.Turn == 0 && ev.Episode.TraceID != want {
			t.Fatalf("turn 0 of %s carries a request with trace id %q", ev.EpisodeID, ev.Episode.TraceID)
		}
		if !ev.IsEndMarker() {
			turnsSeen[ev.EpisodeID]++
			if ev.Timings.Wall <= 0 {
				t.Fatalf("step %s/%d has no timings: %+v", ev.EpisodeID, ev.Turn, ev.Timings)
			}
		}
	}
	genParents := map[string]bool{} // span ids named by generate requests' headers
	for _, kind := range []string{"generate", "tokenize"} {
		msgs := tp.get(kind)
		if len(msgs) == 0 {
			t.Fatalf("no %s request seen", kind)
		}
		for _, m := range msgs {
			var id string
			if kind == "generate" {
				r, err := messages.Decode[messages.GenerateRequest](m.Data)
				if err != nil {
					t.Fatal(err)
				}
				id = r.EpisodeID
			} else {
				r, err := messages.Decode[messages.TokenizeRequest](m.Data)
				if err != nil {
					t.Fatal(err)
				}
				id = r.EpisodeID
			}
			tid, sid, ok := messages.ParseTraceparent(m.Header.Get(messages.HeaderTraceparent))
			if !ok || tid != requests[id] {
				t.Fatalf("%s request of %s: traceparent %q, want trace %s", kind, id, m.Header.Get(messages.HeaderTraceparent), requests[id])
			}
			if kind == "generate" {
				genParents[sid] = true
			}
		}
	}

	// The trajectory: the trace id, and one plausible timing entry per turn.
	for id, tr := range trajs {
		if tr.TraceID != requests[id] {
			t.Fatalf("trajectory %s: trace id %q, want %q", id, tr.TraceID, requests[id])
		}
		if len(tr.Timings) != tr.Turns || tr.Turns != turnsSeen[id] || tr.Turns == 0 {
			t.Fatalf("trajectory %s: %d timings, %d turns, %d turn steps", id, len(tr.Timings), tr.Turns, turnsSeen[id])
		}
		var walls int64
		for k, tm := range tr.Timings {
			for name, ns := range map[string]int64{
				"queue": tm.Queue, "tokenize": tm.Tokenize, "generate": tm.Generate, "model": tm.Model,
				"step": tm.Step, "publish": tm.Publish, "wall": tm.Wall,
			} {
				if ns < 0 {
					t.Fatalf("%s turn %d: %s_ns %d", id, k, name, ns)
				}
			}
			if tm.Parts() > tm.Wall {
				t.Fatalf("%s turn %d: parts %d > wall %d: %+v", id, k, tm.Parts(), tm.Wall, tm)
			}
			if tm.Wall == 0 || tm.Generate == 0 || tm.Model == 0 || tm.Model > tm.Generate || tm.Endpoint == "" {
				t.Fatalf("%s turn %d: implausible %+v", id, k, tm)
			}
			if k == 0 && tm.Tokenize == 0 {
				t.Fatalf("%s turn 0 spent nothing tokenizing its prompt: %+v", id, tm)
			}
			if (k == 0) != (tm.Publish == 0) {
				t.Fatalf("%s turn %d: publish_ns %d (only turn 0 waits for no earlier step)", id, k, tm.Publish)
			}
			walls += tm.Wall
		}
		// Turn 0 starts at the submission and the last turn ends before the collector
		// assembled the trajectory.
		if span := tr.DoneNs - tr.SubmitNs; walls > span {
			t.Fatalf("%s: turns took %d ns in all, more than submission to done (%d)", id, walls, span)
		}
	}

	// The spans: an episode span, a turn span per turn in the episode's trace, and a
	// generate span per model call, the child of its turn.
	spans := rcv.all()
	turnSpans := map[string]span{}
	episodeSpans := map[string]span{}
	for _, sp := range spans {
		if sp.service != "rollout-test" {
			t.Fatalf("span of service %q", sp.service)
		}
		switch sp.name {
		case "episode":
			episodeSpans[sp.id] = sp
		case "turn":
			turnSpans[sp.id] = sp
		}
	}
	perEpisode := map[string]int{}
	for _, sp := range turnSpans {
		id, _ := sp.attrs["rollfleet.episode"].(string)
		if sp.traceID != requests[id] {
			t.Fatalf("turn span of %q in trace %s, want %s", id, sp.traceID, requests[id])
		}
		ep, ok := episodeSpans[sp.parent]
		if !ok || ep.traceID != sp.traceID {
			t.Fatalf("turn span %s of %s: parent %q is not its episode's span", sp.id, id, sp.parent)
		}
		if sp.attrs["rollfleet.env"] != "game:GuessTheNumber-v0" || sp.attrs["rollfleet.tokens"] == nil {
			t.Fatalf("turn span attributes %v", sp.attrs)
		}
		perEpisode[id]++
	}
	for id, tr := range trajs {
		if perEpisode[id] != tr.Turns {
			t.Fatalf("%s: %d turn spans for %d turns", id, perEpisode[id], tr.Turns)
		}
	}
	gens := 0
	for _, sp := range spans {
		if sp.name != "generate" {
			continue
		}
		gens++
		parent, ok := turnSpans[sp.parent]
		if !ok || parent.traceID != sp.traceID || !genParents[sp.parent] {
			t.Fatalf("generate span %s (trace %s) has parent %q, not a turn span of its trace", sp.id, sp.traceID, sp.parent)
		}
		if sp.attrs["rollfleet.episode"] != parent.attrs["rollfleet.episode"] || sp.attrs["rollfleet.endpoint"] == "" {
			t.Fatalf("generate span attributes %v under turn %v", sp.attrs, parent.attrs)
		}
	}
	if gens != len(turnSpans) {
		t.Fatalf("%d generate spans for %d turn spans", gens, len(turnSpans))
	}
	outcomes := map[string]bool{}
	for _, sp := range spans {
		if sp.name == "outcome" {
			id, _ := sp.attrs["rollfleet.episode"].(string)
			if sp.traceID != requests[id] || sp.attrs["rollfleet.outcome"] != "trajectory" || outcomes[id] {
				t.Fatalf("outcome span %v in trace %s, want one in %s", sp.attrs, sp.traceID, requests[id])
			}
			outcomes[id] = true
		}
	}
	if len(outcomes) != episodes {
		t.Fatalf("%d outcome spans for %d episodes", len(outcomes), episodes)
	}
	t.Logf("%d spans in %d exports: %d episode, %d turn, %d generate", len(spans), rcv.posts, len(episodeSpans), len(turnSpans), gens)

	// The logs: JSON lines, each of an episode naming the episode and its trace.
	finished := 0
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if rec["msg"] == "episode started" || rec["msg"] == "episode finished" {
			id, _ := rec["episode"].(string)
			if rec["trace_id"] != requests[id] || id == "" {
				t.Fatalf("episode log line without its episode or trace: %v", rec)
			}
			if rec["msg"] == "episode finished" {
				finished++
			}
		}
	}
	if finished != episodes {
		t.Fatalf("%d 'episode finished' lines for %d episodes:\n%s", finished, episodes, logs.String())
	}
}

// headerTrace is the trace id of m's traceparent header.
func headerTrace(t *testing.T, m *nats.Msg) string {
	t.Helper()
	tid, _, ok := messages.ParseTraceparent(m.Header.Get(messages.HeaderTraceparent))
	if !ok {
		t.Fatalf("%s: no valid traceparent header: %v", m.Subject, m.Header)
	}
	return tid
}

func TestEndpointURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:4318":             "http://localhost:4318/v1/traces",
		"http://localhost:4318/":            "http://localhost:4318/v1/traces",
		"https://otel.example:443/custom/v": "https://otel.example:443/custom/v",
	} {
		got, err := tracing.EndpointURL(in)
		if err != nil || got != want {
			t.Errorf("EndpointURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"localhost:4318", "grpc://h:4317", "http://", "::"} {
		if _, err := tracing.EndpointURL(bad); err == nil {
			t.Errorf("EndpointURL(%q) accepted", bad)
		}
	}
}

func TestNilExporterIsOff(t *testing.T) {
	var e *tracing.Exporter
	if e.Tracer("x") != nil || e.Shutdown(context.Background()) != nil {
		t.Fatal("a nil exporter is not export turned off")
	}
	exp, err := tracing.StartIf(context.Background(), tracing.Options{})
	if exp != nil || err != nil {
		t.Fatalf("StartIf without a URL = %v, %v", exp, err)
	}
}
