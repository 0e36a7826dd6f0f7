// Package api serves a trainer.Client as JSON over HTTP, for trainers
// written in other languages (clients/python).
//
// Endpoints:
//
//	POST /v1/batches                     submit a batch (a trainer.Spec as JSON, with an optional "id")
//	GET  /v1/batches/{id}/groups         the batch's groups as NDJSON, as they finish
//	GET  /v1/batches/{id}/trajectories   … its trajectories
//	GET  /v1/batches/{id}/failures       … its failure records
//	POST /v1/batches/{id}/ack            acknowledge results: {"acks": [token, …]}
//	DELETE /v1/batches/{id}              close the batch (trainer.Client.Close)
//	POST /v1/pause                       {"on_pause": "finish"|"abort"}; returns once drained
//	POST /v1/resume                      {"version": N}
//	GET  /v1/state                       the policy state
//	GET  /v1/status                      policy state, workers, batches with their progress
//	GET  /healthz                        {"ok": true} while connected to NATS
//
// A result stream writes one line per result, {"ack": TOKEN, "group": {…}}
// (or "trajectory", "failure"), flushed as it arrives, and ends with
// {"done": true, …counts} once the batch is complete, or {"done": false, …}
// when the query's max results or wait ran out. The token is the JetStream
// ack subject of the delivery; POST it to the batch's ack endpoint. A result
// not acknowledged within the client's ack wait is delivered again, to
// whichever stream asks next: the batch's durable consumers are the cursor,
// so a trainer that restarts simply reads again. Errors are JSON,
// {"error": "…"}, with a 4xx or 5xx status.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 16 << 20
	DefaultMaxAcks      = 10000
)

// Options configures the handler. Zero values take the defaults noted.
type Options struct {
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxAcks bounds the tokens of one ack request (default DefaultMaxAcks).
	MaxAcks int
	// Connected reports whether the client's NATS connection is up, for
	// /healthz (nil: always).
	Connected func() bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Handler serves the API.
type Handler struct {
	c    *trainer.Client
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
}

// New returns the API's handler on c.
func New(c *trainer.Client, opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxAcks <= 0 {
		opts.MaxAcks = DefaultMaxAcks
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{c: c, opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/batches", h.submit)
	h.mux.HandleFunc("GET /v1/batches/{id}/groups", streamOf(h, trainer.KindGroup, c.Groups))
	h.mux.HandleFunc("GET /v1/batches/{id}/trajectories", streamOf(h, trainer.KindTrajectory, c.Trajectories))
	h.mux.HandleFunc("GET /v1/batches/{id}/failures", streamOf(h, trainer.KindFailure, c.Failures))
	h.mux.HandleFunc("POST /v1/batches/{id}/ack", h.ack)
	h.mux.HandleFunc("DELETE /v1/batches/{id}", h.close)
	h.mux.HandleFunc("POST /v1/pause", h.pause)
	h.mux.HandleFunc("POST /v1/resume", h.resume)
	h.mux.HandleFunc("GET /v1/state", h.state)
	h.mux.HandleFunc("GET /v1/status", h.status)
	h.mux.HandleFunc("GET /healthz", h.health)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP serves a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	}
	h.mux.ServeHTTP(w, r)
}

// errorBody is every error's body.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// fail writes err with the status its kind calls for.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, trainer.ErrBadBatch), errors.Is(err, trainer.ErrBadAckToken), errors.Is(err, control.ErrBadOnPause):
		status = http.StatusBadRequest
	case errors.Is(err, trainer.ErrUnknownBatch):
		status = http.StatusNotFound
	case errors.Is(err, trainer.ErrBatchExists), errors.Is(err, trainer.ErrOutputTaken), errors.Is(err, control.ErrVersionBackwards):
		status = http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		status = http.StatusServiceUnavailable
	}
	if status >= 500 {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, err.Error())
}

// decode reads a JSON body into v, refusing unknown fields and trailing
// data; the error says what is wrong, for a 400 (or 413).
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err == nil {
		return true
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooLarge.Limit))
		return false
	}
	writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
	return false
}

// BatchRequest is the body of POST /v1/batches: a trainer.Spec, its rows
// as dataset lines (each parsed on its own, so that a bad one is named by
// its index), and an optional batch id.
type BatchRequest struct {
	ID string `json:"id,omitempty"`
	trainer.Spec
	// Rows shadows Spec.Rows.
	Rows []json.RawMessage `json:"rows,omitempty"`
}

// BatchSpec turns the request into a batch spec.
func (b *BatchRequest) BatchSpec() (*trainer.Spec, error) {
	s := b.Spec
	s.Rows = nil
	for i, raw := range b.Rows {
		row := jobs.DatasetRow{Line: i}
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, fmt.Errorf("%w: rows[%d]: %w", trainer.ErrBadBatch, i, err)
		}
		s.Rows = append(s.Rows, row)
	}
	return &s, nil
}

