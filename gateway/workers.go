package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// The gateway reaches the LLM workers with NATS requests on their queue-group subjects; this
// file holds those requests and the mapping of their failures to HTTP answers.

// request sends req on subject, bounded by ctx, and decodes the reply as T. No subscriber is
// ErrNoWorker and no answer in time ErrTimeout.
func request[T any, P interface {
	*T
	Validate() error
}](ctx context.Context, g *Gateway, subject string, req any) (*T, error) {
	data, err := messages.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	msg, err := g.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w on %s", ErrNoWorker, subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: no answer on %s within %s", ErrTimeout, subject, g.opts.RequestTimeout)
	case errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("gateway: request %s: %w", subject, err)
	case err != nil:
		return nil, fmt.Errorf("%w: request %s: %w", ErrNoWorker, subject, err)
	}
	rep, err := messages.Decode[T, P](msg.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	return rep, nil
}

// bounded returns ctx bounded by Options.RequestTimeout and that deadline in unix nanoseconds,
// for the Deadline field of a request.
func (g *Gateway) bounded(ctx context.Context) (context.Context, context.CancelFunc, int64) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.RequestTimeout)
	dl, _ := ctx.Deadline()
	return ctx, cancel, dl.UnixNano()
}

// timeoutSlack is how close to its deadline an "unavailable" reply counts as the deadline
// passing: the LLM worker stops at the deadline the gateway gave it, and its answer may beat
// the gateway's own timer.
const timeoutSlack = 250 * time.Millisecond

// replyError turns an LLM worker's error reply to a request with the given deadline (unix
// nanoseconds) into the error the client gets: the model server's refusal of a bad request or
// of a prompt that does not fit, 503 when no model server could serve it, 504 when the
// deadline passed first. The reply's whole text, internal addresses included, is kept for the
// log only.
func replyError(subject, text, code string, deadline int64) error {
	switch code {
	case messages.CodeContextLength, messages.CodeInvalid:
		status, said, ok := modelServerAnswer(text)
		switch {
		case ok && status == http.StatusRequestEntityTooLarge:
			said = "the prompt is too long for the model: the model server refused it as too large (" + said + ")"
		case ok && code == messages.CodeInvalid:
			said = "the model server refused the request: " + said
		case !ok && code == messages.CodeContextLength:
			said = "the prompt is too long for the model"
		case !ok:
			return fmt.Errorf("%w: %s: %s", ErrRefused, subject, text)
		}
		return &refusal{message: said, err: fmt.Errorf("%s: %s", subject, text)}
	case messages.CodeUnavailable:
		if time.Now().Add(timeoutSlack).UnixNano() >= deadline {
			return fmt.Errorf("%w: %s", ErrTimeout, text)
		}
		return fmt.Errorf("%w: %s", ErrUnavailable, text)
	}
	return fmt.Errorf("%w: %s answered code %q: %s", ErrBadReply, subject, code, text)
}

// refusal is a model server's refusal of a request (HTTP 400): message says why in the
// client's terms, err is the LLM worker's whole reply, for the log.
type refusal struct {
	message string
	err     error
}

func (e *refusal) Error() string { return e.err.Error() }

// modelServerPrefix starts the model server's answer in an LLM worker's error text, as the
// vllm client writes it: "vllm: HTTP <status>[ <type>][ (code <code>)]: <message>", after
// the call and the address it went to.
const modelServerPrefix = "vllm: HTTP "

// modelServerAnswer finds the model server's answer in an LLM worker's error text: its HTTP
// status and its message, with any address in it hidden.
func modelServerAnswer(text string) (status int, message string, ok bool) {
	i := strings.Index(text, modelServerPrefix)
	if i < 0 {
		return 0, "", false
	}
	rest := text[i+len(modelServerPrefix):]
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	status, err := strconv.Atoi(rest[:digits])
	if err != nil {
		return 0, "", false
	}
	_, message, found := strings.Cut(rest[digits:], ": ")
	if !found || message == "" {
		message = http.StatusText(status)
	}
	return status, addresses.ReplaceAllString(message, "<address>"), true
}

