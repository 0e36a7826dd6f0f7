// Package vllm is a client for the part of vLLM's OpenAI-compatible HTTP API
// that token-level reinforcement learning needs: completions that take token
// ids and return the sampled token ids with their logprobs exactly as the
// engine produced them, plus tokenize, detokenize, health and model listing.
//
// A Client is safe for concurrent use. Every call is bounded by its context;
// the default HTTP client adds no overall timeout of its own. Failures fall into three classes: ErrContextLength (the
// episode ran out of token budget), ErrUnavailable and ErrBadResponse (a
// broken or overloaded server: Retryable reports true, try another one), and
// everything else (a bad request, not worth retrying).
package vllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	defaultMaxResponseBytes = 16 << 20
	// maxErrorBody bounds how much of a non-2xx body is read: vLLM's error
	// bodies are a few hundred bytes, a misbehaving proxy's may be anything.
	maxErrorBody = 64 << 10
	// idleConnTimeout is below the 5 s after which vLLM's HTTP server
	// (uvicorn) closes an idle keep-alive connection, so the client retires
	// a connection before the server does instead of racing the server's
	// close with a POST that the transport may not replay.
	idleConnTimeout = 4 * time.Second
	// maxPooledBuffer keeps a rare huge response from pinning its buffer in
	// the pool.
	maxPooledBuffer = 4 << 20
)

// Options configures a Client. The zero value is usable.
type Options struct {
	// Model is the model name sent with every request. Empty means the first
	// id listed by GET /v1/models, fetched on first use and then cached.
	Model string
	// HTTPClient sends the requests. Nil means a client with keep-alive
	// connections (up to 256 idle per host, retired after 4 s idle, before
	// vLLM's server drops them), no proxy (vLLM servers are cluster-local;
	// an HTTP_PROXY meant for downloads must not capture inference traffic)
	// and no overall timeout: each call is bounded by its context.
	HTTPClient *http.Client
	// MaxResponseBytes bounds a response body; a larger one fails with
	// ErrBadResponse. Zero means 16 MiB.
	MaxResponseBytes int64
	// Observer, when set, receives the duration of every Complete and
	// Tokenize call.
	Observer Observer
}

// Client talks to one vLLM server. It is safe for concurrent use.
type Client struct {
	base    string
	hc      *http.Client
	maxBody int64
	obs     Observer

	completionsURL string
	tokenizeURL    string
	detokenizeURL  string
	healthURL      string
	modelsURL      string
	metricsURL     string

	// model is the resolved model name, nil until known.
	model atomic.Pointer[string]
	// modelSem (capacity 1) lets one caller at a time fetch the model name
	// while the others wait, each bounded by its own context; a failed
	// fetch is not cached, so the next caller tries again.
	modelSem chan struct{}
}

// New returns a client for the vLLM server at baseURL, such as
// "http://10.0.0.5:8000" (a path prefix is allowed for servers behind a
// proxy). The URL must be http or https with a host; a trailing "/" is
// dropped.
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("vllm: base URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("vllm: base URL %q: scheme must be http or https", baseURL)
	case u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("vllm: base URL %q: no host", baseURL)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("vllm: base URL %q: must not have a query or fragment", baseURL)
	case opts.MaxResponseBytes < 0:
		return nil, fmt.Errorf("vllm: MaxResponseBytes %d is negative", opts.MaxResponseBytes)
	}
	base := strings.TrimRight(baseURL, "/")
	c := &Client{
		base:           base,
		hc:             opts.HTTPClient,
		maxBody:        opts.MaxResponseBytes,
		obs:            opts.Observer,
		completionsURL: base + "/v1/completions",
		tokenizeURL:    base + "/tokenize",
		detokenizeURL:  base + "/detokenize",
		healthURL:      base + "/health",
		modelsURL:      base + "/v1/models",
		metricsURL:     base + "/metrics",
		modelSem:       make(chan struct{}, 1),
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient()
	}
	if c.maxBody == 0 {
		c.maxBody = defaultMaxResponseBytes
	}
	if opts.Model != "" {
		m := opts.Model
		c.model.Store(&m)
	}
	return c, nil
}

