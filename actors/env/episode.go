package env

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
)

// Finish reasons the env worker sets when it, not the model, ends an episode.
const (
	FinishBudget        = "budget"         // max_length reached before the env said done
	FinishMaxTurns      = "max_turns"      // the request's turn cap reached before the env said done
	FinishContextLength = "context_length" // the model server refused the prompt as too long
)

// errDecided reports a redelivered episode whose earlier run already
// published its terminal step: the collector has its outcome, there is
// nothing left to play.
var errDecided = errors.New("episode already decided")

// errInfra marks a request that found no working LLM worker or model
// server after its retries: the episode is handed back, to resume later
// (here or elsewhere) from its last completed turn.
var errInfra = errors.New("infrastructure unavailable")

// errEpisode marks a reason the episode itself cannot continue (as opposed to
// an infrastructure failure of this worker, which leaves the episode for
// redelivery).
var errEpisode = errors.New("episode failed")

// runEpisode runs one delivery of an episode to its outcome, or hands it
// back. halt closes when the worker shuts down: an episode waiting for the
// store then stops waiting and is handed back.
func (w *Worker) runEpisode(ctx context.Context, halt <-chan struct{}, msg jetstream.Msg) {
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	req, err := messages.Decode[messages.EpisodeRequest](msg.Data())
	if err != nil {
		w.malformed.Add(1)
		f := w.malformedFailure(msg, err)
		w.log.Warn("malformed episode request", "subject", msg.Subject(), "run", f.RunID, "episode", f.EpisodeID, "err", err)
		// One record per stored request, however often it is delivered.
		var id string
		if meta, merr := msg.Metadata(); merr == nil {
			id = "malformed/" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
		ep := &episode{w: w, halt: halt}
		err := ep.store(ctx, "record a malformed request", func(ctx context.Context) error {
			return w.publish(ctx, w.opts.Subjects.Failures(f.RunID, messages.FailureMalformed), f, id, "")
		})
		if err != nil {
			w.log.Error("record malformed request", "err", err)
			_ = msg.Nak()
			return
		}
		_ = msg.Term()
		return
	}
	w.started.Add(1)
	start := time.Now()
	// Restamp the delivery at once: after a crash the server restores an
	// unacknowledged delivery with the message's publish time, so an episode
	// queued for longer than AckWait would be handed out again right away.
	_ = msg.InProgress()
	ep := &episode{w: w, req: req, msg: msg, halt: halt, attempt: 1, started: start, turnStart: start,
		steps: w.opts.Subjects.Steps(req.RunID, req.GroupID, req.EpisodeID)}
	meta, err := msg.Metadata()
	if err == nil {
		ep.attempt = int32(min(meta.NumDelivered, 1<<30))
		ep.request = meta.Sequence.Stream
	}
	ep.nonce = nuid.Next()
	ep.startTrace(msg.Headers())
	ep.log.Debug("episode started", "env", req.Env, "attempt", ep.attempt)
	var span trace.Span
	if tr := w.opts.Tracer; tr != nil {
		ctx, span = tr.Start(tracing.WithTraceID(ctx, req.TraceID), "episode", trace.WithTimestamp(start), trace.WithAttributes(
			attribute.String("rollfleet.env", req.Env), attribute.String("rollfleet.episode", req.EpisodeID),
			attribute.String("rollfleet.run", req.RunID), attribute.Int("rollfleet.attempt", int(ep.attempt))))
		ep.traceparent = tracing.Traceparent(span, req.TraceID)
		defer span.End()
	}
	ep.metrics = w.episodeMetrics(req)
	ep.metrics.Started()
	w.live.Store(ep, msg)
	defer w.live.Delete(ep)
	if ep.attempt > int32(w.opts.MaxDeliver) {
		err = ep.giveUpOrRun(ctx)
	} else {
		err = ep.runSafely(ctx)
	}
	if errors.Is(err, errDecided) {
		w.handBacks.forget(req.EpisodeID)
		w.finished.Add(1)
		ep.metrics.Finished(FinishDecided)
		if err := msg.DoubleAck(ctx); err != nil {
			ep.log.Warn("ack episode", "err", err)
		}
		return
	}
	lastTry := ep.attempt >= w.allowed(ep.turn)
	if err != nil && !errors.Is(err, errEpisode) && !errors.Is(err, errStopped) && lastTry {
		// JetStream will not deliver it again: record the outcome now, or
		// the episode would end with none.
		err = fmt.Errorf("%w: gave up after %d deliveries: %v", errEpisode, ep.attempt, err)
	}
	if errors.Is(err, errEpisode) {
		w.failed.Add(1)
		ep.log.Debug("episode failed", "turn", ep.turn, "err", err)
		if span != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		ep.metrics.Failed(failureKind(err))
		err = ep.publishFailure(ctx, err)
	}
	if err != nil {
		// This worker could not finish or record the episode: hand it back,
		// later for each delivery, so an outage is waited out, not spun on.
		ep.log.Error("episode interrupted; returning it to the queue", "attempt", ep.attempt, "err", err)
		if span != nil {
			span.SetStatus(codes.Error, "handed back: "+err.Error())
		}
		w.handBacks.note(req.EpisodeID, ep.attempt, err)
		w.live.Delete(ep) // no heartbeat may reset the delay
		_ = msg.NakWithDelay(min(time.Duration(ep.attempt)*w.opts.RetryDelay, 30*time.Second))
		return
	}
	w.handBacks.forget(req.EpisodeID)
	w.finished.Add(1)
	ep.log.Debug("episode finished", "turns", ep.turn)
	ep.metrics.Finished(ep.lastReason)
	if err := msg.DoubleAck(ctx); err != nil {
		ep.log.Warn("ack episode", "err", err)
	}
}

// malformedFailure is the failure record of a request that does not decode
// or validate, attributed as far as it can be, so that its submitter, who
// reads its run's failures, learns of it: the run and env from the subject
// (else the body's), the episode, group and trace ids from what of the body
// can be read, else the episode from the message id the submitter gave it
// (messages.EpisodeMsgID) and the trace from the traceparent header. What
// names no run is recorded under the empty run.
func (w *Worker) malformedFailure(msg jetstream.Msg, cause error) *messages.Failure {
	f := &messages.Failure{
		V: messages.Version, Kind: messages.FailureMalformed, Reason: cause.Error(),
		Subject: msg.Subject(), Time: time.Now().UnixNano(),
		Payload: messages.FailurePayload(msg.Data()),
	}
	body := messages.PeekStrings(msg.Data(), "rid", "id", "g", "e", "tid")
	run, env, err := w.opts.Subjects.ParseEpisodes(msg.Subject())
	if err != nil {
		run, env = body["rid"], body["e"]
	}
	id := func(s string) string {
		if len(s) > messages.MaxIDLength {
			return ""
		}
		return s
	}
	f.RunID, f.Env, f.EpisodeID, f.GroupID = id(run), id(env), id(body["id"]), id(body["g"])
	h := msg.Headers()
	if r, e, err := messages.ParseEpisodeMsgID(h.Get(nats.MsgIdHdr)); f.EpisodeID == "" && err == nil && r == f.RunID {
		f.EpisodeID = id(e)
	}
	if messages.ValidTraceID(body["tid"]) {
		f.TraceID = body["tid"]
	} else if tid, _, ok := messages.ParseTraceparent(h.Get(messages.HeaderTraceparent)); ok {
		f.TraceID = tid
	}
	return f
}

// startTrace settles the episode's trace id — the request's, else the one
// of its traceparent header, else one derived from the run, episode and
// request, so that every delivery of the request shares it — and makes the
// episode's logger, which names the episode and its trace.
func (e *episode) startTrace(h nats.Header) {
	tid := e.req.TraceID
	if tid == "" {
		tid, _, _ = messages.ParseTraceparent(h.Get(messages.HeaderTraceparent))
	}
	if tid == "" {
		tid = messages.TraceIDOf(e.req.RunID, e.req.EpisodeID, strconv.FormatUint(e.request, 10))
	}
	e.req.TraceID = tid
	e.traceparent = messages.Traceparent(tid, messages.NewSpanID())
	e.log = e.w.log.With("episode", e.req.EpisodeID, "trace_id", tid)
}

// startTurn starts the span of the turn about to be played, when tracing,
// and sets the traceparent of the turn's requests and step: the turn's span,
// or a fresh span id in the episode's trace.
func (e *episode) startTurn(ctx context.Context) (context.Context, trace.Span) {
	tr := e.w.opts.Tracer
	if tr == nil {
		e.traceparent = messages.Traceparent(e.req.TraceID, messages.NewSpanID())
		return ctx, nil
	}
	ctx, span := tr.Start(ctx, "turn", trace.WithTimestamp(e.turnStart), trace.WithAttributes(
		attribute.String("rollfleet.env", e.req.Env), attribute.String("rollfleet.episode", e.req.EpisodeID),
		attribute.Int("rollfleet.turn", int(e.turn))))
	e.traceparent = tracing.Traceparent(span, e.req.TraceID)
	return ctx, span
}

// endTurn ends a turn's span with what the turn did.
func endTurn(span trace.Span, ev *messages.StepEvent, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case ev != nil:
		tm := &ev.Timings
		span.SetAttributes(
			attribute.Int("rollfleet.tokens", len(ev.ActionTokens)), attribute.Float64("rollfleet.reward", ev.Reward),
			attribute.Bool("rollfleet.done", ev.Done), attribute.String("rollfleet.endpoint", ev.Endpoint),
			attribute.Int64("rollfleet.queue_ns", tm.Queue), attribute.Int64("rollfleet.tokenize_ns", tm.Tokenize),
			attribute.Int64("rollfleet.generate_ns", tm.Generate), attribute.Int64("rollfleet.model_ns", tm.Model),
			attribute.Int64("rollfleet.step_ns", tm.Step), attribute.Int64("rollfleet.publish_ns", tm.Publish),
		)
	}
	span.End()
}

