package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// Defaults of Options.
const (
	// DefaultEnv is the env of the trajectories and failures the gateway publishes.
	DefaultEnv = "gateway"
	// DefaultRun is the run id of the trajectories and failures the gateway publishes.
	DefaultRun = "gateway"
	// DefaultMaxBodyBytes bounds a request body.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxSessions bounds the open sessions.
	DefaultMaxSessions = 4096
	// DefaultMaxSessionTokens bounds the tokens one session holds over all its segments.
	DefaultMaxSessionTokens = 262144
	// DefaultSessionTTL is how long a session may stay idle before it is expired.
	DefaultSessionTTL = 30 * time.Minute
	// DefaultFinishedTTL is how long an ended session's id stays unusable: the default
	// duplicate window of the streams, during which a second publish under the same id would
	// be dropped.
	DefaultFinishedTTL = 10 * time.Minute
	// DefaultRequestTimeout bounds one request to the LLM workers.
	DefaultRequestTimeout = 5 * time.Minute
	// DefaultModelInfoTTL is how long the model information from the LLM workers is cached.
	DefaultModelInfoTTL = 30 * time.Second
)

// shutdownGrace is how long in-flight HTTP requests may run on after the serving context is
// cancelled, before they are aborted.
const shutdownGrace = 10 * time.Second

// fallbackMaxTokens is a chat request's max_tokens when it sets none and the model's context
// window is unknown.
const fallbackMaxTokens = 4096

