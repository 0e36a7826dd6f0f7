package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

func (g *Gateway) handleSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkSessionID(id); err != nil {
		return err
	}
	s, err := g.sessions.summary(id, time.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}

// segmentReport describes one published segment in a finish answer.
type segmentReport struct {
	EpisodeID    string `json:"episode_id"`
	Segment      int    `json:"segment"`
	Turns        int    `json:"turns"`
	Tokens       int    `json:"tokens"`
	ActionTokens int    `json:"action_tokens"`
	FinishReason string `json:"finish_reason"`
	Truncated    bool   `json:"truncated"`
	Drift        bool   `json:"drift"`
	DriftReason  string `json:"drift_reason,omitempty"`
	// Published is false when the trajectory could not be stored (too large for the
	// server); a failure record was published for it instead, and Error says why.
	Published bool   `json:"published"`
	Error     string `json:"error,omitempty"`
}

type finishResponse struct {
	SessionID string          `json:"session_id"`
	Status    string          `json:"status"`
	Env       string          `json:"env"`
	Subject   string          `json:"subject"`
	Reward    float64         `json:"reward"`
	Drift     bool            `json:"drift"`
	Segments  []segmentReport `json:"segments"`
}

// outcome checks a finish request and fills in the defaults: a session that is a sample of a
// call with n > 1 takes its place in that group unless the request places it itself.
func (g *Gateway) outcome(session string, group *placement, req *finishRequest) (*outcome, error) {
	if req.Reward == nil {
		return nil, vllmapi.BadRequest("reward is required")
	}
	o := &outcome{
		reward: *req.Reward, scores: *req.Reward, extraLogs: req.ExtraLogs, info: req.Info,
		label: req.Label, env: req.Env, groupID: req.GroupID, size: 1,
	}
	if group != nil && req.GroupID == "" && req.SampleIndex == nil && req.GroupSize == nil {
		o.groupID, o.index, o.size = group.id, group.index, group.size
	}
	if req.Scores != nil {
		o.scores = *req.Scores
	}
	if o.env == "" {
		o.env = g.opts.Env
	}
	if o.groupID == "" {
		o.groupID = session
	}
	if req.GroupSize != nil {
		o.size = *req.GroupSize
	}
	if req.SampleIndex != nil {
		o.index = *req.SampleIndex
	}
	switch {
	case len(o.env) > messages.MaxIDLength:
		return nil, vllmapi.BadRequest("env is %d bytes, longer than %d", len(o.env), messages.MaxIDLength)
	case len(o.groupID) > messages.MaxIDLength:
		return nil, vllmapi.BadRequest("group_id is %d bytes, longer than %d", len(o.groupID), messages.MaxIDLength)
	case o.size < 1:
		return nil, vllmapi.BadRequest("group_size must be >= 1, got %d", o.size)
	case o.index < 0 || o.index >= o.size:
		return nil, vllmapi.BadRequest("sample_index must be in [0, %d), got %d", o.size, o.index)
	}
	return o, nil
}

func (g *Gateway) handleFinish(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkSessionID(id); err != nil {
		return err
	}
	var req finishRequest
	if err := g.readJSON(w, r, &req); err != nil {
		return err
	}
	if _, err := g.outcome(id, nil, &req); err != nil {
		return err
	}
	l, err := g.sessions.acquire(id, false, time.Now())
	if err != nil {
		return err
	}
	return g.finish(w, r, l, &req)
}

// handleFinishMatching finishes the one open session a finish request names by its metadata
// (sessions opened by calls without an id keep their first call's metadata) or, with
// session_id, by id.
func (g *Gateway) handleFinishMatching(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		finishRequest
		SessionID string            `json:"session_id"`
		Metadata  map[string]string `json:"metadata"`
	}
	if err := g.readJSON(w, r, &req); err != nil {
		return err
	}
	var l *lease
	var err error
	switch {
	case req.SessionID != "":
		if err := checkSessionID(req.SessionID); err != nil {
			return err
		}
		l, err = g.sessions.acquire(req.SessionID, false, time.Now())
	case len(req.Metadata) > 0:
		l, err = g.sessions.byMetadata(req.Metadata)
	default:
		return vllmapi.BadRequest("session_id or metadata is required to name the session")
	}
	if err != nil {
		return err
	}
	return g.finish(w, r, l, &req.finishRequest)
}

// finish publishes the leased session's trajectories with the request's outcome and ends it;
// on an error the session stays open.
func (g *Gateway) finish(w http.ResponseWriter, r *http.Request, l *lease, req *finishRequest) error {
	id := l.s.id
	o, err := g.outcome(id, l.s.group, req)
	if err != nil {
		l.release(false, time.Now())
		return err
	}
	now := time.Now()
	trajs := l.trajectories(o, now)
	for i := range trajs {
		if err := trajs[i].Validate(); err != nil {
			l.release(true, now)
			return fmt.Errorf("gateway: session %q: %w", id, err)
		}
	}
	resp := finishResponse{
		SessionID: id, Status: "finished", Env: o.env, Subject: g.opts.Subjects.Trajectories(g.opts.Run, o.env),
		Reward: o.reward, Segments: make([]segmentReport, len(trajs)),
	}
	for k := range trajs {
		t := &trajs[k]
		t.RunID = g.opts.Run
		rep := segmentReport{
			EpisodeID: t.EpisodeID, Segment: k, Turns: int(t.Turns), Tokens: len(t.ObservationTokens),
			FinishReason: t.FinishReason, Truncated: t.Truncated, DriftReason: t.Info["drift_reason"],
			Drift: k > 0, Published: true,
		}
		for _, rg := range t.ActionRanges {
			rep.ActionTokens += int(rg.End - rg.Start)
		}
		resp.Drift = resp.Drift || rep.Drift
		err := g.publish(r.Context(), resp.Subject, t, messages.TrajectoryMsgID(t.EpisodeID))
		if errors.Is(err, bus.ErrTooLarge) {
			// It can never be stored: record why instead, so the session does not vanish.
			rep.Published, rep.Error = false, err.Error()
			err = g.publishFailure(r.Context(), t.EpisodeID, t.GroupID, o.env, "session trajectory too large to publish: "+err.Error(), int(t.Turns))
		}
		if err != nil {
			// Nothing is lost: the session stays open, and a retry republishes under the same
			// ids, which the stream de-duplicates.
			l.release(true, time.Now())
			return fmt.Errorf("%w: publishing session %q: %w", ErrNotStored, id, err)
		}
		resp.Segments[k] = rep
	}
	l.end(time.Now())
	g.finished.Add(1)
	g.trajectoriesPosted.Add(uint64(len(trajs)))
	g.log.Debug("session finished", "session", id, "segments", len(trajs), "reward", o.reward)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleDiscard ends a session without a trajectory: a Failure record says that the client
// discarded it.
func (g *Gateway) handleDiscard(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkSessionID(id); err != nil {
		return err
	}
	l, err := g.sessions.acquire(id, false, time.Now())
	if err != nil {
		return err
	}
	calls := l.callsMade()
	if err := g.publishFailure(r.Context(), id, l.groupID(), g.opts.Env, "session discarded by the client", calls); err != nil {
		l.release(true, time.Now())
		return fmt.Errorf("%w: publishing session %q: %w", ErrNotStored, id, err)
	}
	l.end(time.Now())
	g.discarded.Add(1)
	writeJSON(w, http.StatusOK, struct {
		SessionID string `json:"session_id"`
		Status    string `json:"status"`
		Calls     int    `json:"calls"`
	}{id, "discarded", calls})
	return nil
}