// allowed is how many deliveries an episode gets once its runs have stored
// the given number of turns: --max-deliver, plus one per stored turn. An
// episode whose workers keep dying under it still finishes as long as it
// makes progress (each delivery resumes where the last stopped), while one
// that brings its worker down at the same turn every time (a poison
// episode) still ends, after --max-deliver deliveries without progress.
func (w *Worker) allowed(storedTurns int32) int32 {
	return int32(w.opts.MaxDeliver) + max(storedTurns, 0)
}

// giveUpOrRun handles a delivery beyond --max-deliver: it plays on when the
// episode's runs made progress enough to allow it (see allowed); otherwise
// the last allowed delivery ended without an outcome (its worker stopped or
// was cut off), so one is recorded now instead of playing once more —
// unless an earlier run finished after all.
func (e *episode) giveUpOrRun(ctx context.Context) error {
	prior, err := e.loadPriorRun(ctx)
	if err != nil {
		return err
	}
	if prior != nil && prior.decided {
		return errDecided
	}
	if prior != nil && e.attempt <= e.w.allowed(int32(len(prior.steps))) {
		return e.runSafely(ctx)
	}
	return fmt.Errorf("%w: %s", errEpisode, e.w.giveUpReason(e.req.EpisodeID, e.attempt-1))
}

