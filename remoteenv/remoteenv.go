// Package remoteenv lets env workers host environments served over HTTP, so
// that environments written in Python (NeMo Gym resources servers, GEM
// behind a small web app) plug into a rollfleet fleet.
//
// Two protocols are spoken:
//
//   - KindGym ("http-gym"), NeMo Gym's Gymnasium-style resources server:
//     POST /reset → {observation, info}, then POST /step with the model's
//     output as "response" → {observation, reward, terminated, truncated,
//     info}. A null observation means nothing to show.
//   - KindVerify ("http-verify"), NeMo Gym's resources-server protocol for
//     single-turn tasks: POST /seed_session with the data row, then POST
//     /verify with the row and the model's response → {reward, …}.
//
// Each episode has its own session: an HTTP client with its own cookie jar,
// so the server's session cookie follows the episode. Every call is bounded
// by a timeout; connection errors and 502/503/504 answers are retried with
// backoff (a /step or /verify only when the server cannot have applied it);
// anything else is an error naming the env, the call and the server's
// answer, which ends that episode as a failure record.
package remoteenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"time"
)

// Kinds of remote env.
const (
	KindGym    = "http-gym"
	KindVerify = "http-verify"
)

// Sentinel errors.
var (
	// ErrBadConfig is wrapped by Parse and Config.Validate.
	ErrBadConfig = errors.New("remoteenv: bad config")
	// ErrRemote is wrapped by every failed call: the server could not be
	// reached, answered with an error, or answered something unreadable.
	ErrRemote = errors.New("remoteenv: remote env failed")
)

// maxBody bounds a server's answer.
const maxBody = 8 << 20

// Config describes one remote env.
type Config struct {
	// ID is the env id episodes name, e.g. "gym:guess".
	ID string
	// Kind is KindGym or KindVerify.
	Kind string
	// URL is the server's base URL.
	URL string
	// Timeout bounds one HTTP call (default 30s).
	Timeout time.Duration
	// Attempts is how often a call is tried on connection errors and
	// 502/503/504 answers (default 3).
	Attempts int
}

// Parse reads "ID=KIND,URL", the form of the --remote flags.
func Parse(s string) (Config, error) {
	id, rest, ok := strings.Cut(s, "=")
	kind, u, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 {
		return Config{}, fmt.Errorf("%w: %q: want ID=KIND,URL (KIND %s or %s)", ErrBadConfig, s, KindGym, KindVerify)
	}
	c := Config{ID: strings.TrimSpace(id), Kind: strings.TrimSpace(kind), URL: strings.TrimSpace(u)}
	return c, c.Validate()
}

// Validate checks the id, kind and URL.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: empty env id", ErrBadConfig)
	case c.Kind != KindGym && c.Kind != KindVerify:
		return fmt.Errorf("%w: %s: kind %q is not %s or %s", ErrBadConfig, c.ID, c.Kind, KindGym, KindVerify)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %s: URL %q is not an http(s) URL", ErrBadConfig, c.ID, c.URL)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
}

// Task is what an episode tells the remote env about itself.
type Task struct {
	// Seed seeds the env (sent to /reset as "seed").
	Seed uint64
	// Prompt and Label are the request's prompt (the question) and label
	// (the expected answer).
	Prompt, Label string
	// Options are the request's env options, a JSON object or empty: sent
	// to /reset as "options", and merged into the data row of /seed_session.
	Options json.RawMessage
}

// Step is a remote env's answer to one action.
type Step struct {
	Observation           string
	Reward                float64
	Terminated, Truncated bool
	// Info holds the string members of the server's info (other values are
	// JSON-encoded).
	Info map[string]string
}

// Session is one episode's conversation with a remote env. It is not safe
// for concurrent use.
type Session struct {
	cfg    Config
	client *http.Client
	task   Task
	row    map[string]any // the data row of an http-verify session
}

// NewSession starts an episode's session with its own cookie jar.
func NewSession(cfg Config, transport http.RoundTripper) *Session {
	cfg.setDefaults()
	jar, _ := cookiejar.New(nil) // cannot fail without options
	return &Session{cfg: cfg, client: &http.Client{Transport: transport, Jar: jar}}
}

// Reset starts the episode and returns the first observation and info. For
// http-verify it seeds the session with the data row; the first observation
// is then the prompt.
func (s *Session) Reset(ctx context.Context, task Task) (string, map[string]string, error) {
	s.task = task
	var opts map[string]any
	if len(task.Options) > 0 {
		if err := json.Unmarshal(task.Options, &opts); err != nil {
			return "", nil, fmt.Errorf("%w: %s: env options: %v", ErrRemote, s.cfg.ID, err)
		}
	}
	if s.cfg.Kind == KindVerify {
		s.row = map[string]any{"question": task.Prompt, "expected_answer": task.Label}
		for k, v := range opts {
			s.row[k] = v
		}
		if err := s.call(ctx, "/seed_session", s.row, nil); err != nil {
			return "", nil, err
		}
		return task.Prompt, map[string]string{}, nil
	}
	body := map[string]any{"seed": task.Seed}
	if opts != nil {
		body["options"] = opts
	}
	var out struct {
		Observation *string                    `json:"observation"`
		Info        map[string]json.RawMessage `json:"info"`
	}
	if err := s.call(ctx, "/reset", body, &out); err != nil {
		return "", nil, err
	}
	if out.Observation == nil && task.Prompt == "" {
		return "", nil, fmt.Errorf("%w: %s: /reset gave no observation and the request has no prompt", ErrRemote, s.cfg.ID)
	}
	obs := task.Prompt
	if out.Observation != nil {
		obs = *out.Observation
	}
	return obs, flatten(out.Info), nil
}

