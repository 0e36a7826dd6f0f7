// Package vllmapi holds what the module's two servers of vLLM's
// OpenAI-compatible HTTP API share: the stand-in model server (toyllm) and
// the OpenAI-compatible gateway. Both answer errors with an HTTP status and
// write, read and serve the same way, and their tokenize, detokenize and
// model listing answers have vLLM's shapes; one definition keeps the two from
// drifting apart. Request bodies and error bodies are not here: the two
// servers accept different features and speak different vLLM versions' error
// forms.
package vllmapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Error is an error answered with an HTTP status and vLLM's error body.
type Error struct {
	// Status is the HTTP status of the answer.
	Status int
	// Err says what is wrong; its text is the error body's message.
	Err error
}

// Error returns the message of the underlying error.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// StatusError returns an Error with status; format and args are as for
// fmt.Errorf.
func StatusError(status int, format string, args ...any) *Error {
	return &Error{status, fmt.Errorf(format, args...)}
}

// BadRequest returns a 400 Error; format and args are as for fmt.Errorf.
func BadRequest(format string, args ...any) *Error {
	return StatusError(http.StatusBadRequest, format, args...)
}

// jsonContentType is shared by every response, sparing an allocation per
// response on the stand-in's hot path; net/http never modifies it.
var jsonContentType = []string{"application/json"}

// WriteBody writes a complete JSON response: body with status, its content
// type and its length.
func WriteBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	// A write error means the client went away; there is no one to tell.
	_, _ = w.Write(body)
}

// ReadBody reads the body of r into buf, replacing what buf held. A body
// longer than limit bytes is refused with a 413, a failed read with a 400.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) error {
	buf.Reset()
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, limit)))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return StatusError(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", limit)
	case err != nil:
		return BadRequest("reading request body: %w", err)
	}
	return nil
}

// TokenizeResponse is the answer of POST /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// DetokenizeResponse is the answer of POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// ModelList is the answer of GET /v1/models; C is the model card type.
type ModelList[C any] struct {
	Object string `json:"object"`
	Data   []C    `json:"data"`
}

// ModelCard describes a served model as vLLM does.
type ModelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}