// runSafely runs the episode and turns a panic (a bug in a game, say) into
// this episode's failure instead of the whole worker's.
func (e *episode) runSafely(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("episode panicked", "panic", r, "stack", string(debug.Stack()))
			err = e.fail("internal error: %v", r)
		}
	}()
	return e.run(ctx)
}

// episode is one episode's actor state, owned by a single goroutine.
type episode struct {
	w   *Worker
	req *messages.EpisodeRequest
	msg jetstream.Msg
	// halt closes when the worker shuts down (see store).
	halt <-chan struct{}

	// attempt is the delivery count: a redelivered episode resumes (or
	// starts over), and its steps carry the attempt so they never mix with
	// an earlier run's.
	attempt int32
	// request is the episodes-stream sequence of the request: a second
	// submission of the same episode id is another run, never spliced into
	// this one.
	request uint64
	// nonce is this delivery's (StepEvent.Run).
	nonce string
	// steps is the subject of the episode's steps.
	steps string
	// resumed counts the moves of this episode between workers.
	resumed int32
	// metrics receives the delivery's events; lastReason is the finish
	// reason of its last turn.
	metrics    EpisodeMetrics
	lastReason string

	// log names the episode and its trace on every line; traceparent is the
	// header of the current turn's requests and step.
	log         *slog.Logger
	traceparent string
	// started is when this delivery began. tm gathers the current turn's
	// timings, which began at turnStart: the delivery's start for its first
	// turn, else when the previous turn's step was ready to be stored.
	// submitWaited is set once turn 0 counted the wait since submission.
	started, turnStart time.Time
	tm                 messages.TurnTimings
	submitWaited       bool

	game   game
	spec   envs.Spec
	tokens []int32 // observation tokens so far (this turn's prompt in a single-turn style)
	// promptMessages are the messages the first prompt rendered, if any.
	promptMessages []messages.ChatMessage
	turn           int32
	// promptCut counts the tokens cut from the first prompt (this turn's in
	// a single-turn style) to fit it.
	promptCut int32

	// history and suffix build each turn's fresh prompt in a single-turn
	// style: the observations so far and the env's current suffix.
	history []string
	suffix  string

	// firstVersion is the policy version of the first turn's action, once
	// versioned; staleness is measured from it. restarts counts the plays
	// started over for staleness, fresh is set after one (the stored steps
	// of earlier plays are not to be resumed), stale once the episode went
	// past its bound and plays on.
	firstVersion int64
	versioned    bool
	restarts     int32
	fresh, stale bool
}

