package env

import (
	"errors"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// Metrics receives an env worker's measurements (package metrics has one).
// Episode is called once per delivery of a decodable request; what it
// returns receives that delivery's events, so that no per-event lookup by
// env is needed. Implementations must be safe for concurrent use.
type Metrics interface {
	Episode(env string) EpisodeMetrics
}

// EpisodeMetrics receives the events of one delivery of an episode.
type EpisodeMetrics interface {
	// Started reports the delivery's start.
	Started()
	// Resumed reports that the delivery resumes turns an earlier one played.
	Resumed()
	// Turn reports one stored turn: the tokens of the prompt the model was
	// given and of its action, and the time the env took to step.
	Turn(promptTokens, actionTokens int, step time.Duration)
	// Finished reports the end of the episode with its finish reason (the
	// last turn's, or "decided" for a delivery that found the episode
	// decided by an earlier one).
	Finished(reason string)
	// Failed reports an episode recorded as failed, with the kind of its
	// failure record.
	Failed(kind string)
}

// FinishDecided is the finish reason Metrics receive for a delivery that
// found its episode decided by an earlier delivery.
const FinishDecided = "decided"

type nopMetrics struct{}

func (nopMetrics) Started()                     {}
func (nopMetrics) Resumed()                     {}
func (nopMetrics) Turn(int, int, time.Duration) {}
func (nopMetrics) Finished(string)              {}
func (nopMetrics) Failed(string)                {}

// episodeMetrics returns the observer of one delivery of req.
func (w *Worker) episodeMetrics(req *messages.EpisodeRequest) EpisodeMetrics {
	if w.opts.Metrics == nil {
		return nopMetrics{}
	}
	if m := w.opts.Metrics.Episode(req.Env); m != nil {
		return m
	}
	return nopMetrics{}
}

// observeTurn reports a stored turn; prompt is the length of the
// observation tokens before the turn (a single-turn style rebuilds the
// prompt, which is then e.tokens).
func (e *episode) observeTurn(ev *messages.StepEvent, prompt int) {
	if messages.SingleTurnStyle(e.req.ObsStyle) {
		prompt = len(e.tokens)
	}
	if len(ev.ActionTokens) == 0 {
		prompt = 0 // ended without a generation
	}
	e.metrics.Turn(prompt, len(ev.ActionTokens), time.Duration(ev.StepNanos))
	if ev.Done {
		e.lastReason = ev.FinishReason
	}
}

// failureKind is the kind of the failure record cause becomes (see
// publishFailure; the collector records other errors as episode failures).
func failureKind(cause error) string {
	switch {
	case errors.Is(cause, errPromptTooLong):
		return messages.FailurePromptTooLong
	case errors.Is(cause, errStale):
		return messages.FailureStale
	}
	return messages.FailureEpisode
}

// ID is the worker's id (Options.ID).
func (w *Worker) ID() string { return w.opts.ID }

// Policy returns the policy state the worker follows, and false before Run
// has read it.
func (w *Worker) Policy() (messages.PolicyState, bool) { return w.watcher.Load().Current() }