// Options configures a Gateway. Zero values take the defaults noted.
type Options struct {
	// Subjects names the subjects (default prefix "rf").
	Subjects messages.Subjects
	// Env is the env of published trajectories and failures when a finish names none
	// (default DefaultEnv).
	Env string
	// Model, when set, is the model name the gateway serves and accepts in requests, whatever
	// the LLM workers call it. Empty serves the workers' model name.
	Model string
	// MaxModelLen, with Model, is the context window to report and enforce; 0 asks the LLM
	// workers.
	MaxModelLen int
	// RequestTimeout bounds each request to the LLM workers; past it the client gets a 504
	// (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// ModelInfoTTL is how long model information from the LLM workers is reused (default
	// DefaultModelInfoTTL).
	ModelInfoTTL time.Duration
	// SessionTTL is how long a session may stay idle before the janitor expires it as
	// abandoned (default DefaultSessionTTL).
	SessionTTL time.Duration
	// JanitorInterval is how often idle sessions are looked for (default SessionTTL/4, at
	// most a minute).
	JanitorInterval time.Duration
	// FinishedTTL is how long the id of a finished, discarded or expired session is refused;
	// keep it at least the streams' duplicate window (default DefaultFinishedTTL).
	FinishedTTL time.Duration
	// MaxSessions bounds the open sessions (default DefaultMaxSessions).
	MaxSessions int
	// MaxSessionTokens bounds the tokens a session holds (default DefaultMaxSessionTokens).
	MaxSessionTokens int
	// MaxBodyBytes bounds a request body; a larger one gets a 413 (default
	// DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// ResponseTTL is how long a stored Responses call can be continued by previous_response_id
	// (default DefaultResponseTTL); MaxStoredResponses and MaxStoredResponseBytes bound what is
	// stored, the oldest dropped first (defaults DefaultMaxStoredResponses and
	// DefaultMaxStoredResponseBytes).
	ResponseTTL            time.Duration
	MaxStoredResponses     int
	MaxStoredResponseBytes int64
	// Run is the run id the sessions' trajectories and failure records
	// carry, and so the subjects they are published on (default
	// DefaultRun); their reader consumes that run's outputs.
	Run string
	// NoIdlessSessions serves calls without a session id without recording them, instead of
	// attaching them to a session by their tokens.
	NoIdlessSessions bool
	// ToolCallParser reads tool calls out of chat replies when a request offers tools:
	// ToolParserHermes (the default) or ToolParserNone.
	ToolCallParser string
	// ReasoningParser splits reasoning out of chat replies: ReasoningParserNone (the default,
	// as vLLM without --reasoning-parser) or ReasoningParserQwen3.
	ReasoningParser string
	// NoContinueTrace renders every chat call's messages as they are, as vLLM does. By
	// default a call whose messages repeat its session's last call and reply (with the same
	// meaning) but whose rendering does not extend the session's trace, because the template
	// rewrites history (Qwen3 dropping earlier reasoning), continues the trace instead: the
	// prompt is the trace followed by the template's tokens for the new messages, so the
	// model sees its earlier reasoning that a plain vLLM call would drop, and the session
	// stays one segment.
	NoContinueTrace bool
	// Streams configures the streams created when missing.
	Streams bus.StreamOptions
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Subjects.Prefix == "" {
		o.Subjects = messages.NewSubjects("")
	}
	o.Env = cmp.Or(o.Env, DefaultEnv)
	o.Run = cmp.Or(o.Run, DefaultRun)
	o.RequestTimeout = positiveOr(o.RequestTimeout, DefaultRequestTimeout)
	o.ModelInfoTTL = positiveOr(o.ModelInfoTTL, DefaultModelInfoTTL)
	o.SessionTTL = positiveOr(o.SessionTTL, DefaultSessionTTL)
	o.JanitorInterval = positiveOr(o.JanitorInterval, min(o.SessionTTL/4, time.Minute))
	o.FinishedTTL = positiveOr(o.FinishedTTL, DefaultFinishedTTL)
	o.MaxSessions = positiveOr(o.MaxSessions, DefaultMaxSessions)
	o.MaxSessionTokens = positiveOr(o.MaxSessionTokens, DefaultMaxSessionTokens)
	o.MaxBodyBytes = positiveOr(o.MaxBodyBytes, DefaultMaxBodyBytes)
	o.ResponseTTL = positiveOr(o.ResponseTTL, DefaultResponseTTL)
	o.MaxStoredResponses = positiveOr(o.MaxStoredResponses, DefaultMaxStoredResponses)
	o.MaxStoredResponseBytes = positiveOr(o.MaxStoredResponseBytes, DefaultMaxStoredResponseBytes)
	o.ToolCallParser = cmp.Or(o.ToolCallParser, ToolParserHermes)
	o.ReasoningParser = cmp.Or(o.ReasoningParser, ReasoningParserNone)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// positiveOr returns v, or def when v is zero or negative: a negative limit or duration means
// the default, as an unset one does.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Stats are a gateway's counters.
type Stats struct {
	// Requests counts the HTTP requests served; Errors those answered with an error (not
	// those whose client disconnected before the answer).
	Requests, Errors uint64
	// Calls counts model calls recorded in sessions; Drifts those that began a new segment.
	Calls, Drifts uint64
	// Finished, Discarded and Expired count sessions ended each way; Expired includes the
	// sessions abandoned when the gateway stops.
	Finished, Discarded, Expired uint64
	// Trajectories counts the trajectories published.
	Trajectories uint64
	// OpenSessions is the number of sessions open now.
	OpenSessions int
}

// Gateway is the OpenAI-compatible HTTP gateway. Create it with New, serve it with Serve (or
// mount Handler and run Run). It is safe for concurrent use.
type Gateway struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	opts     Options
	log      *slog.Logger
	handler  http.Handler
	sessions *store
	// responses keeps stored Responses calls for previous_response_id.
	responses *responseStore
	created   int64

	infoSem chan struct{} // capacity 1: one model-info fetch at a time
	info    atomic.Pointer[modelInfo]

	idPrefix uint64
	idSeq    atomic.Uint64

	requests, errs, calls, drifts                    atomic.Uint64
	finished, discarded, expired, trajectoriesPosted atomic.Uint64
}

// modelInfo is the served model as last learned.
type modelInfo struct {
	models []messages.ModelInfo
	at     time.Time
}