func (e *episode) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errEpisode, fmt.Sprintf(format, args...))
}

// run plays the episode to its end, from the start again each time its
// policy moved on too far under messages.StaleRestart.
func (e *episode) run(ctx context.Context) error {
	for {
		err := e.play(ctx)
		if !errors.Is(err, errRestart) {
			return err
		}
		e.restart()
	}
}

// play plays the episode once: from the start, or from an earlier
// delivery's last completed turn.
func (e *episode) play(ctx context.Context) error {
	req := e.req
	if req.EnvSeed == nil {
		// Derived from the id, so a rerun plays the same game; recorded so
		// the episode can be replayed.
		h := fnv.New64a()
		h.Write([]byte(req.EpisodeID))
		s := h.Sum64()
		req.EnvSeed = &s
	}
	g, spec, err := e.w.newGame(req)
	if err != nil {
		return e.fail("%v", err)
	}
	e.spec, e.game = spec, g
	obs, info, err := g.reset(ctx)
	if err != nil {
		return e.fail("%v", err)
	}
	single := messages.SingleTurnStyle(req.ObsStyle)
	if single && req.Prompt != "" && !spec.Task {
		obs = req.Prompt
	}
	if e.attempt > 1 && !e.fresh {
		// Delivered again: an earlier worker may have played some turns.
		prior, err := e.loadPriorRun(ctx)
		if err != nil {
			return err
		}
		if prior != nil && prior.decided {
			return errDecided
		}
		if prior != nil {
			resumed, err := e.resume(ctx, prior, obs)
			if err != nil {
				return err
			}
			if resumed {
				return e.loop(ctx)
			}
		}
	}
	if single {
		e.history, e.suffix = []string{obs}, info["suffix"]
	} else {
		if err := e.firstPrompt(ctx, obs, info); err != nil {
			return err
		}
	}
	return e.loop(ctx)
}

// loop plays turns until the episode is done.
func (e *episode) loop(ctx context.Context) error {
	for {
		prompt := len(e.tokens)
		tctx, span := e.startTurn(ctx)
		ev, err := e.turnOnce(tctx)
		endTurn(span, ev, err)
		if err != nil {
			return err
		}
		ready := time.Now()
		if err := e.publishStep(ctx, ev); err != nil {
			return err
		}
		// The next turn begins when this step was ready: storing it is the
		// first thing it waits for.
		e.tm, e.turnStart = messages.TurnTimings{Publish: time.Since(ready).Nanoseconds()}, ready
		e.w.turns.Add(1)
		e.observeTurn(ev, prompt)
		if ev.Done {
			return nil
		}
	}
}