// Step sends the model's action and returns the env's answer. An
// http-verify env answers once, terminally.
func (s *Session) Step(ctx context.Context, action string) (Step, error) {
	if s.cfg.Kind == KindVerify {
		body := make(map[string]any, len(s.row)+1)
		for k, v := range s.row {
			body[k] = v
		}
		body["response"] = responseObject(action)
		var out map[string]json.RawMessage
		if err := s.call(ctx, "/verify", body, &out); err != nil {
			return Step{}, err
		}
		var reward float64
		if err := json.Unmarshal(out["reward"], &reward); err != nil {
			return Step{}, fmt.Errorf("%w: %s: /verify: reward: want a number, got %.64s", ErrRemote, s.cfg.ID, out["reward"])
		}
		delete(out, "reward")
		return Step{Reward: reward, Terminated: true, Info: flatten(out)}, nil
	}
	var out struct {
		Observation *string                    `json:"observation"`
		Reward      *float64                   `json:"reward"`
		Terminated  bool                       `json:"terminated"`
		Truncated   bool                       `json:"truncated"`
		Info        map[string]json.RawMessage `json:"info"`
	}
	if err := s.call(ctx, "/step", map[string]any{"response": action}, &out); err != nil {
		return Step{}, err
	}
	if out.Reward == nil {
		return Step{}, fmt.Errorf("%w: %s: /step: answer has no reward", ErrRemote, s.cfg.ID)
	}
	st := Step{Reward: *out.Reward, Terminated: out.Terminated || out.Truncated, Truncated: out.Truncated, Info: flatten(out.Info)}
	if out.Observation != nil {
		st.Observation = *out.Observation
	}
	return st, nil
}

// responseObject is the model's output in the Responses API's shape, which
// NeMo Gym's verifiers read.
func responseObject(text string) map[string]any {
	return map[string]any{
		"object": "response",
		"output": []any{map[string]any{
			"type": "message", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text}},
		}},
		"output_text": text,
	}
}

// flatten keeps an info map's strings as they are and JSON-encodes other
// values, which is what a text-only info can carry.
func flatten(info map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(info))
	for k, raw := range info {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out[k] = s
		} else if string(raw) != "null" {
			out[k] = string(raw)
		}
	}
	return out
}

// retryable reports whether a failed attempt may succeed when repeated:
// the server was unreachable or said it is (temporarily) unavailable.
type retryable struct {
	err error
	// unapplied: the server cannot have acted on the request.
	unapplied bool
}

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// call POSTs body as JSON to path and decodes the answer into out (nil
// discards it), retrying what may pass on a second try. A call that changes
// the game (/step, /verify) is retried only when the server cannot have
// applied it: the connection was refused, or it answered 503.
func (s *Session) call(ctx context.Context, path string, body, out any) error {
	idempotent := path == "/reset" || path == "/seed_session"
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%w: %s: %s: encode: %v", ErrRemote, s.cfg.ID, path, err)
	}
	var last error
	for attempt := range s.cfg.Attempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(100<<attempt) * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w: %s: %s: %v", ErrRemote, s.cfg.ID, path, ctx.Err())
			}
		}
		last = s.once(ctx, path, data, out)
		var r retryable
		if last == nil || !errors.As(last, &r) || ctx.Err() != nil || !idempotent && !r.unapplied {
			break
		}
	}
	if last != nil {
		return fmt.Errorf("%w: %s: %s: %v", ErrRemote, s.cfg.ID, path, last)
	}
	return nil
}

func (s *Session) once(ctx context.Context, path string, data []byte, out any) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, strings.TrimRight(s.cfg.URL, "/")+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		var op *net.OpError
		return retryable{err: err, unapplied: errors.As(err, &op) && op.Op == "dial"}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil:
		return retryable{err: err}
	case len(b) > maxBody:
		return fmt.Errorf("answer larger than %d bytes", maxBody)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		return retryable{err: fmt.Errorf("HTTP %d: %.256s", resp.StatusCode, b), unapplied: resp.StatusCode == http.StatusServiceUnavailable}
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("HTTP %d: %.256s", resp.StatusCode, b)
	case out == nil:
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("unreadable answer %.128q: %v", b, err)
	}
	return nil
}
