// Package llm is the LLM worker actor: it answers GenerateRequest and
// TokenizeRequest in a NATS queue group by forwarding them to vLLM-compatible
// model servers, choosing the endpoint, bounding in-flight work per endpoint
// and retrying infrastructure failures on another endpoint. For the
// OpenAI-compatible gateway it also answers DetokenizeRequest,
// ChatTokenizeRequest and ModelInfoRequest.
package llm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
	"github.com/rollfleet/rollfleet/vllm"
)

var errNoEndpoint = errors.New("llm: no model endpoint left to try")

// errExpired answers a request whose requester had stopped waiting before
// its turn came; the requester retries with a fresh deadline.
var errExpired = errors.New("llm: request deadline passed before it was served")

// withDeadline bounds ctx by a request's deadline (unix nanoseconds, 0 = none).
func withDeadline(ctx context.Context, deadline int64) (context.Context, context.CancelFunc) {
	if deadline == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, time.Unix(0, deadline))
}

// Options configures a Worker. Zero values take the defaults noted.
type Options struct {
	// Endpoints are model server base URLs (vLLM or the stand-in). Required.
	Endpoints []string
	// Model is the served model name; empty asks each server for its first.
	Model string
	// MaxInFlight, when positive, is a fixed bound on concurrent requests
	// per endpoint. Zero (the default) adapts each endpoint's bound to its
	// server's load: it starts at 64 and follows what the server's /metrics
	// reports (requests running and waiting, KV-cache usage) and its time
	// per generated token, so that the server stays busy without a deep
	// queue; a server without /metrics keeps the bound it has (and is asked
	// again only every 60 intervals).
	MaxInFlight int
	// LoadInterval is how often an adaptive bound reads its server's
	// /metrics (default 500ms).
	LoadInterval time.Duration
	// Routing is how requests are spread over the endpoints, one of
	// RoutingPolicies (default RoutingSticky: each episode on its own
	// server, for its prefix cache, spilling to the least loaded when that
	// one is full); New fails with ErrUnknownRouting for another.
	Routing string
	// RoutingWait is how long RoutingStickyWait lets a request wait for a
	// slot of its episode's server before it goes to another (default 1s).
	RoutingWait time.Duration
	// Subjects names the subjects (default prefix "rf").
	Subjects messages.Subjects
	// Queue is the queue group (default "llm").
	Queue string
	// CallTimeout bounds one HTTP call to a model server (default 120s).
	CallTimeout time.Duration
	// HealthInterval is how often each endpoint's /health is probed
	// (default 2s): a failed probe marks it down, an answered one up.
	HealthInterval time.Duration
	// ID names the worker in status answers (default "llm-" and a unique
	// suffix).
	ID string
	// Metrics, when set, receives the worker's measurements.
	Metrics Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tracer, when set, records a span per generate request, the child of
	// the requester's turn span named by the request's traceparent header;
	// nil (the default) records none.
	Tracer trace.Tracer
}