// firstPrompt builds and tokenizes the first prompt of a chat-style episode.
// The request's own messages or prompt win over the env's instructions,
// except for a task env, whose instructions already hold the request's
// prompt; an env's own first prompt is envs.Spec.FirstChat. Messages are
// rendered by the model's own chat template on the model server, with the
// request's template variables, or by rollfleet's ChatML when the request
// names it.
func (e *episode) firstPrompt(ctx context.Context, obs string, info envs.Info) error {
	req := e.req
	var msgs []messages.ChatMessage
	switch {
	case len(req.Messages) > 0:
		msgs = req.Messages
	case req.Prompt != "" && !e.spec.Task && req.ChatTemplate:
		msgs = []messages.ChatMessage{{Role: "user", Content: req.Prompt}}
	case req.Prompt != "" && !e.spec.Task:
	default:
		system, user := e.spec.FirstChat(obs, info)
		if system != "" {
			msgs = append(msgs, messages.ChatMessage{Role: "system", Content: system})
		}
		msgs = append(msgs, messages.ChatMessage{Role: "user", Content: user})
	}
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID, Text: req.Prompt}
	var t *templated
	if len(msgs) > 0 {
		t = &templated{render: func(content []string) *messages.TokenizeRequest {
			ms := rendered(msgs, content)
			r := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID}
			if req.ChatTemplateName == messages.TemplateChatML {
				r.Text = chat.Render(chatML(ms), true)
			} else {
				r.Messages, r.AddGenerationPrompt, r.ChatTemplateKwargs = ms, true, req.ChatTemplateKwargs
			}
			return r
		}}
		for _, m := range msgs {
			t.content = append(t.content, m.Content)
		}
		treq = t.render(t.content)
	}
	toks, err := e.tokenize(ctx, treq, true)
	if err != nil {
		return err
	}
	toks, e.promptCut, err = e.fitPrompt(ctx, toks, t)
	if err != nil {
		return err
	}
	if t != nil {
		e.promptMessages = rendered(msgs, t.content) // what was rendered: roles and the content kept
	}
	// Room for a few turns; append grows it from there as the episode does.
	e.tokens = make([]int32, len(toks), len(toks)+512)
	copy(e.tokens, toks)
	return nil
}

// rendered is msgs as the first prompt renders them: their roles, with
// content in place of theirs.
func rendered(msgs []messages.ChatMessage, content []string) []messages.ChatMessage {
	out := make([]messages.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = messages.ChatMessage{Role: m.Role, Content: content[i]}
	}
	return out
}

// chatML converts messages for chat.Render.
func chatML(ms []messages.ChatMessage) []chat.Message {
	out := make([]chat.Message, len(ms))
	for i, m := range ms {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// feedbackTokens tokenizes the env's answer to an action as the user turn
// that follows it: the chat template's tokens from the end of the model's
// turn through the user message to the next generation prompt (or, when
// done, to the end of the conversation). Those tokens begin with the
// template's end-of-turn token, which is left out when the model sampled
// that very token to end its action: the action keeps it as sampled, with
// its logprob. An action that stopped otherwise (the length limit, a stop
// string, another stop token such as Qwen3's <|endoftext|>) is closed by the
// template's own end-of-turn token.
func (e *episode) feedbackTokens(ctx context.Context, action *messages.GenerateReply, content string, done bool) ([]int32, error) {
	req := e.req
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID}
	if req.ChatTemplateName == messages.TemplateChatML {
		treq.Text = chat.Turn(content, done)
	} else {
		treq.Text, treq.Turn, treq.ChatTemplateKwargs = content, messages.TurnNext, req.ChatTemplateKwargs
		if done {
			treq.Turn = messages.TurnFinal
		}
	}
	toks, err := e.tokenize(ctx, treq, true)
	if err != nil {
		return nil, err
	}
	if n := len(action.Tokens); action.EndOfTurn && n > 0 && len(toks) > 0 && action.Tokens[n-1] == toks[0] {
		toks = toks[1:]
	}
	return toks, nil
}

// singleTurnPrompt builds and tokenizes this turn's fresh prompt in a
// single-turn style: the observation history plus the current suffix, as
// GEM's concat wrapper does, wrapped in the qwen3_game template if asked.
func (e *episode) singleTurnPrompt(ctx context.Context) error {
	text := chat.History(e.history, e.suffix)
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: e.req.EpisodeID, Text: text}
	var t *templated
	if e.req.ObsStyle == messages.ObsQwen3Game {
		t = &templated{content: []string{text}, render: func(content []string) *messages.TokenizeRequest {
			return &messages.TokenizeRequest{V: messages.Version, EpisodeID: e.req.EpisodeID, Text: chat.Qwen3Game(content[0])}
		}}
		treq = t.render(t.content)
	}
	toks, err := e.tokenize(ctx, treq, len(e.history) <= 1)
	if err != nil {
		return err
	}
	e.tokens, e.promptCut, err = e.fitPrompt(ctx, toks, t)
	return err
}

