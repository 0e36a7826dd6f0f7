package env

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/tracing"
)

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