// BaseURL returns the server's base URL without a trailing "/".
func (c *Client) BaseURL() string { return c.base }

// CloseIdleConnections closes the client's idle keep-alive connections, so a
// stopping worker does not hold the server's connections open.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

func defaultHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// modelName returns the configured model, or resolves it from /v1/models
// once.
func (c *Client) modelName(ctx context.Context) (string, error) {
	if m := c.model.Load(); m != nil {
		return *m, nil
	}
	select {
	case c.modelSem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("vllm: resolve model %s: %w", c.modelsURL, exchangeError(ctx, ctx.Err()))
	}
	defer func() { <-c.modelSem }()
	if m := c.model.Load(); m != nil {
		return *m, nil
	}
	models, err := c.Models(ctx)
	if err != nil {
		return "", err
	}
	if len(models) == 0 {
		return "", fmt.Errorf("vllm: resolve model %s: %w: the server lists no models", c.modelsURL, ErrBadResponse)
	}
	id := models[0].ID
	c.model.Store(&id)
	return id, nil
}

// bufPool holds buffers for encoding requests and reading responses, so a
// steady stream of calls stops allocating them.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		bufPool.Put(b)
	}
}

// encode runs appendBody on a pooled scratch buffer and returns a copy of
// the result. The copy is what the request carries: the transport may read
// (or, on a stale connection, re-read through GetBody) the body after Do
// returns, so a pooled buffer must never be handed to it.
func encode(appendBody func([]byte) []byte) []byte {
	buf := getBuffer()
	b := appendBody(buf.AvailableBuffer())
	body := bytes.Clone(b)
	buf.Write(b) // keeps the grown capacity for the next caller
	putBuffer(buf)
	return body
}

// do sends one request and returns the body of a 2xx answer in a pooled
// buffer that the caller releases with putBuffer. A nil body sends a GET.
func (c *Client) do(ctx context.Context, url string, body []byte) (*bytes.Buffer, error) {
	resp, err := c.send(ctx, url, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		buf := getBuffer()
		defer putBuffer(buf)
		// A failed read of an error body still leaves its status to report.
		_, _ = buf.ReadFrom(io.LimitReader(resp.Body, maxErrorBody))
		return nil, decodeAPIError(resp.StatusCode, buf.Bytes())
	}
	buf := getBuffer()
	if err := readBody(ctx, buf, resp, c.maxBody); err != nil {
		putBuffer(buf)
		return nil, err
	}
	return buf, nil
}

// send performs the HTTP exchange up to the response headers.
func (c *Client) send(ctx context.Context, url string, body []byte) (*http.Response, error) {
	method, rd := http.MethodGet, io.Reader(http.NoBody)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, exchangeError(ctx, err)
	}
	return resp, nil
}

// readBody reads a response body into buf, failing with ErrBadResponse as
// soon as it is known to exceed limit.
func readBody(ctx context.Context, buf *bytes.Buffer, resp *http.Response, limit int64) error {
	if resp.ContentLength > limit {
		return fmt.Errorf("%w: body of %d bytes exceeds the %d-byte limit", ErrBadResponse, resp.ContentLength, limit)
	}
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, min(limit, math.MaxInt64-1)+1))
	if err != nil {
		return exchangeError(ctx, err)
	}
	if n > limit {
		return fmt.Errorf("%w: body exceeds the %d-byte limit", ErrBadResponse, limit)
	}
	return nil
}

// exchangeError classifies a failed HTTP exchange. The caller's own
// cancellation is reported as such. An expired deadline is both
// context.DeadlineExceeded and ErrUnavailable: a caller that bounds each
// attempt with its own deadline sees a stalled server, and Retryable, given
// the caller's outer context, retries it elsewhere. Anything else (refused,
// reset, a transport timeout) is ErrUnavailable.
func exchangeError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", ErrUnavailable, cerr)
		}
		return cerr
	}
	// The caller's wrapping names the URL already.
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// opError gives err the operation and endpoint it happened on.
func opError(op, url string, err error) error {
	return fmt.Errorf("vllm: %s %s: %w", op, url, err)
}
