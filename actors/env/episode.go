package env

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/envs"
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
