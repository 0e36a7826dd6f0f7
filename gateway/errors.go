package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// Sentinel errors. Errors the gateway returns or answers with wrap at most one of them; match
// them with errors.Is.
var (
	// ErrBadOption means an Options value is not one New accepts.
	ErrBadOption = errors.New("bad option")
	// ErrNoWorker means no LLM worker answered a request: none is subscribed (HTTP 503).
	ErrNoWorker = errors.New("gateway: no LLM worker answered")
	// ErrTimeout means the LLM workers did not answer within Options.RequestTimeout (HTTP 504).
	ErrTimeout = errors.New("gateway: LLM worker did not answer in time")
	// ErrUnavailable means an LLM worker answered that no model server could serve the
	// request (HTTP 503).
	ErrUnavailable = errors.New("gateway: model servers unavailable")
	// ErrBadReply means an LLM worker's reply could not be decoded, or carried an error code
	// the gateway does not know (HTTP 502).
	ErrBadReply = errors.New("gateway: bad reply from LLM worker")
	// ErrRefused means an LLM worker refused a request of the gateway's as invalid without a
	// model server having seen it (HTTP 502): the gateway sent what it should not have.
	ErrRefused = errors.New("gateway: LLM worker refused the request")
	// ErrNotStored means the records of a finished or discarded session could not be stored
	// in JetStream; the session stays open (HTTP 503).
	ErrNotStored = errors.New("gateway: session records not stored")
	// ErrSessionNotFound means a session id names no open session (HTTP 404).
	ErrSessionNotFound = errors.New("gateway: no such session")
	// ErrSessionFinished means the session was finished, discarded or expired recently; its id
	// cannot be used again until Options.FinishedTTL has passed (HTTP 409).
	ErrSessionFinished = errors.New("gateway: session already ended")
	// ErrSessionAmbiguous means a finish names a session by its metadata or tokens and more
	// than one open session matches (HTTP 409).
	ErrSessionAmbiguous = errors.New("gateway: more than one session matches")
	// ErrSessionBusy means another call or finish on the same session is in progress: calls on
	// one session must be sequential (HTTP 409).
	ErrSessionBusy = errors.New("gateway: another request on this session is in progress")
	// ErrSessionExists means a call with n > 1 would open a session for one of its samples
	// under an id already open or recently ended (HTTP 409).
	ErrSessionExists = errors.New("gateway: session for a sample already exists")
	// ErrNestedGroup means a call with n > 1 was made on a session that is already a sample
	// of a group: groups do not nest (HTTP 400).
	ErrNestedGroup = errors.New("gateway: n > 1 on a sample of a group")
	// ErrTooManySessions means Options.MaxSessions sessions are open (HTTP 429).
	ErrTooManySessions = errors.New("gateway: too many open sessions")
	// ErrSessionTooLong means a call would take a session past Options.MaxSessionTokens
	// (HTTP 400).
	ErrSessionTooLong = errors.New("gateway: session token limit exceeded")
)

// Types of the error body, OpenAI's: the request's own fault, or the server's.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

// knownErrors are the statuses of the errors the gateway names, and the client's words for
// them. A session error's message is err's own (the client's words: the session id it gave);
// a failure that is not the request's fault has fixed words, and its detail (addresses,
// subjects, the model server's own words) goes to the log only.
var knownErrors = []struct {
	err     error
	status  int
	message string // empty: err's own
}{
	{ErrSessionNotFound, http.StatusNotFound, ""},
	{ErrSessionFinished, http.StatusConflict, ""},
	{ErrSessionBusy, http.StatusConflict, ""},
	{ErrSessionAmbiguous, http.StatusConflict, ""},
	{ErrSessionExists, http.StatusConflict, ""},
	{ErrNestedGroup, http.StatusBadRequest, ""},
	{ErrTooManySessions, http.StatusTooManyRequests, ""},
	{ErrSessionTooLong, http.StatusBadRequest, ""},
	{ErrNoWorker, http.StatusServiceUnavailable, "the model server is unavailable: no LLM worker answered"},
	{ErrUnavailable, http.StatusServiceUnavailable, "the model server is unavailable"},
	{ErrTimeout, http.StatusGatewayTimeout, "the model server did not answer in time"},
	{ErrRefused, http.StatusBadGateway, "the LLM worker refused the request"},
	{ErrBadReply, http.StatusBadGateway, "the model server's answer could not be read"},
	{ErrNotStored, http.StatusServiceUnavailable, "the session's records could not be stored; the session stays open: try again"},
}

// answer is what the client is told of err: the status and the error object. A request error
// (a *vllmapi.Error, a session error) is told as it is, written for the client; a failure of
// the LLM workers or model servers in fixed words, or as the model server's refusal of the
// request (a *refusal); anything else is an internal error.
func answer(err error) (int, errorInfo) {
	var rf *refusal
	var ae *vllmapi.Error
	status, message := http.StatusInternalServerError, "internal error: the gateway's log has the detail"
	switch {
	case errors.As(err, &rf):
		status, message = http.StatusBadRequest, rf.message
	case errors.As(err, &ae):
		status, message = ae.Status, ae.Error()
	default:
		for _, k := range knownErrors {
			if errors.Is(err, k.err) {
				status, message = k.status, cmp.Or(k.message, err.Error())
				break
			}
		}
	}
	info := errorInfo{Message: message, Type: typeInvalidRequest}
	if status >= 500 {
		info.Type = typeServer
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		info.Param = &fe.path
	}
	return status, info
}

// fieldError is a request error about one field of the body: its path (OpenAI's "param"),
// such as messages[2].role.
type fieldError struct {
	path string
	err  error
}

func (e *fieldError) Error() string { return e.path + ": " + e.err.Error() }

func (e *fieldError) Unwrap() error { return e.err }

// errorInfo is the error object of OpenAI's error body.
type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	// Code is always null: the status, type and message say what failed.
	Code *string `json:"code"`
}

// errorBody is OpenAI's error response: {"error": {"message", "type", "param", "code"}}.
type errorBody struct {
	Error errorInfo `json:"error"`
}

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorBody{errorInfo{Message: "encoding response: " + err.Error(), Type: typeServer}})
	}
	vllmapi.WriteBody(w, status, body)
}

// statusClientClosed is the status a call whose client went away is logged with (nginx's);
// nothing is written, since nobody reads it.
const statusClientClosed = 499

// writeError answers err with OpenAI's error body, and logs it in full: a failure of the
// gateway or what is behind it as a warning or an error, a refused request at debug level, a
// client that went away at info level.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		g.log.Info("client disconnected before the answer", "path", r.URL.Path, "status", statusClientClosed, "err", err)
		return
	}
	g.errs.Add(1)
	status, info := answer(err)
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout:
		g.log.Error("request failed", "path", r.URL.Path, "status", status, "err", err)
	case status >= 500:
		g.log.Warn("request failed", "path", r.URL.Path, "status", status, "err", err)
	default:
		g.log.Debug("request refused", "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, errorBody{info})
}