// SubmitResponse is the body of a 201 from POST /v1/batches.
type SubmitResponse struct {
	BatchID       string `json:"batch_id"`
	Episodes      int32  `json:"episodes"`
	Groups        int32  `json:"groups"`
	N             int32  `json:"n"`
	SubmitVersion int64  `json:"submit_version"`
	Resubmitted   bool   `json:"resubmitted,omitempty"`
}

func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	var req BatchRequest
	if !decode(w, r, &req) {
		return
	}
	spec, err := req.BatchSpec()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sub, err := h.c.SubmitBatch(r.Context(), trainer.Batch{ID: req.ID, Spec: spec})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	m := sub.Manifest
	writeJSON(w, http.StatusCreated, SubmitResponse{
		BatchID: m.BatchID, Episodes: m.Episodes, Groups: m.Groups, N: m.N, SubmitVersion: m.SubmitVersion, Resubmitted: sub.Resubmitted,
	})
}

// readParams are a result stream's query parameters: max (results) and
// wait (a Go duration such as "30s", or seconds).
func readParams(r *http.Request) ([]trainer.ReadOption, error) {
	var opts []trainer.ReadOption
	q := r.URL.Query()
	if s := q.Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("max %q is not a count", s)
		}
		opts = append(opts, trainer.MaxResults(n))
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			secs, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || secs < 0 || secs > 1e6 {
				return nil, fmt.Errorf("wait %q is not a duration (\"30s\") or seconds", s)
			}
			d = time.Duration(secs * float64(time.Second))
		}
		if d < 0 {
			return nil, fmt.Errorf("wait %q is negative", s)
		}
		opts = append(opts, trainer.MaxWait(d))
	}
	return opts, nil
}

// streamOf serves the results of one kind as NDJSON.
func streamOf[T any](h *Handler, kind string, read func(context.Context, string, ...trainer.ReadOption) iter.Seq2[*trainer.Result[T], error]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		opts, err := readParams(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if _, err := h.c.Manifest(r.Context(), id); err != nil {
			h.fail(w, r, err)
			return
		}
		var end *trainer.Progress
		opts = append(opts, trainer.OnEnd(func(p trainer.Progress) { end = &p }))
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		enc := json.NewEncoder(w)
		for res, err := range read(r.Context(), id, opts...) {
			if err != nil {
				if r.Context().Err() == nil {
					h.log.Warn("result stream ended", "batch", id, "kind", kind, "err", err)
					_ = enc.Encode(errorBody{Error: err.Error()})
				}
				return
			}
			line := map[string]any{"ack": res.Token(), kind: res.Value}
			if err := enc.Encode(line); err != nil {
				return // the client went away; the result comes again after the ack wait
			}
			_ = rc.Flush()
		}
		if end != nil {
			_ = enc.Encode(end)
		}
	}
}

// AckRequest is the body of POST /v1/batches/{id}/ack.
type AckRequest struct {
	Acks []string `json:"acks"`
}

// AckResponse is its answer.
type AckResponse struct {
	Acked int `json:"acked"`
}

func (h *Handler) ack(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req AckRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Acks) > h.opts.MaxAcks {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%d acks, more than %d in one request", len(req.Acks), h.opts.MaxAcks))
		return
	}
	for i, tok := range req.Acks {
		if err := h.c.AckToken(r.Context(), id, tok); err != nil {
			if errors.Is(err, trainer.ErrBadAckToken) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("acks[%d]: %v (%d acknowledged before it)", i, err, i))
				return
			}
			h.fail(w, r, fmt.Errorf("acks[%d] (%d acknowledged before it): %w", i, i, err))
			return
		}
	}
	writeJSON(w, http.StatusOK, AckResponse{Acked: len(req.Acks)})
}

func (h *Handler) close(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.c.Manifest(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.c.Close(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"closed": id})
}

// PauseRequest is the body of POST /v1/pause.
type PauseRequest struct {
	OnPause string `json:"on_pause"`
}

// ResumeRequest is the body of POST /v1/resume.
type ResumeRequest struct {
	Version *int64 `json:"version"`
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	var req PauseRequest
	if r.ContentLength != 0 && !decode(w, r, &req) {
		return
	}
	st, err := h.c.Pause(r.Context(), req.OnPause)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	var req ResumeRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Version == nil {
		writeError(w, http.StatusBadRequest, "version: required")
		return
	}
	if *req.Version < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("version %d is negative", *req.Version))
		return
	}
	st, err := h.c.Resume(r.Context(), *req.Version)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) state(w http.ResponseWriter, r *http.Request) {
	st, err := h.c.State(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	st, err := h.c.Status(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if st.Workers == nil {
		st.Workers = []messages.WorkerStatus{}
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if h.opts.Connected != nil && !h.opts.Connected() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": "not connected to NATS"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}