func (o *Options) setDefaults() {
	if o.ID == "" {
		o.ID = "llm-" + nuid.Next()
	}
	if o.MaxInFlight < 0 {
		o.MaxInFlight = 0
	}
	if o.LoadInterval <= 0 {
		o.LoadInterval = 500 * time.Millisecond
	}
	if o.Routing == "" {
		o.Routing = RoutingSticky
	}
	if o.RoutingWait <= 0 {
		o.RoutingWait = DefaultRoutingWait
	}
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	if o.Queue == "" {
		o.Queue = "llm"
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 120 * time.Second
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Stats are a worker's counters.
type Stats struct {
	Generate, Tokenize, Retries, Errors, Malformed uint64
	// Detokenize and Info count the gateway's detokenize and model-info
	// requests (chat tokenizations count as Tokenize).
	Detokenize, Info uint64
	// Expired counts requests dropped because their deadline had passed.
	Expired uint64
	// Aborted counts generations cancelled by an aborting pause (each is
	// generated again after the resume).
	Aborted uint64
}

// Worker is one LLM worker. Create it with New and run it with Run.
type Worker struct {
	nc     *nats.Conn
	opts   Options
	log    *slog.Logger
	router router

	generate, tokenize, retries, errs, malformed, expired atomic.Uint64
	detokenize, info, aborted                             atomic.Uint64
	// gens is set by Run, once the policy state is known.
	gens *generations
	// watcher is the policy watcher of gens, for Policy.
	watcher atomic.Pointer[control.Watcher]
	// ready is closed once the server has the worker's subscriptions.
	ready     chan struct{}
	readyOnce sync.Once
	// svc, when set, takes the requests as service endpoints, on svcConn.
	svc     micro.Service
	svcConn *nats.Conn
}

// New builds a worker for the given endpoints.
func New(nc *nats.Conn, opts Options) (*Worker, error) {
	opts.setDefaults()
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("llm: at least one model endpoint is required")
	}
	if !slices.Contains(RoutingPolicies, opts.Routing) {
		return nil, fmt.Errorf("%w %q (one of %s)", ErrUnknownRouting, opts.Routing, strings.Join(RoutingPolicies, ", "))
	}
	w := &Worker{nc: nc, opts: opts, log: opts.Logger.With("actor", "llm"), ready: make(chan struct{})}
	w.router.policy, w.router.wait = opts.Routing, opts.RoutingWait
	for _, u := range opts.Endpoints {
		c, err := vllm.New(u, vllm.Options{Model: opts.Model, Observer: opts.observer(u)})
		if err != nil {
			return nil, fmt.Errorf("llm: endpoint %q: %w", u, err)
		}
		e := &endpoint{url: c.BaseURL(), client: c, slots: newLimiter(cmp.Or(opts.MaxInFlight, adaptiveStart))}
		e.healthy.Store(true)
		w.router.eps = append(w.router.eps, e)
	}
	return w, nil
}

// Stats returns a snapshot of the counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Generate: w.generate.Load(), Tokenize: w.tokenize.Load(), Retries: w.retries.Load(),
		Errors: w.errs.Load(), Malformed: w.malformed.Load(), Expired: w.expired.Load(),
		Detokenize: w.detokenize.Load(), Info: w.info.Load(), Aborted: w.aborted.Load(),
	}
}

// ServeAsService makes Run take its requests through endpoints of svc, one
// per request subject (generate, tokenize, tokenize_chat, detokenize,
// model_info) on the same subjects and in the same queue group, instead of
// plain subscriptions: the NATS service API then counts each kind's
// requests, so "nats micro stats" shows the worker's real work. Call it
// before Run; Run stops svc when it stops taking requests (micro drains its
// endpoints only all together). nc is svc's connection: the worker is ready
// once the server has registered the endpoints' subscriptions on it too.
func (w *Worker) ServeAsService(svc micro.Service, nc *nats.Conn) { w.svc, w.svcConn = svc, nc }

