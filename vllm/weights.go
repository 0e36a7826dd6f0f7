package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Pause modes of Pause, as vLLM names them.
const (
	// PauseAbort ends the generations in flight at once; their responses
	// carry finish_reason "abort" and the tokens generated so far.
	PauseAbort = "abort"
	// PauseWait returns once the generations in flight have finished.
	PauseWait = "wait"
	// PauseKeep freezes the generations in flight until Resume.
	PauseKeep = "keep"
)

// Pause stops the server from starting new generations, via POST /pause,
// so that its weights can be updated; requests sent meanwhile wait until
// Resume. mode is PauseAbort, PauseWait or PauseKeep; empty means the
// server's default (abort).
func (c *Client) Pause(ctx context.Context, mode string) error {
	u := c.base + "/pause"
	if mode != "" {
		u += "?mode=" + url.QueryEscape(mode)
	}
	var r struct {
		Status string `json:"status"`
	}
	return c.control(ctx, "pause", u, []byte{}, &r)
}

// Resume lets a paused server generate again, via POST /resume.
func (c *Client) Resume(ctx context.Context) error {
	var r struct {
		Status string `json:"status"`
	}
	return c.control(ctx, "resume", c.base+"/resume", []byte{}, &r)
}

// IsPaused reports whether the server is paused, via GET /is_paused.
func (c *Client) IsPaused(ctx context.Context) (bool, error) {
	u := c.base + "/is_paused"
	var r struct {
		IsPaused *bool `json:"is_paused"`
	}
	if err := c.control(ctx, "is_paused", u, nil, &r); err != nil {
		return false, err
	}
	if r.IsPaused == nil {
		return false, opError("is_paused", u, fmt.Errorf("%w: no is_paused", ErrBadResponse))
	}
	return *r.IsPaused, nil
}

// UpdateWeights loads new weights, via POST /update_weights with
// {"update_info": info}. What info holds depends on the server's weight
// transfer backend: for vLLM, the names, dtypes and shapes of the tensors
// the trainer then sends; for the stand-in model (package toyllm), "skill"
// and optionally "weight_version".
func (c *Client) UpdateWeights(ctx context.Context, info map[string]any) error {
	u := c.base + "/update_weights"
	if info == nil {
		info = map[string]any{}
	}
	body, err := json.Marshal(struct {
		UpdateInfo map[string]any `json:"update_info"`
	}{info})
	if err != nil {
		return opError("update_weights", u, fmt.Errorf("encoding update_info: %w", err))
	}
	var r struct {
		Message string `json:"message"`
	}
	return c.control(ctx, "update_weights", u, body, &r)
}

// StartWeightUpdate announces a weight update, via POST
// /start_weight_update: the server holds new generations until
// FinishWeightUpdate.
func (c *Client) StartWeightUpdate(ctx context.Context) error {
	var r struct {
		Message string `json:"message"`
	}
	return c.control(ctx, "start_weight_update", c.base+"/start_weight_update", []byte{}, &r)
}

// FinishWeightUpdate ends a weight update, via POST /finish_weight_update,
// naming the new weights version unless version is empty.
func (c *Client) FinishWeightUpdate(ctx context.Context, version string) error {
	body := []byte{}
	if version != "" {
		var err error
		body, err = json.Marshal(struct {
			WeightVersion string `json:"weight_version"`
		}{version})
		if err != nil {
			return opError("finish_weight_update", c.base+"/finish_weight_update", err)
		}
	}
	var r struct {
		Message string `json:"message"`
	}
	return c.control(ctx, "finish_weight_update", c.base+"/finish_weight_update", body, &r)
}

// WeightInfo returns the version of the weights the server generates
// with, via GET /weight_info ("default" before any update names one).
func (c *Client) WeightInfo(ctx context.Context) (string, error) {
	u := c.base + "/weight_info"
	var r struct {
		WeightVersion *string `json:"weight_version"`
	}
	if err := c.control(ctx, "weight_info", u, nil, &r); err != nil {
		return "", err
	}
	if r.WeightVersion == nil {
		return "", opError("weight_info", u, fmt.Errorf("%w: no weight_version", ErrBadResponse))
	}
	return *r.WeightVersion, nil
}

// control calls a weight-update endpoint (a GET when body is nil, a POST
// otherwise, an empty one for []byte{}) and decodes its answer into v. A
// 404 means the server does not serve the endpoint: ErrNotSupported.
func (c *Client) control(ctx context.Context, op, u string, body []byte, v any) error {
	err := c.call(ctx, u, body, v)
	if err == nil {
		return nil
	}
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusNotFound {
		err = fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return opError(op, u, err)
}