// addresses matches URLs, which a model server or a proxy in front of it may put in its
// messages.
var addresses = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]*`)

// modelInfo returns the served models, the first being the one requests go to: from Options
// when Model and MaxModelLen are set, else from the LLM workers, cached for ModelInfoTTL.
func (g *Gateway) modelInfo(ctx context.Context) ([]messages.ModelInfo, error) {
	if g.opts.Model != "" && g.opts.MaxModelLen > 0 {
		return []messages.ModelInfo{{ID: g.opts.Model, MaxModelLen: int32(min(g.opts.MaxModelLen, 1<<31-1))}}, nil
	}
	if cur := g.info.Load(); cur != nil && time.Since(cur.at) < g.opts.ModelInfoTTL {
		return cur.models, nil
	}
	select {
	case g.infoSem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("gateway: model info: %w", ctx.Err())
	}
	defer func() { <-g.infoSem }()
	if cur := g.info.Load(); cur != nil && time.Since(cur.at) < g.opts.ModelInfoTTL {
		return cur.models, nil
	}
	ctx, cancel, dl := g.bounded(ctx)
	defer cancel()
	subject := g.opts.Subjects.ModelInfo()
	rep, err := request[messages.ModelInfoReply](ctx, g, subject, &messages.ModelInfoRequest{V: messages.Version, Deadline: dl})
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, replyError(subject, rep.Error, rep.Code, dl)
	}
	models := rep.Models
	if g.opts.Model != "" {
		models = []messages.ModelInfo{{ID: g.opts.Model, MaxModelLen: models[0].MaxModelLen}}
	}
	g.info.Store(&modelInfo{models: models, at: time.Now()})
	return models, nil
}

// served checks a request's model name against the served models and returns the model it
// names (the first when the name is empty).
func (g *Gateway) served(ctx context.Context, name string) (messages.ModelInfo, error) {
	models, err := g.modelInfo(ctx)
	if err != nil {
		return messages.ModelInfo{}, err
	}
	if name == "" {
		return models[0], nil
	}
	for _, m := range models {
		if m.ID == name {
			return m, nil
		}
	}
	return messages.ModelInfo{}, vllmapi.StatusError(http.StatusNotFound, "The model `%s` does not exist.", name)
}

// tokenize tokenizes text, or chat messages with the model's chat template, on the LLM
// workers. Template settings beyond add_generation_prompt go through the chat tokenize
// subject; a plain render uses the tokenize subject every LLM worker answers.
func (g *Gateway) tokenize(ctx context.Context, req *messages.ChatTokenizeRequest, text string) ([]int32, error) {
	ctx, cancel, dl := g.bounded(ctx)
	defer cancel()
	var subject string
	var msg any
	switch {
	case len(req.Messages) == 0:
		subject = g.opts.Subjects.Tokenize()
		msg = &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID, Text: text, AddSpecialTokens: req.AddSpecialTokens, Deadline: dl}
	case req.AfterAssistant || req.ContinueFinalMessage || len(req.ChatTemplateKwargs) > 0 || len(req.Tools) > 0 || hasExtras(req.Messages):
		subject = g.opts.Subjects.TokenizeChat()
		req.V, req.Deadline = messages.Version, dl
		msg = req
	default:
		subject = g.opts.Subjects.Tokenize()
		msg = &messages.TokenizeRequest{
			V: messages.Version, EpisodeID: req.EpisodeID, Messages: req.Messages,
			AddGenerationPrompt: req.AddGenerationPrompt, AddSpecialTokens: req.AddSpecialTokens, Deadline: dl,
		}
	}
	rep, err := request[messages.TokenizeReply](ctx, g, subject, msg)
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, replyError(subject, rep.Error, rep.Code, dl)
	}
	return rep.Tokens, nil
}

// hasExtras reports whether a message carries what only the chat tokenize subject passes on:
// reasoning, tool calls, a tool call id or a name.
func hasExtras(msgs []messages.ChatMessage) bool {
	for _, m := range msgs {
		if m.Reasoning != "" || len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.Name != "" {
			return true
		}
	}
	return false
}

// generate asks the LLM workers for one completion of prompt.
func (g *Gateway) generate(ctx context.Context, key string, turn int, prompt []int32, sp messages.SamplingParams, maxTokens, topN int32) (*messages.GenerateReply, error) {
	ctx, cancel, dl := g.bounded(ctx)
	defer cancel()
	subject := g.opts.Subjects.Generate()
	req := &messages.GenerateRequest{
		V: messages.Version, EpisodeID: key, Turn: int32(min(turn, 1<<31-1)), Prompt: prompt,
		Sampling: sp, MaxTokens: maxTokens, TopLogprobs: topN, Deadline: dl,
	}
	rep, err := request[messages.GenerateReply](ctx, g, subject, req)
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, replyError(subject, rep.Error, rep.Code, dl)
	}
	return rep, nil
}

// detokenize asks the LLM workers for the text of ids and, with pieces, each token's text.
func (g *Gateway) detokenize(ctx context.Context, key string, ids []int32, pieces bool) (*messages.DetokenizeReply, error) {
	ctx, cancel, dl := g.bounded(ctx)
	defer cancel()
	subject := g.opts.Subjects.Detokenize()
	req := &messages.DetokenizeRequest{V: messages.Version, EpisodeID: key, Tokens: ids, Pieces: pieces, Deadline: dl}
	rep, err := request[messages.DetokenizeReply](ctx, g, subject, req)
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, replyError(subject, rep.Error, rep.Code, dl)
	}
	if pieces && len(rep.Pieces) != len(ids) {
		return nil, fmt.Errorf("%w: %d token texts for %d tokens", ErrBadReply, len(rep.Pieces), len(ids))
	}
	return rep, nil
}