// Ready is closed once Run's subscriptions are registered with the server.
// A process that starts an env worker beside it waits for it: any other
// subscriber of a request subject (a tap, a monitor) would otherwise hide
// the missing responder, and a request sent too early would wait out its
// whole timeout instead of failing at once with no responders.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Start runs the worker in a goroutine of its own and returns once it is
// ready, with the function that stops it (cancels Run and waits for it to
// return, logging its error). It fails when Run ends before the worker is
// ready, with Run's error, or when ctx ends first. ctx bounds only the
// wait: the worker runs until stop is called.
func (w *Worker) Start(ctx context.Context) (stop func(), err error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	finished := make(chan struct{})
	var runErr error
	go func() {
		defer close(finished)
		runErr = w.Run(rctx)
	}()
	stop = func() {
		cancel()
		<-finished
		if runErr != nil {
			w.log.Error("llm worker stopped", "err", runErr)
		}
	}
	select {
	case <-w.ready:
		return stop, nil
	case <-finished:
		cancel()
		// Run returns nil only once its context ends, which here it has not.
		return nil, fmt.Errorf("llm: the worker stopped before it was ready: %w", runErr)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// Run serves requests until ctx is cancelled, then drains its subscriptions
// and waits for in-flight requests to be answered.
func (w *Worker) Run(ctx context.Context) error {
	// The policy state first: a worker that starts during a pause must hold
	// its first request already.
	ctl, err := control.Watch(ctx, w.nc, control.WatchOptions{Subjects: w.opts.Subjects, Logger: w.log})
	if err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	defer ctl.Close()
	w.gens = newGenerations(ctx, ctl)
	w.watcher.Store(ctl)
	status, err := control.ServeStatus(w.nc, w.opts.Subjects, w.status)
	if err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	defer func() { _ = status.Unsubscribe() }()
	// A pool of handlers as large as the endpoints can take at once (an
	// adaptive bound at its highest), started as the load needs them: no
	// goroutine per request, and the pool itself is the backpressure.
	workers := int64(w.maxInFlight() * len(w.router.eps))
	// Handlers get their own context: a shutdown lets in-flight calls finish.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	var started atomic.Int64
	// The subscription callbacks block on a busy pool, so requests wait in
	// the subscription's pending buffer instead of being dropped. quit
	// stops the pool once no callback can run any more; a callback that
	// still finds it closed belongs to a closed connection, on which no
	// reply could be sent anyway.
	inbox, quit := make(chan job), make(chan struct{})
	serveJobs := func(first job) {
		w.handle(work, first)
		for {
			select {
			case j := <-inbox:
				w.handle(work, j)
			case <-quit:
				return
			}
		}
	}
	enqueue := func(m *nats.Msg) {
		select {
		case <-quit:
			// A service endpoint's late callback: the pool is stopping, and
			// must not gain a handler while it is waited for.
			w.refuse(m)
			return
		default:
		}
		j := job{m: m, at: time.Now()}
		if m.Subject == w.opts.Subjects.Tokenize() {
			// Decoded once, here: a cache hit is answered at once, and a miss
			// takes the decoded request to the pool.
			j.tok, j.err = messages.Decode[messages.TokenizeRequest](m.Data)
			if j.err == nil && w.answerFromCache(m, j.tok) {
				return
			}
		}
		select {
		case inbox <- j:
			return
		default:
		}
		// Every handler is busy: start another while the pool has room.
		// Callbacks stop before the pool is waited for (subs.Wait below).
		for n := started.Load(); n < workers; n = started.Load() {
			if started.CompareAndSwap(n, n+1) {
				wg.Go(func() { serveJobs(j) })
				return
			}
		}
		select {
		case inbox <- j:
		case <-quit:
			w.refuse(m)
		}
	}
	var subs sync.WaitGroup // one count per subscription until its last callback returned
	subscribe := func(name, subject string) (*nats.Subscription, error) {
		if w.svc != nil {
			// micro counts the request once this returns: the hand-off to
			// the pool, not the answer.
			err := w.svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
				enqueue(&nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()})
			}), micro.WithEndpointSubject(subject), micro.WithEndpointQueueGroup(w.opts.Queue), micro.WithEndpointPendingLimits(-1, 256<<20))
			if err != nil {
				return nil, fmt.Errorf("llm: service endpoint %s: %w", subject, err)
			}
			return nil, nil
		}
		s, err := w.nc.QueueSubscribe(subject, w.opts.Queue, enqueue)
		if err != nil {
			return nil, fmt.Errorf("llm: subscribe %s: %w", subject, err)
		}
		// Requests are small; let many queue up rather than drop as a slow consumer.
		_ = s.SetPendingLimits(-1, 256<<20)
		// The closed handler runs after the subscription's last callback,
		// whether a drain or the connection closing ended it; a status
		// listener would miss the latter and wait forever.
		var once sync.Once
		done := func(string) { once.Do(subs.Done) }
		subs.Add(1)
		s.SetClosedHandler(done)
		if !s.IsValid() {
			done("") // closed before the handler was in place
		}
		return s, nil
	}
	var subscriptions []*nats.Subscription
	for _, ep := range []struct{ name, subject string }{
		{"generate", w.opts.Subjects.Generate()}, {"tokenize", w.opts.Subjects.Tokenize()},
		{"tokenize_chat", w.opts.Subjects.TokenizeChat()}, {"detokenize", w.opts.Subjects.Detokenize()},
		{"model_info", w.opts.Subjects.ModelInfo()},
	} {
		s, err := subscribe(ep.name, ep.subject)
		if err != nil {
			for _, s := range subscriptions {
				_ = s.Unsubscribe()
			}
			if w.svc != nil {
				_ = w.svc.Stop()
			}
			close(quit)
			return err
		}
		if s != nil {
			subscriptions = append(subscriptions, s)
		}
	}
	wg.Go(func() { w.announceReady(ctx) })

	for _, e := range w.router.eps {
		wg.Go(func() { w.healthLoop(ctx, e) })
		if w.opts.MaxInFlight == 0 {
			wg.Go(func() { w.adaptLoop(ctx, e) })
		}
	}
	wg.Go(func() { w.gens.abortLoop(ctx) })

	<-ctx.Done()
	// Draining unsubscribes at once and still delivers the requests already
	// received; each is handed to the pool before its subscription closes.
	for _, s := range subscriptions {
		_ = s.Drain()
	}
	if w.svc != nil {
		// The endpoints drain too, but micro tells nobody when their last
		// callback has run: one that comes after quit refuses its request
		// as unavailable, which the requester retries on another worker.
		_ = w.svc.Stop()
	}
	subs.Wait()
	close(quit)
	wg.Wait()
	for _, e := range w.router.eps {
		e.client.CloseIdleConnections()
	}
	return nil
}