// New returns a gateway that reaches the LLM workers and JetStream through nc.
func New(nc *nats.Conn, opts Options) (*Gateway, error) {
	opts.setDefaults()
	if nc == nil {
		return nil, errors.New("gateway: a NATS connection is required")
	}
	if opts.Env != "" && len(opts.Env) > messages.MaxIDLength {
		return nil, fmt.Errorf("gateway: Env is %d bytes, longer than %d", len(opts.Env), messages.MaxIDLength)
	}
	if opts.ToolCallParser != ToolParserHermes && opts.ToolCallParser != ToolParserNone {
		return nil, fmt.Errorf("gateway: %w: tool-call parser %q (want %s or %s)", ErrBadOption, opts.ToolCallParser, ToolParserHermes, ToolParserNone)
	}
	if opts.ReasoningParser != ReasoningParserQwen3 && opts.ReasoningParser != ReasoningParserNone {
		return nil, fmt.Errorf("gateway: %w: reasoning parser %q (want %s or %s)", ErrBadOption, opts.ReasoningParser, ReasoningParserQwen3, ReasoningParserNone)
	}
	if opts.MaxModelLen < 0 {
		return nil, fmt.Errorf("gateway: MaxModelLen %d is negative", opts.MaxModelLen)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway: jetstream: %w", err)
	}
	g := &Gateway{
		nc: nc, js: js, opts: opts, log: opts.Logger.With("actor", "gateway"),
		sessions:  newStore(opts.MaxSessions, opts.MaxSessionTokens, opts.FinishedTTL),
		responses: newResponseStore(opts.ResponseTTL, opts.MaxStoredResponses, opts.MaxStoredResponseBytes),
		created:   time.Now().Unix(),
		infoSem:   make(chan struct{}, 1),
		idPrefix:  rand.Uint64(),
	}
	g.handler = g.routes()
	return g, nil
}

// Handler returns the HTTP handler serving the API. Sessions only expire while Run (or Serve)
// is running.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Stats returns a snapshot of the counters.
func (g *Gateway) Stats() Stats {
	return Stats{
		Requests: g.requests.Load(), Errors: g.errs.Load(), Calls: g.calls.Load(), Drifts: g.drifts.Load(),
		Finished: g.finished.Load(), Discarded: g.discarded.Load(), Expired: g.expired.Load(),
		Trajectories: g.trajectoriesPosted.Load(), OpenSessions: g.sessions.open(),
	}
}

// ensureStreams creates the streams the gateway publishes to when they are missing.
func (g *Gateway) ensureStreams(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := bus.EnsureStreams(ctx, g.js, g.opts.Subjects, g.opts.Streams)
	if errors.Is(err, bus.ErrStreamMismatch) {
		g.log.Warn("streams left as they are", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// Run makes sure the streams exist, then expires idle sessions until ctx is cancelled. Serve
// runs it; call it only when serving Handler some other way.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.ensureStreams(ctx); err != nil {
		return err
	}
	g.janitor(ctx)
	return nil
}

// Serve serves the API on ln until ctx is cancelled, then shuts down: it stops accepting, lets
// in-flight requests finish for a grace period and aborts the ones still running after it, and
// ends the sessions still open as abandoned (failure records). It runs the session janitor
// meanwhile and closes ln.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	if err := g.ensureStreams(ctx); err != nil {
		_ = ln.Close()
		return err
	}
	return g.serve(ctx, ln)
}

// serve is Serve once the streams exist.
func (g *Gateway) serve(ctx context.Context, ln net.Listener) error {
	g.log.Info("gateway serving", "addr", ln.Addr().String(), "env", g.opts.Env)
	janitorCtx, stopJanitor := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { g.janitor(janitorCtx) })
	err := vllmapi.Serve(ctx, ln, g.handler, shutdownGrace, g.log)
	if err != nil {
		err = fmt.Errorf("gateway: serve: %w", err)
	}
	stopJanitor()
	wg.Wait()
	g.abandonOpen(ctx)
	return err
}