// turnOnce runs one model turn and returns its step event.
func (e *episode) turnOnce(ctx context.Context) (*messages.StepEvent, error) {
	req := e.req
	single := messages.SingleTurnStyle(req.ObsStyle)
	if single {
		err := e.singleTurnPrompt(ctx)
		if err != nil && e.turn > 0 && errors.Is(err, errPromptTooLong) {
			// The history outgrew the budget after turns worth keeping: the
			// episode ran out of max_length, as a chat-style one does, and
			// ends truncated. Nothing was cut.
			return &messages.StepEvent{
				V: messages.Version, EpisodeID: req.EpisodeID, Turn: e.turn, Attempt: e.attempt, Resumed: e.resumed,
				Done: true, Truncated: true, FinishReason: FinishBudget,
				ActionTokens: messages.Tokens{}, ActionLogprobs: messages.Logprobs{}, FeedbackTokens: messages.Tokens{},
			}, nil
		}
		if err != nil {
			return nil, err
		}
	}
	budget := req.MaxLength - int32(len(e.tokens))
	if c := req.Sampling.MaxTokens; c > 0 && c < budget {
		budget = c
	}
	sp := req.Sampling
	if sp.Seed != nil {
		// A distinct but reproducible seed per turn.
		s := *sp.Seed + int64(e.turn)
		sp.Seed = &s
	}
	held := time.Now()
	if err := e.beforeTurn(ctx); err != nil {
		return nil, err
	}
	e.tm.Queue += time.Since(held).Nanoseconds()
	ev := &messages.StepEvent{V: messages.Version, EpisodeID: req.EpisodeID, Turn: e.turn, Attempt: e.attempt, Resumed: e.resumed}
	if e.turn == 0 {
		ev.Episode, ev.PromptMessages = req, e.promptMessages
	}
	if e.turn == 0 || single {
		ev.PromptTokens, ev.PromptTruncated = e.tokens, e.promptCut
	}
	greq := &messages.GenerateRequest{
		V: messages.Version, EpisodeID: req.EpisodeID, Turn: e.turn,
		Prompt: e.tokens, Sampling: sp, MaxTokens: budget,
	}
	t0 := time.Now()
	rep, err := request[messages.GenerateReply](ctx, e.w, e.w.opts.Subjects.Generate(), greq, e.traceparent,
		func(r *messages.GenerateReply) string { return r.Code })
	if err != nil {
		return nil, err
	}
	ev.GenerateNanos = time.Since(t0).Nanoseconds()
	// The LLM worker's queue is waiting, not generating.
	q := min(max(rep.QueueNanos, 0), ev.GenerateNanos)
	e.tm.Queue += q
	e.tm.Generate += ev.GenerateNanos - q
	e.tm.Model += max(rep.ModelNanos, 0)
	if rep.Error == "" {
		if err := e.checkStale(rep.PolicyVersion); err != nil {
			return nil, err
		}
	}
	if rep.Error != "" {
		if rep.Code == messages.CodeContextLength && e.turn > 0 {
			// Out of context: the episode is over, truncated, with no new turn.
			ev.Done, ev.Truncated, ev.FinishReason = true, true, FinishContextLength
			ev.ActionTokens, ev.ActionLogprobs, ev.FeedbackTokens = messages.Tokens{}, messages.Logprobs{}, messages.Tokens{}
			return ev, nil
		}
		return nil, e.fail("generate turn %d (%s): %s", e.turn, rep.Code, rep.Error)
	}

	t1 := time.Now()
	res, err := e.game.step(ctx, rep.Text)
	if err != nil {
		return nil, e.fail("env step %d: %v", e.turn, err)
	}
	if res, err = e.judge(ctx, res); err != nil {
		return nil, err
	}
	e.tm.Step += time.Since(t1).Nanoseconds()
	done := res.Done()
	var ftoks []int32
	feedback := res.Observation
	if single {
		// The next turn's prompt carries this feedback; the sample ends with the action.
		e.history = append(e.history, res.Observation)
		e.suffix = res.Info["suffix"]
		ftoks = messages.Tokens{}
	} else {
		suffix := e.spec.ChatSuffix
		if suffix == "" {
			suffix = res.Info["suffix"] // the game's own call to action, with its board
		}
		switch {
		case done && res.Observation == "":
			// Nothing to tell (a graded answer): the sequence ends with the action.
			feedback, ftoks = "", messages.Tokens{}
		default:
			feedback = chat.FeedbackContent(res.Observation, suffix, done)
			if ftoks, err = e.feedbackTokens(ctx, rep, feedback, done); err != nil {
				return nil, err
			}
		}
		e.tokens = append(e.tokens, rep.Tokens...)
		e.tokens = append(e.tokens, ftoks...)
	}
	e.turn++

	ev.ActionTokens, ev.ActionLogprobs, ev.ActionText = rep.Tokens, rep.Logprobs, rep.Text
	ev.FeedbackText, ev.FeedbackTokens = feedback, ftoks
	ev.Reward, ev.Score = res.Reward, res.Reward
	ev.ExtraLogs = map[string]float64{"dummy_scores": res.Reward, "turn_count": float64(e.turn)}
	ev.Info, ev.Success = stepInfo(res.Info), res.Won
	if r, ok := res.Info["library_reward"]; ok {
		// A verifier's own reward, as NeMo Gym reports it beside the env's.
		if v, err := strconv.ParseFloat(r, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			ev.ExtraLogs["library_reward"] = v
		}
	}
	ev.EnvState = e.game.snapshot()
	ev.Endpoint, ev.PolicyVersion = rep.Endpoint, rep.PolicyVersion
	e.noteVersion(rep.PolicyVersion)
	ev.Restarts, ev.Stale = e.restarts, e.stale
	ev.FinishReason = rep.FinishReason
	switch {
	case done:
		// The env ended the episode; it still counts as truncated when the
		// model's last action was cut off by the length limit.
		ev.Done, ev.Truncated = true, rep.FinishReason == "length"
	case req.MaxTurns > 0 && e.turn >= req.MaxTurns:
		ev.Done, ev.Truncated, ev.FinishReason = true, true, FinishMaxTurns
	case !single && req.MaxLength-int32(len(e.tokens)) <= 0:
		ev.Done, ev.Truncated, ev.FinishReason = true, true, FinishBudget
	}
	ev.StepNanos = time.Since(t1).Nanoseconds()
	ev.Timings = e.turnTimings(ev.Turn)
	return ev, nil
}

