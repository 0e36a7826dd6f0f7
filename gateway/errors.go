package gateway

import (
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
	// ErrBadReply means an LLM worker's reply could not be decoded (HTTP 502).
	ErrBadReply = errors.New("gateway: bad reply from LLM worker")
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
	// ErrTooManySessions means Options.MaxSessions sessions are open (HTTP 429).
	ErrTooManySessions = errors.New("gateway: too many open sessions")
	// ErrSessionTooLong means a call would take a session past Options.MaxSessionTokens
	// (HTTP 400).
	ErrSessionTooLong = errors.New("gateway: session token limit exceeded")
)

// statusOf is the HTTP status that answers err.
func statusOf(err error) int {
	var ae *vllmapi.Error
	switch {
	case errors.As(err, &ae):
		return ae.Status
	case errors.Is(err, ErrNoWorker), errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrTimeout):
		return http.StatusGatewayTimeout
	case errors.Is(err, ErrBadReply):
		return http.StatusBadGateway
	case errors.Is(err, ErrSessionNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrSessionFinished), errors.Is(err, ErrSessionBusy), errors.Is(err, ErrSessionAmbiguous):
		return http.StatusConflict
	case errors.Is(err, ErrTooManySessions):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrSessionTooLong):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errorType is the "type" of vLLM's error body for an HTTP status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusConflict:
		return "ConflictError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	case http.StatusBadGateway:
		return "BadGatewayError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	case http.StatusGatewayTimeout:
		return "GatewayTimeoutError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

// errorInfo is the error object of vLLM's (and OpenAI's) error body.
type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// errorBody is vLLM's error response: {"error": {"message", "type", "param", "code"}}.
type errorBody struct {
	Error errorInfo `json:"error"`
}

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorBody{errorInfo{Message: "encoding response: " + err.Error(), Type: errorType(status), Code: status}})
	}
	vllmapi.WriteBody(w, status, body)
}

// writeError answers err with vLLM's error body and the status statusOf gives.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout:
		g.log.Error("request failed", "path", r.URL.Path, "status", status, "err", err)
	case status >= 500:
		g.log.Warn("request failed", "path", r.URL.Path, "status", status, "err", err)
	default:
		g.log.Debug("request rejected", "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, errorBody{errorInfo{Message: err.Error(), Type: errorType(status), Code: status}})
}