// announceReady closes w.ready once a flush shows that the server has
// processed the subscriptions; a failed flush (the connection is down and
// the subscriptions wait for the reconnect) is tried again, unless the
// connection is closed for good.
func (w *Worker) announceReady(ctx context.Context) {
	for ctx.Err() == nil && !w.nc.IsClosed() {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.nc.FlushWithContext(fctx)
		if err == nil && w.svcConn != nil && w.svcConn != w.nc {
			err = w.svcConn.FlushWithContext(fctx)
		}
		cancel()
		if err == nil {
			w.readyOnce.Do(func() { close(w.ready) })
			w.log.Info("llm worker ready", "endpoints", len(w.router.eps), "max_in_flight", w.opts.MaxInFlight, "adaptive", w.opts.MaxInFlight == 0, "routing", w.opts.Routing)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// job is one request for the pool, received at at; a tokenize request
// arrives decoded (or with the error that decoding it gave).
type job struct {
	m   *nats.Msg
	at  time.Time
	tok *messages.TokenizeRequest
	err error
}

func (w *Worker) handle(ctx context.Context, j job) {
	m := j.m
	var reply []byte
	switch m.Subject {
	case w.opts.Subjects.Generate():
		w.generate.Add(1)
		reply = w.marshal(w.serveGenerate(ctx, j))
	case w.opts.Subjects.Tokenize():
		w.tokenize.Add(1)
		reply = w.marshal(w.serveTokenize(ctx, j.tok, j.err))
	case w.opts.Subjects.TokenizeChat():
		w.tokenize.Add(1)
		reply = w.marshal(w.serveTokenizeChat(ctx, m.Data))
	case w.opts.Subjects.Detokenize():
		w.detokenize.Add(1)
		reply = w.marshal(w.serveDetokenize(ctx, m.Data))
	default:
		w.info.Add(1)
		reply = w.marshal(w.serveModelInfo(ctx, m.Data))
	}
	w.respond(m, reply)
}

// respond sends reply to m's requester, if it waits for one.
func (w *Worker) respond(m *nats.Msg, reply []byte) {
	if m.Reply == "" {
		return
	}
	if err := w.nc.Publish(m.Reply, reply); err != nil {
		w.log.Warn("respond failed", "subject", m.Subject, "err", err)
	}
}

// refuse answers a request that came after the worker stopped taking them
// as unavailable, so that its requester retries on another worker at once.
func (w *Worker) refuse(m *nats.Msg) {
	const msg = "llm worker stopping"
	var reply any
	switch m.Subject {
	case w.opts.Subjects.Generate():
		reply = generateFailed(msg, messages.CodeUnavailable)
	case w.opts.Subjects.Tokenize(), w.opts.Subjects.TokenizeChat():
		reply = tokenizeFailed(msg, messages.CodeUnavailable)
	case w.opts.Subjects.Detokenize():
		reply = detokenizeFailed(msg, messages.CodeUnavailable)
	default:
		reply = modelInfoFailed(msg, messages.CodeUnavailable)
	}
	w.respond(m, w.marshal(reply))
}

func (w *Worker) marshal(v any) []byte {
	b, err := messages.Marshal(v)
	if err != nil {
		// Only a programming error gets here; answer with something decodable.
		w.log.Error("marshal reply", "err", err)
		b, _ = messages.Marshal(generateFailed(err.Error(), messages.CodeInvalid))
	}
	return b
}

// serve answers one request the way every request/reply subject does: a
// request that could not be decoded (decodeErr) is counted as malformed and
// refused, and one whose deadline has passed while it waited for a worker of
// the pool is dropped unserved, both answered with fail. Otherwise answer
// serves req, with ctx bounded by the request's deadline as deadline reads it.
func serve[Q, R any](ctx context.Context, w *Worker, req *Q, decodeErr error, deadline func(*Q) int64,
	fail func(msg, code string) *R, answer func(context.Context, *Q) *R,
) *R {
	if decodeErr != nil {
		w.malformed.Add(1)
		w.errs.Add(1)
		return fail(decodeErr.Error(), messages.CodeInvalid)
	}
	ctx, cancel := withDeadline(ctx, deadline(req))
	defer cancel()
	if ctx.Err() != nil {
		w.expired.Add(1)
		return fail(errExpired.Error(), messages.CodeUnavailable)
	}
	return answer(ctx, req)
}

// The failed replies of each reply type, for serve and the handlers.

func generateFailed(msg, code string) *messages.GenerateReply {
	return &messages.GenerateReply{V: messages.Version, Error: msg, Code: code}
}

func tokenizeFailed(msg, code string) *messages.TokenizeReply {
	return &messages.TokenizeReply{V: messages.Version, Error: msg, Code: code}
}

func detokenizeFailed(msg, code string) *messages.DetokenizeReply {
	return &messages.DetokenizeReply{V: messages.Version, Error: msg, Code: code}
}

func modelInfoFailed(msg, code string) *messages.ModelInfoReply {
	return &messages.ModelInfoReply{V: messages.Version, Error: msg, Code: code}
}

// serveGenerate answers a generate request received at j.at, in a span of
// its own when tracing.
func (w *Worker) serveGenerate(ctx context.Context, j job) *messages.GenerateReply {
	req, err := messages.Decode[messages.GenerateRequest](j.m.Data)
	var span trace.Span
	if tr := w.opts.Tracer; tr != nil {
		ctx, span = tr.Start(tracing.RemoteParent(ctx, j.m.Header.Get(messages.HeaderTraceparent)), "generate",
			trace.WithTimestamp(j.at), trace.WithSpanKind(trace.SpanKindServer))
	}
	rep := serve(ctx, w, req, err, func(r *messages.GenerateRequest) int64 { return r.Deadline }, generateFailed,
		func(ctx context.Context, req *messages.GenerateRequest) *messages.GenerateReply {
			return w.generateReply(ctx, req, j.at)
		})
	if span != nil {
		endGenerateSpan(span, req, rep)
	}
	return rep
}

// endGenerateSpan ends a generate request's span with what it did.
func endGenerateSpan(span trace.Span, req *messages.GenerateRequest, rep *messages.GenerateReply) {
	if req != nil {
		span.SetAttributes(attribute.String("rollfleet.episode", req.EpisodeID), attribute.Int("rollfleet.turn", int(req.Turn)),
			attribute.Int("rollfleet.prompt_tokens", len(req.Prompt)))
	}
	span.SetAttributes(attribute.String("rollfleet.endpoint", rep.Endpoint), attribute.Int("rollfleet.tokens", len(rep.Tokens)),
		attribute.String("rollfleet.finish_reason", rep.FinishReason), attribute.Int64("rollfleet.queue_ns", rep.QueueNanos),
		attribute.Int64("rollfleet.model_ns", rep.ModelNanos), attribute.Int64("rollfleet.policy_version", rep.PolicyVersion))
	if rep.Error != "" {
		span.SetStatus(codes.Error, rep.Code+": "+rep.Error)
	}
	span.End()
}

// status is the worker's answer to a trainer's status request.
func (w *Worker) status() messages.WorkerStatus {
	st := w.gens.ctl.State()
	return messages.WorkerStatus{
		Kind: messages.WorkerLLM, ID: w.opts.ID, Epoch: st.Epoch, Version: st.Version, Paused: st.Paused,
		InFlight: w.gens.inFlight(), Held: w.gens.held.Load(), Endpoints: w.Endpoints(),
	}
}

// generateReply generates req's completion under the fleet's current policy
// version, which tags the reply. A paused fleet holds the request (until
// its deadline at most); a generation an aborting pause cancels is
// generated again, whole, after the resume.
//
// The reply reports how long the request waited since it was received (at)
// before the model call that produced it, and that call's duration.
func (w *Worker) generateReply(ctx context.Context, req *messages.GenerateRequest, at time.Time) *messages.GenerateReply {
	for {
		gen, gctx, version, err := w.gens.begin(ctx)
		if err != nil {
			w.expired.Add(1)
			return generateFailed("held by the fleet's pause until the request's deadline or the worker's stop", messages.CodeUnavailable)
		}
		rep := w.generateOnce(gctx, req, at)
		w.gens.end(gen)
		if gen.aborted.Load() {
			w.aborted.Add(1)
			continue
		}
		rep.PolicyVersion = version
		return rep
	}
}

// generateOnce asks a model server for the completion req asks for, timing
// the wait since at and the model call.
func (w *Worker) generateOnce(ctx context.Context, req *messages.GenerateRequest, at time.Time) *messages.GenerateReply {
	sp := &req.Sampling
	creq := vllm.CompletionRequest{
		Prompt:                 req.Prompt,
		MaxTokens:              int(req.MaxTokens),
		Temperature:            sp.Temperature,
		TopP:                   sp.TopP,
		TopK:                   int(sp.TopK),
		Seed:                   sp.Seed,
		Stop:                   sp.Stop,
		StopTokenIDs:           sp.StopTokenIDs,
		MinP:                   sp.MinP,
		PresencePenalty:        sp.PresencePenalty,
		FrequencyPenalty:       sp.FrequencyPenalty,
		RepetitionPenalty:      sp.RepetitionPenalty,
		MinTokens:              int(sp.MinTokens),
		IgnoreEOS:              sp.IgnoreEOS,
		SkipSpecialTokens:      sp.SkipSpecialTokens,
		IncludeStopStrInOutput: sp.IncludeStopStrInOutput,
		StructuredOutputs:      sp.StructuredOutputs,
		TopLogprobs:            int(req.TopLogprobs),
	}
	var out vllm.Completion
	var callStart time.Time
	var model time.Duration
	ep, err := w.withEndpoint(ctx, req.EpisodeID, func(ctx context.Context, e *endpoint) error {
		call := creq
		var err error
		if call.MaxTokens, err = e.capMaxTokens(ctx, len(call.Prompt), call.MaxTokens); err != nil {
			return err
		}
		callStart = time.Now()
		out, err = e.client.Complete(ctx, call)
		model = time.Since(callStart)
		if err != nil {
			return err
		}
		e.noteCompletion(model, len(out.TokenIDs))
		return nil
	})
	if err != nil {
		rep := generateFailed(err.Error(), errorCode(err))
		rep.Endpoint = ep
		return rep
	}
	var tops []messages.TopLogprobs
	if len(out.TopLogprobs) > 0 {
		tops = make([]messages.TopLogprobs, len(out.TopLogprobs))
		for i, t := range out.TopLogprobs {
			tops[i] = messages.TopLogprobs{IDs: t.IDs, Logprobs: t.Logprobs}
		}
	}
	return &messages.GenerateReply{
		V:            messages.Version,
		TopLogprobs:  tops,
		Tokens:       out.TokenIDs,
		Logprobs:     out.Logprobs,
		Text:         out.Text,
		FinishReason: out.FinishReason,
		EndOfTurn:    endedTurn(&out),
		Endpoint:     ep,
		QueueNanos:   max(callStart.Sub(at).Nanoseconds(), 0),
		ModelNanos:   model.Nanoseconds(),
	}
}

func (w *Worker) serveTokenize(ctx context.Context, req *messages.TokenizeRequest, err error) *messages.TokenizeReply {
	return serve(ctx, w, req, err, func(r *messages.TokenizeRequest) int64 { return r.Deadline }, tokenizeFailed, w.tokenizeReply)
}

// tokenizeReply asks a model server for the tokens of req.
func (w *Worker) tokenizeReply(ctx context.Context, req *messages.TokenizeRequest) *messages.TokenizeReply {
	treq := vllm.TokenizeRequest{
		Prompt:              req.Text,
		AddGenerationPrompt: req.AddGenerationPrompt,
		AddSpecialTokens:    req.AddSpecialTokens,
		ChatTemplateKwargs:  req.ChatTemplateKwargs,
	}
	for _, m := range req.Messages {
		treq.Messages = append(treq.Messages, vllm.Message{Role: m.Role, Content: m.Content})
	}
	var ids []int32
	_, err := w.withEndpoint(ctx, req.EpisodeID, func(ctx context.Context, e *endpoint) error {
		var err error
		if req.Turn != messages.TurnNone {
			ids, err = e.turnTokens(ctx, req.Text, req.Turn, req.ChatTemplateKwargs)
		} else {
			ids, err = e.tokenize(ctx, treq)
		}
		return err
	})
	if err != nil {
		return tokenizeFailed(err.Error(), errorCode(err))
	}
	return &messages.TokenizeReply{V: messages.Version, Tokens: ids}
}

// answerFromCache answers a tokenize request whose text a healthy endpoint
// has tokenized before (the episode's sticky endpoint first; the others
// serve the same model, and under a non-sticky routing policy hold the
// episode's earlier texts), right in the subscription callback: a feedback
// tokenization then never waits behind generations for a worker of the
// pool. It reports whether it answered.
func (w *Worker) answerFromCache(m *nats.Msg, req *messages.TokenizeRequest) bool {
	if len(req.Messages) > 0 || m.Reply == "" {
		return false
	}
	key := tokcache.KeyOf(req)
	lookup := func(e *endpoint) ([]int32, bool) {
		if e == nil || !e.healthy.Load() {
			return nil, false
		}
		return e.tokens.Get(key)
	}
	preferred := w.router.preferred(req.EpisodeID)
	ids, ok := lookup(preferred)
	for _, e := range w.router.eps {
		if ok {
			break
		}
		if e != preferred {
			ids, ok = lookup(e)
		}
	}
	if !ok {
		return false
	}
	w.tokenize.Add(1)
	w.respond(m, w.marshal(&messages.TokenizeReply{V: messages.Version, Tokens: ids}))
	return true
}

// withEndpoint runs call on a chosen endpoint, retrying infrastructure
// failures on each other endpoint once. The request (and so the token
// prefix) is identical on every attempt. It returns the URL of the last
// endpoint tried.
func (w *Worker) withEndpoint(ctx context.Context, key string, call func(context.Context, *endpoint) error) (string, error) {
	tried := make(map[*endpoint]bool, len(w.router.eps))
	var lastErr error
	last := ""
	for range w.router.eps {
		e, err := w.router.pick(ctx, key, tried)
		if err != nil {
			break
		}
		tried[e] = true
		last = e.url
		cctx, cancel := context.WithTimeout(ctx, w.opts.CallTimeout)
		err = call(cctx, e)
		cancel()
		e.slots.release()
		if err == nil {
			return last, nil
		}
		lastErr = err
		if !vllm.Retryable(ctx, err) {
			break
		}
		e.healthy.Store(false)
		w.retries.Add(1)
		w.log.Warn("model endpoint failed; trying another", "endpoint", e.url, "err", err)
	}
	w.errs.Add(1)
	if lastErr == nil {
		lastErr = errNoEndpoint
	}
	return last, lastErr
}

// errorCode classifies an error for the requester.
func errorCode(err error) string {
	switch {
	case errors.Is(err, vllm.ErrContextLength):
		return messages.CodeContextLength
	case errors.Is(err, vllm.ErrUnavailable), errors.Is(err, vllm.ErrBadResponse),
		errors.Is(err, errNoEndpoint), errors.Is(err, context.DeadlineExceeded):
		return messages.CodeUnavailable
	default:
		return messages.CodeInvalid
	}
}

// healthFailures is how many health checks in a row must fail before a
// healthy endpoint is marked down: a loaded vLLM can be slow to answer one.
const healthFailures = 2

// healthTimeout bounds one health check, at least: a loaded vLLM's /health
// can stall for seconds while its API event loop is busy.
const healthTimeout = 5 * time.Second

// healthLoop probes e's /health every HealthInterval, healthy or not: a
// server that dies is marked down (after healthFailures failed checks in a
// row) before a request finds it dead (the router then sends it nothing
// while another is healthy, and readiness follows), and one marked down
// comes back once it answers.
func (w *Worker) healthLoop(ctx context.Context, e *endpoint) {
	t := time.NewTicker(w.opts.HealthInterval)
	defer t.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, max(w.opts.HealthInterval, healthTimeout))
		err := e.client.Health(hctx)
		cancel()
		if err != nil {
			failed++
		} else {
			failed = 0
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && !e.healthy.Swap(true):
			w.log.Info("model endpoint healthy again", "endpoint", e.url)
		case err != nil && failed >= healthFailures && e.healthy.Swap(false):
			w.log.Warn("model endpoint marked down: its health checks failed", "endpoint", e.url, "failed_checks", failed, "err", err)
		}
	}
}