// turnTimings closes the current turn's timings: its wall time so far and,
// on the first turn 0 of the delivery, the wait since the submission (by
// the submitter's clock, so clamped at 0), which counts as queue and wall.
func (e *episode) turnTimings(turn int32) messages.TurnTimings {
	t := e.tm
	t.Wall = time.Since(e.turnStart).Nanoseconds()
	if turn == 0 && !e.submitWaited {
		e.submitWaited = true
		if sub := e.req.SubmitTime; sub > 0 {
			wait := max(e.started.UnixNano()-sub, 0)
			t.Queue += wait
			t.Wall += wait
		}
	}
	return t
}

// tokenize tokenizes through the LLM workers, or, with cache, from the
// worker's cache for a short plain text: the fleet serves one model, whose
// tokenizer is a pure function of the text, and feedback and first prompts
// repeat, so most feedback turns cross NATS only to generate. Texts made
// once (a later turn's single-turn history prompt, a trimming probe) are
// not cached, so they do not push out those that repeat. The returned
// slice may be shared: its capacity is its length, so an append copies it.
func (e *episode) tokenize(ctx context.Context, treq *messages.TokenizeRequest, cache bool) ([]int32, error) {
	t0 := time.Now()
	cacheable := cache && len(treq.Messages) == 0 && tokcache.Cacheable(treq.Text)
	key := tokcache.KeyOf(treq)
	if cacheable {
		if ids, ok := e.w.tokens.Get(key); ok {
			e.tm.Tokenize += time.Since(t0).Nanoseconds()
			return ids, nil
		}
	}
	rep, err := request[messages.TokenizeReply](ctx, e.w, e.w.opts.Subjects.Tokenize(), treq, e.traceparent,
		func(r *messages.TokenizeReply) string { return r.Code })
	e.tm.Tokenize += time.Since(t0).Nanoseconds()
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, e.fail("tokenize (%s): %s", rep.Code, rep.Error)
	}
	ids := slices.Clip([]int32(rep.Tokens))
	if cacheable {
		e.w.tokens.Put(key, ids)
	}
	return ids, nil
}

// stepInfo is the env's info without the keys that only shape prompts (the
// board suffix, a system prompt): the text results worth keeping.
func stepInfo(info envs.Info) map[string]string {
	var out map[string]string
	for k, v := range info {
		if k == "suffix" || k == "system" || k == "library_reward" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(info))
		}
		out[k] = v
	}
	return out
}