// ListenAndServe serves on addr until ctx is cancelled, as Serve does.
func (g *Gateway) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", addr, err)
	}
	return g.Serve(ctx, ln)
}

// Start serves on addr (such as "127.0.0.1:0" for a free loopback port) in the background. It
// returns the base URL, such as "http://127.0.0.1:41234", and stop, which shuts the gateway
// down and waits until it has, returning Serve's error; stop may be called more than once.
// Cancelling ctx also shuts the gateway down.
func (g *Gateway) Start(ctx context.Context, addr string) (url string, stop func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("gateway: listen on %s: %w", addr, err)
	}
	if err := g.ensureStreams(ctx); err != nil {
		_ = ln.Close()
		return "", nil, err
	}
	url, stop = vllmapi.Start(ctx, ln, g.serve)
	return url, stop, nil
}

// janitor expires idle sessions every JanitorInterval until ctx is cancelled.
func (g *Gateway) janitor(ctx context.Context) {
	t := time.NewTicker(g.opts.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.expireIdle(ctx, time.Now())
	}
}

// expireIdle ends every session idle since before now − SessionTTL as abandoned.
func (g *Gateway) expireIdle(ctx context.Context, now time.Time) {
	g.abandon(ctx, g.sessions.idle(now.Add(-g.opts.SessionTTL), now), fmt.Sprintf("idle for more than %s", g.opts.SessionTTL), now)
}

// abandonOpen ends every session not in use as abandoned because the gateway stops: sessions
// live in its memory only.
func (g *Gateway) abandonOpen(ctx context.Context) {
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	g.abandon(ctx, g.sessions.idle(now.Add(time.Hour), now), "the gateway stopped with the session open", now)
}

// abandon ends the leased sessions as abandoned: a Failure record says why, and their calls
// are dropped. A session whose record cannot be published stays open and is tried again on
// the janitor's next round.
func (g *Gateway) abandon(ctx context.Context, leases []*lease, why string, now time.Time) {
	for _, l := range leases {
		calls := l.callsMade()
		reason := fmt.Sprintf("session abandoned: %s after %d model calls", why, calls)
		if err := g.publishFailure(ctx, l.s.id, l.groupID(), g.opts.Env, reason, calls); err != nil {
			g.log.Warn("abandoning session: publish failed", "session", l.s.id, "err", err)
			l.release(false, now)
			continue
		}
		l.end(now)
		g.expired.Add(1)
		g.log.Info("session abandoned", "session", l.s.id, "calls", calls, "why", why)
	}
}

// publishFailure publishes a Failure record for a session (or segment) that ended without a
// trajectory, in its group.
func (g *Gateway) publishFailure(ctx context.Context, session, group, env, reason string, calls int) error {
	f := messages.Failure{
		V: messages.Version, RunID: g.opts.Run, EpisodeID: session, GroupID: group, Env: env, Kind: messages.FailureEpisode,
		Reason: reason, Turn: int32(calls), Time: time.Now().UnixNano(),
	}
	return g.publish(ctx, g.opts.Subjects.Failures(g.opts.Run, messages.FailureEpisode), &f, messages.TrajectoryMsgID(session))
}

// publish validates, encodes and stores one message in JetStream under msgID.
func (g *Gateway) publish(ctx context.Context, subject string, msg interface{ Validate() error }, msgID string) error {
	if err := msg.Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	data, err := messages.Marshal(msg)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.opts.RequestTimeout)
	defer cancel()
	if err := bus.Publish(ctx, g.js, subject, data, msgID); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// nextID returns a fresh response id with the given prefix.
func (g *Gateway) nextID(prefix string) string {
	return fmt.Sprintf("%s%016x%016x", prefix, g.idPrefix, g.idSeq.Add(1))
}
