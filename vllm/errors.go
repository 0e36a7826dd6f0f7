package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors. Errors returned by a Client wrap at most one of the
// first two kinds (plus ErrContextLength for a too-long prompt, or
// ErrNotSupported for a weight-update endpoint the server lacks); match them
// with errors.Is.
var (
	// ErrContextLength: the prompt (plus max_tokens) does not fit the
	// model's context. For an episode this means it ran out of token budget
	// (a truncation), not an infrastructure failure.
	ErrContextLength = errors.New("vllm: prompt exceeds the model's context length")
	// ErrBadResponse: the server answered with something this client cannot
	// trust: malformed JSON, missing fields, token ids and logprobs of
	// different lengths, non-finite logprobs, token ids out of range, or a
	// body over the size limit.
	ErrBadResponse = errors.New("vllm: bad response")
	// ErrUnavailable: the exchange failed (connection refused or reset, a
	// timeout) or the server answered 5xx, 429 or 408.
	ErrUnavailable = errors.New("vllm: server unavailable")
	// ErrNotSupported: a weight-update call (Pause, UpdateWeights, ...) got
	// a 404: vLLM serves those endpoints only in development mode.
	ErrNotSupported = errors.New("vllm: endpoint not supported by the server: start vLLM with VLLM_SERVER_DEV_MODE=1")
)

// maxMessage bounds the message kept from an error body: vLLM's are short,
// but a validation error may echo the request, and a proxy may send a page.
const maxMessage = 2048

// contextLengthPhrases are the lower-cased wordings of vLLM's "does not fit"
// errors: the API server's "This model's maximum context length is …", the
// engine's "… is longer than the maximum model length of …", and the
// multimodal "… is too long to fit into the model (context length …)".
var contextLengthPhrases = []string{
	"maximum context length",
	"maximum model length",
	"too long to fit into the model",
}

// APIError is a non-2xx answer. vLLM sends its error body in one of two
// formats, {"object":"error","message":…,"type":…,"code":…} (older) or
// {"error":{"message":…,"type":…,"code":…}} (newer), with the code a number
// or a string; both are parsed. A body in neither format is kept as
// Message, truncated.
//
// An APIError unwraps to ErrContextLength for a 400 whose message says the
// prompt does not fit, and to ErrUnavailable for 5xx, 429 and 408.
type APIError struct {
	Status  int    // HTTP status code
	Message string // the error message, or the raw body
	Type    string // e.g. "BadRequestError"; empty when not given
	Code    string // the code as text (a number's decimal form); empty when not given
}

// Error describes the answer: status, type, code when it differs from the
// status, and message.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("vllm: HTTP ")
	b.WriteString(strconv.Itoa(e.Status))
	if e.Type != "" {
		b.WriteString(" ")
		b.WriteString(e.Type)
	}
	if e.Code != "" && e.Code != strconv.Itoa(e.Status) {
		b.WriteString(" (code ")
		b.WriteString(e.Code)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the sentinel the answer stands for, or nil.
func (e *APIError) Unwrap() error {
	switch {
	case e.Status == http.StatusBadRequest && isContextLength(e.Message):
		return ErrContextLength
	case e.Status >= 500, e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout:
		return ErrUnavailable
	}
	return nil
}

func isContextLength(msg string) bool {
	msg = strings.ToLower(msg)
	for _, p := range contextLengthPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// Retryable reports whether err is an infrastructure failure worth retrying
// on another endpoint: ErrUnavailable or ErrBadResponse, but not
// ErrContextLength, not another 4xx, and never once ctx is done (the caller
// ran out of time or gave up). Pass the caller's outer context: a per-attempt
// deadline that expired is a stalled server and is retryable.
func Retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrContextLength) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBadResponse)
}

// errorBody is the union of vLLM's two error formats.
type errorBody struct {
	errorFields
	Error *errorFields `json:"error"`
}

type errorFields struct {
	Message *string         `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// decodeAPIError builds the APIError for a non-2xx answer with this body.
func decodeAPIError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var v errorBody
	if json.Unmarshal(body, &v) == nil {
		f := &v.errorFields
		if v.Error != nil {
			f = v.Error
		}
		if f.Message != nil {
			e.Message = truncate(*f.Message)
			e.Type = truncate(f.Type)
			e.Code = truncate(codeText(f.Code))
			return e
		}
	}
	e.Message = truncate(strings.TrimSpace(string(body)))
	return e
}

// codeText renders an error code given as a number or a string.
func codeText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// truncate cuts s to at most maxMessage bytes at a rune boundary.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	i := maxMessage
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