// publishFailure records an episode that cannot complete as a terminal step
// event with the reason; the collector turns it into the episode's one
// failure record.
func (e *episode) publishFailure(ctx context.Context, cause error) error {
	ev := &messages.StepEvent{
		V: messages.Version, EpisodeID: e.req.EpisodeID, Turn: e.turn, Attempt: e.attempt, Episode: e.req,
		Done: true, Error: cause.Error(), Resumed: e.resumed, TraceID: e.req.TraceID,
	}
	switch {
	case errors.Is(cause, errPromptTooLong):
		ev.FailureKind = messages.FailurePromptTooLong
	case errors.Is(cause, errStale):
		ev.FailureKind = messages.FailureStale
	}
	// Its own message id: the turn it names may have been stored already
	// (a republished step) or never (a step that failed to publish), and
	// the collector decides on an error step whatever turns came before.
	ev.Request, ev.Run, ev.RunID = e.request, e.nonce, e.req.RunID
	id := messages.StepMsgID(e.req.EpisodeID, e.nonce, ev.Turn) + "/error"
	return e.store(ctx, "record the episode's failure", func(ctx context.Context) error {
		return e.w.publish(ctx, e.steps, ev, id, e.traceparent)
	})
}

// publishStep stores a step event, waiting for the store while it cannot
// take it; a step too large to publish fails the episode rather than being
// retried forever.
func (e *episode) publishStep(ctx context.Context, ev *messages.StepEvent) error {
	ev.Request, ev.Run, ev.RunID, ev.TraceID = e.request, e.nonce, e.req.RunID, e.req.TraceID
	err := e.store(ctx, "store a step", func(ctx context.Context) error {
		return e.w.publish(ctx, e.steps, ev, messages.StepMsgID(e.req.EpisodeID, e.nonce, ev.Turn), e.traceparent)
	})
	if errors.Is(err, bus.ErrTooLarge) || errors.Is(err, messages.ErrTooLarge) {
		return fmt.Errorf("%w: step %d: %v", errEpisode, ev.Turn, err)
	}
	return err
}

// request sends a NATS request and decodes the validated reply. A missing
// LLM worker, a timeout or an "unavailable" reply is retried with backoff;
// anything else is returned.
func request[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, w *Worker, subject string, msg any, traceparent string, code func(*T) string) (*T, error) {
	var last error
	for attempt := 0; attempt < w.opts.RequestAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt*attempt) * 250 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		// The deadline travels with the request, so an LLM worker drops what
		// this attempt stopped waiting for instead of generating it twice.
		deadline := time.Now().Add(w.opts.RequestTimeout)
		epoch := w.watcher.Load().State().Epoch
		switch r := msg.(type) {
		case *messages.GenerateRequest:
			r.Deadline = deadline.UnixNano()
		case *messages.TokenizeRequest:
			r.Deadline = deadline.UnixNano()
		}
		data, err := messages.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %s request: %v", errEpisode, subject, err)
		}
		rm := bus.TracedMsg(subject, data, traceparent)
		rctx, cancel := context.WithDeadline(ctx, deadline)
		m, err := w.nc.RequestMsgWithContext(rctx, rm)
		cancel()
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				last = err
				held, err := w.heldByPause(ctx, epoch)
				if err != nil {
					return nil, err
				}
				if held {
					attempt--
				}
				continue
			}
			if errors.Is(err, nats.ErrMaxPayload) {
				// The prompt outgrew what the server accepts: no retry helps.
				return nil, fmt.Errorf("%w: %s: %v", errEpisode, subject, err)
			}
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
		rep, err := messages.Decode[T, P](m.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: malformed reply: %v", errEpisode, subject, err)
		}
		if code(rep) == messages.CodeUnavailable {
			last = errors.New("no model endpoint could serve the request")
			held, err := w.heldByPause(ctx, epoch)
			if err != nil {
				return nil, err
			}
			if held {
				attempt--
			}
			continue
		}
		w.infraStreak.Store(0)
		return rep, nil
	}
	w.infraStreak.Add(1)
	return nil, fmt.Errorf("%w: %s: gave up after %d attempts: %v", errInfra, subject, w.opts.RequestAttempts, last)
}

// publish sends one message to a JetStream stream and waits for the store to
// acknowledge it, retrying briefly while a stream leader is unavailable. A
// traceparent, when given, travels as the message's header.
func (w *Worker) publish(ctx context.Context, subject string, v any, msgID, traceparent string) error {
	data, err := messages.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return bus.PublishMsg(ctx, w.js, bus.TracedMsg(subject, data, traceparent), msgID)
}
