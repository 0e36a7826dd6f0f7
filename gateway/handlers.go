package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

// Headers of the session a call belongs to.
const (
	// HeaderSessionID carries a call's session id in a request (and is echoed in the answer).
	HeaderSessionID = "X-Session-ID"
	// HeaderSegment is the index of the session segment the call was recorded in.
	HeaderSegment = "X-Session-Segment"
	// HeaderCall is the call's index in its session.
	HeaderCall = "X-Session-Call"
	// HeaderDrift is "true" when the call's prompt did not extend the session's trace, so the
	// call began a new segment.
	HeaderDrift = "X-Session-Drift"
	// HeaderSessionScope narrows where a call without a session id looks for the session it
	// continues, besides the API key (see store.attach).
	HeaderSessionScope = "X-Session-Scope"
)

// tokenIDPrefix starts each token string when return_tokens_as_token_ids is set.
const tokenIDPrefix = "token_id:"

// routes returns the API's handler: the endpoints, and an error body for a request none of
// them serves.
func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", g.handleHealth)
	mux.HandleFunc("GET /v1/models", g.wrap(g.handleModels))
	mux.HandleFunc("POST /tokenize", g.wrap(g.handleTokenize))
	mux.HandleFunc("POST /detokenize", g.wrap(g.handleDetokenize))
	mux.HandleFunc("POST /v1/chat/completions", g.wrap(g.handleChat))
	mux.HandleFunc("POST /v1/completions", g.wrap(g.handleCompletion))
	mux.HandleFunc("GET /v1/sessions/{id}", g.wrap(g.handleSession))
	mux.HandleFunc("POST /v1/sessions/{id}/finish", g.wrap(g.handleFinish))
	mux.HandleFunc("POST /v1/sessions/finish", g.wrap(g.handleFinishMatching))
	mux.HandleFunc("POST /v1/sessions/verify", g.wrap(g.handleVerify))
	mux.HandleFunc("POST /v1/responses", g.wrap(g.handleResponses))
	mux.HandleFunc("DELETE /v1/sessions/{id}", g.wrap(g.handleDiscard))
	unrouted := g.wrap(func(w http.ResponseWriter, r *http.Request) error { return unroutedError(w, r, mux) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			unrouted(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// unroutedError is the error answering a request that no endpoint serves: 405, with the Allow
// header, for a method the path does not take, else 404. The mux decides which.
func unroutedError(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) error {
	h, _ := mux.Handler(r)
	probe := &statusProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	path := r.URL.EscapedPath()
	if len(path) > maxPathInError {
		path = path[:maxPathInError] + "…"
	}
	if allow := probe.header.Get("Allow"); probe.status == http.StatusMethodNotAllowed && allow != "" {
		w.Header().Set("Allow", allow)
		return vllmapi.StatusError(http.StatusMethodNotAllowed, "method %s is not allowed on %s (allowed: %s)", r.Method, path, allow)
	}
	return vllmapi.StatusError(http.StatusNotFound, "unknown endpoint %s %s", r.Method, path)
}

// maxPathInError bounds the request path an error message repeats.
const maxPathInError = 256

// statusProbe is a ResponseWriter that keeps only the status and the header written to it.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }

func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }

func (p *statusProbe) WriteHeader(status int) { p.status = status }

// wrap adapts a handler that returns an error, answering the error with OpenAI's error body.
func (g *Gateway) wrap(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.requests.Add(1)
		if err := h(w, r); err != nil {
			g.writeError(w, r, err)
		}
	}
}

// readBody reads a request body within Options.MaxBodyBytes.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return readBodyUpTo(w, r, g.opts.MaxBodyBytes)
}

// readBodyUpTo reads a request body of at most limit bytes.
func readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var body bytes.Buffer
	if err := vllmapi.ReadBody(w, r, limit, &body); err != nil {
		return nil, err
	}
	return body.Bytes(), nil
}

// readJSON reads a request body within Options.MaxBodyBytes and decodes it into v.
func (g *Gateway) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := g.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// handleHealth answers 200 with an empty body while the gateway is connected to NATS, 503
// otherwise.
func (g *Gateway) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if !g.nc.IsConnected() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// modelCard describes a served model as vLLM does, with the permission list OpenAI clients
// may expect.
type modelCard struct {
	vllmapi.ModelCard
	Permission []any `json:"permission"`
}

func (g *Gateway) handleModels(w http.ResponseWriter, r *http.Request) error {
	models, err := g.modelInfo(r.Context())
	if err != nil {
		return err
	}
	list := vllmapi.ModelList[modelCard]{Object: "list", Data: make([]modelCard, len(models))}
	for i, m := range models {
		list.Data[i] = modelCard{
			ModelCard: vllmapi.ModelCard{
				ID: m.ID, Object: "model", Created: g.created, OwnedBy: "rollfleet", Root: m.ID,
				MaxModelLen: int(m.MaxModelLen),
			},
			Permission: []any{},
		}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (g *Gateway) handleTokenize(w http.ResponseWriter, r *http.Request) error {
	var req tokenizeRequest
	if err := g.readJSON(w, r, &req); err != nil {
		return err
	}
	key := g.nextID("tok-")
	treq := &messages.ChatTokenizeRequest{EpisodeID: key}
	var text string
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return vllmapi.BadRequest("give either prompt or messages, not both")
	case req.Prompt != nil:
		text = *req.Prompt
		treq.AddSpecialTokens = req.AddSpecialTokens == nil || *req.AddSpecialTokens
	case req.Messages != nil:
		agp := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		if err := checkTemplate(req.Messages, agp, req.ContinueFinalMessage, req.ChatTemplateKwargs, false); err != nil {
			return err
		}
		treq.Messages = plainMessages(req.Messages)
		treq.AddGenerationPrompt, treq.ContinueFinalMessage = agp, req.ContinueFinalMessage
		treq.AddSpecialTokens = req.AddSpecialTokens != nil && *req.AddSpecialTokens
		treq.ChatTemplateKwargs = templateKwargs(req.ChatTemplateKwargs)
		tools, err := checkToolDefs(req.Tools)
		if err != nil {
			return err
		}
		treq.Tools = tools
	default:
		return vllmapi.BadRequest("prompt or messages is required")
	}
	model, err := g.served(r.Context(), req.Model)
	if err != nil {
		return err
	}
	var ids []int32
	if req.Messages != nil || text != "" {
		if ids, err = g.tokenize(r.Context(), treq, text); err != nil {
			return err
		}
	}
	var strs []string
	if req.ReturnTokenStrs && len(ids) > 0 {
		rep, err := g.detokenize(r.Context(), key, ids, true)
		if err != nil {
			return err
		}
		strs = rep.Pieces
	}
	if req.ReturnTokenStrs && strs == nil {
		strs = []string{}
	}
	writeJSON(w, http.StatusOK, vllmapi.TokenizeResponse{
		Count: len(ids), MaxModelLen: int(model.MaxModelLen), Tokens: nonNil(ids), TokenStrs: strs,
	})
	return nil
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

func plainMessages(msgs []chatMessage) []messages.ChatMessage {
	out := make([]messages.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = m.ChatMessage
	}
	return out
}

func (g *Gateway) handleDetokenize(w http.ResponseWriter, r *http.Request) error {
	var req detokenizeRequest
	if err := g.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Tokens == nil {
		return vllmapi.BadRequest("tokens is required")
	}
	ids, err := tokenIDs("tokens", req.Tokens)
	if err != nil {
		return vllmapi.BadRequest("%w", err)
	}
	if _, err := g.served(r.Context(), req.Model); err != nil {
		return err
	}
	rep, err := g.detokenize(r.Context(), g.nextID("detok-"), ids, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, vllmapi.DetokenizeResponse{Prompt: rep.Text})
	return nil
}

// sessionID returns the call's session id: the X-Session-ID header, or the body's session_id
// or extra_body.session_id; they must agree when several are given. Empty means none.
func sessionID(r *http.Request, f *samplingFields) (string, error) {
	id, err := f.sessionFromBody()
	if err != nil {
		return "", err
	}
	if h := r.Header.Get(HeaderSessionID); h != "" {
		if id != "" && id != h {
			return "", vllmapi.BadRequest("the %s header %.64q and the body's session_id %.64q differ", HeaderSessionID, h, id)
		}
		id = h
	}
	if id == "" {
		return "", nil
	}
	return id, checkSessionID(id)
}

// call is one model call being served.
type call struct {
	lease    *lease // nil until the session is known
	released bool   // the lease was released (end)
	key      string // the session id, or a request id: the routing key of the LLM workers
	// scope is set for a call without a session id: its session is found by its prompt
	// among that scope's sessions once the prompt is known.
	scope    string
	idless   bool
	metadata map[string]string

	prompt     []int32
	promptText string
	sampling   messages.SamplingParams
	maxTokens  int32
	pieces     bool // fetch each generated token's text, for logprobs
	// topN asks for that many most likely tokens at each position, for logprobs.
	topN int32
	// rendered is a chat call's messages as rendered (see Gateway.chatPrompt).
	rendered []messages.ChatMessage
	// settings is templateSettings of the call's rendering.
	settings uint64

	// samples are samples 1 … n-1 of a call with n > 1 (see Gateway.run); index is the
	// sample's index, 0 for the call itself.
	samples []*call
	index   int

	reply    *messages.GenerateReply
	genNanos int64
	texts    []string
	// altTexts are, with topN, the texts of each position's most likely tokens.
	altTexts [][]string
	record   recorded
}

// begin opens (or continues) the call's session.
func (g *Gateway) begin(r *http.Request, f *samplingFields) (*call, error) {
	sid, err := sessionID(r, f)
	if err != nil {
		return nil, err
	}
	if sid == "" {
		return &call{key: g.nextID("req-"), scope: sessionScope(r), idless: !g.opts.NoIdlessSessions}, nil
	}
	l, err := g.sessions.acquire(sid, true, time.Now())
	if err != nil {
		return nil, err
	}
	return &call{lease: l, key: sid}, nil
}

// Bounds on the metadata a session without an id keeps (OpenAI's own limits on metadata).
const (
	maxMetadataPairs       = 16
	maxMetadataKeyLength   = 64
	maxMetadataValueLength = 512
)

// keptMetadata is the part of a request's metadata a session keeps for finishing it by
// metadata: the pairs within OpenAI's limits on metadata, at most maxMetadataPairs of them
// (the smallest keys first), so that open sessions hold little besides their tokens.
func keptMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if len(k) <= maxMetadataKeyLength && len(v) <= maxMetadataValueLength {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make(map[string]string, min(len(keys), maxMetadataPairs))
	for _, k := range keys[:min(len(keys), maxMetadataPairs)] {
		out[k] = m[k]
	}
	return out
}

// sessionScope is the scope of a call without a session id: its API key and the
// X-Session-Scope header. Only the key's hash is kept.
func sessionScope(r *http.Request) string {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8]) + "\x00" + r.Header.Get(HeaderSessionScope)
}

// end releases the call's session, once: right after the reply is
// recorded and before it is written, because a client may send its next
// call the moment it has read the reply, on another connection.
func (c *call) end() {
	for _, s := range c.all() {
		if s.lease != nil && !s.released {
			s.released = true
			s.lease.release(true, time.Now())
		}
	}
}

// run generates the call's n completions and records them: sample 0 in the call's session,
// samples 1 … n-1 (n > 1) each in a session forked from it (store.fork), all n placed in one
// group. The samples are generated at once, routed by the call's key so that they share the
// model server's cached prompt, with the seed of sample i, if any, seed + i as vLLM does. A
// call that fails records no sample.
func (g *Gateway) run(ctx context.Context, c *call, n int) error {
	if c.idless {
		l, err := g.sessions.attach(c.scope, c.prompt, c.metadata, func() string { return g.nextID("auto-") }, time.Now())
		if err != nil {
			return err
		}
		c.lease, c.key = l, l.s.id
	}
	turn := 0
	if c.lease != nil {
		if err := c.lease.reserve(c.prompt, c.maxTokens); err != nil {
			return err
		}
		turn = c.lease.callsMade()
	}
	if err := g.forkSamples(c, n); err != nil {
		return err
	}
	all := c.all()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = g.sample(ctx, s, c.key, turn) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	now := time.Now()
	for _, s := range all {
		if s.lease == nil {
			continue
		}
		s.record = s.lease.record(s.prompt, s.reply, s.promptText, s.genNanos, now)
		g.calls.Add(1)
		if s.record.drift != "" {
			g.drifts.Add(1)
			g.log.Warn("session prompt does not extend its trace: new segment", "session", s.key,
				"segment", s.record.segment, "reason", s.record.drift)
		}
	}
	return nil
}

// forkSamples makes the calls of samples 1 … n-1 of c, each in a session forked from c's.
func (g *Gateway) forkSamples(c *call, n int) error {
	if n <= 1 {
		return nil
	}
	var forks []*lease
	if c.lease != nil {
		var err error
		if forks, err = g.sessions.fork(c.lease, n, time.Now()); err != nil {
			return err
		}
	}
	c.samples = make([]*call, n-1)
	for i := range c.samples {
		s := *c
		s.samples, s.index = nil, i+1
		if c.sampling.Seed != nil {
			seed := *c.sampling.Seed + int64(i+1)
			s.sampling.Seed = &seed
		}
		if forks != nil {
			s.lease, s.key = forks[i], forks[i].s.id
		}
		c.samples[i] = &s
	}
	return nil
}

// all is the call's samples: the call itself, then the samples of n > 1.
func (c *call) all() []*call { return append([]*call{c}, c.samples...) }

// sample generates one sample of the call, routed by route, and fetches its tokens' texts
// when they are asked for.
func (g *Gateway) sample(ctx context.Context, c *call, route string, turn int) error {
	start := time.Now()
	reply, err := g.generate(ctx, route, turn, c.prompt, c.sampling, c.maxTokens, c.topN)
	if err != nil {
		return err
	}
	c.genNanos = time.Since(start).Nanoseconds()
	if c.pieces {
		rep, err := g.detokenize(ctx, route, reply.Tokens, true)
		if err != nil {
			return err
		}
		c.texts = rep.Pieces
	}
	if c.pieces && len(reply.TopLogprobs) > 0 {
		if c.altTexts, err = g.altTexts(ctx, route, reply.TopLogprobs); err != nil {
			return err
		}
	}
	c.reply = reply
	return nil
}

// setHeaders reports where the call landed in its session.
func (c *call) setHeaders(w http.ResponseWriter) {
	if c.lease == nil {
		return
	}
	h := w.Header()
	h.Set(HeaderSessionID, c.key)
	h.Set(HeaderSegment, strconv.Itoa(c.record.segment))
	h.Set(HeaderCall, strconv.Itoa(c.record.call))
	h.Set(HeaderDrift, strconv.FormatBool(c.record.drift != ""))
}

// tokenString is a token as logprobs show it.
// altTexts detokenizes the most likely tokens of every position in one request.
func (g *Gateway) altTexts(ctx context.Context, key string, tops []messages.TopLogprobs) ([][]string, error) {
	var ids []int32
	for _, t := range tops {
		ids = append(ids, t.IDs...)
	}
	if len(ids) == 0 {
		return make([][]string, len(tops)), nil
	}
	rep, err := g.detokenize(ctx, key, ids, true)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(tops))
	for i, t := range tops {
		out[i], rep.Pieces = rep.Pieces[:len(t.IDs):len(t.IDs)], rep.Pieces[len(t.IDs):]
	}
	return out, nil
}

// altString is the logprob token string of position i's j-th most likely token.
func (c *call) altString(i, j int, asIDs bool) string {
	if asIDs {
		return tokenIDPrefix + strconv.FormatInt(int64(c.reply.TopLogprobs[i].IDs[j]), 10)
	}
	return c.altTexts[i][j]
}

// topCount is how many of position i's most likely tokens the call reports.
func (c *call) topCount(i int) int {
	if i >= len(c.reply.TopLogprobs) {
		return 0
	}
	return min(len(c.reply.TopLogprobs[i].IDs), int(c.topN))
}

func (c *call) tokenString(i int, asIDs bool) string {
	if asIDs {
		return tokenIDPrefix + strconv.FormatInt(int64(c.reply.Tokens[i]), 10)
	}
	return c.texts[i]
}

type usage struct {
	PromptTokens        int  `json:"prompt_tokens"`
	TotalTokens         int  `json:"total_tokens"`
	CompletionTokens    int  `json:"completion_tokens"`
	PromptTokensDetails *any `json:"prompt_tokens_details"`
}

func (c *call) usage() usage {
	u := usage{PromptTokens: len(c.prompt)}
	for _, s := range c.all() {
		u.CompletionTokens += len(s.reply.Tokens)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

type chatResponse struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	Created          int64        `json:"created"`
	Model            string       `json:"model"`
	Choices          []chatChoice `json:"choices"`
	Usage            usage        `json:"usage"`
	PromptLogprobs   *any         `json:"prompt_logprobs"`
	PromptTokenIDs   []int32      `json:"prompt_token_ids"`
	KVTransferParams *any         `json:"kv_transfer_params"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatOut       `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids"`
	// SessionID is, for a call with n > 1, the session this sample is recorded in.
	SessionID string `json:"session_id,omitempty"`
}

type chatOut struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent *string       `json:"reasoning_content"`
	Reasoning        *string       `json:"reasoning"`
	ToolCalls        []apiToolCall `json:"tool_calls"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one of a position's most likely tokens.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// generationRequest is the body of a generation endpoint.
type generationRequest interface {
	*chatRequest | *completionRequest
	fields() *samplingFields
}

// fields returns the request fields both generation endpoints share.
func (f *samplingFields) fields() *samplingFields { return f }

// beginGeneration reads and decodes a generation request with decode, opens (or continues)
// its session and checks the model it names. The caller ends the call.
func beginGeneration[R generationRequest](g *Gateway, w http.ResponseWriter, r *http.Request,
	decode func([]byte) (R, messages.SamplingParams, error), limit int64,
) (R, *call, messages.ModelInfo, error) {
	body, err := readBodyUpTo(w, r, limit)
	if err != nil {
		return nil, nil, messages.ModelInfo{}, err
	}
	req, sp, err := decode(body)
	if err != nil {
		return nil, nil, messages.ModelInfo{}, err
	}
	c, err := g.begin(r, req.fields())
	if err != nil {
		return nil, nil, messages.ModelInfo{}, err
	}
	model, err := g.served(r.Context(), req.fields().Model)
	if err != nil {
		c.end()
		return nil, nil, messages.ModelInfo{}, err
	}
	c.sampling = sp
	return req, c, model, nil
}

func (g *Gateway) handleChat(w http.ResponseWriter, r *http.Request) error {
	req, c, model, err := beginGeneration(g, w, r, decodeChat, g.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer c.end()
	outs, err := g.chatTurn(r.Context(), c, req, model)
	if err != nil {
		return err
	}
	resp := chatResponse{
		ID: g.nextID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(), Model: model.ID,
		Choices: make([]chatChoice, len(outs)), Usage: c.usage(),
	}
	if req.ReturnTokenIDs {
		resp.PromptTokenIDs = c.prompt
	}
	for i, s := range c.all() {
		choice := chatChoice{Index: i, Message: outs[i].message, FinishReason: outs[i].finish, SessionID: s.sampleSession()}
		if req.Logprobs {
			choice.Logprobs = s.chatLogprobs(req.ReturnTokensAsTokenIDs)
		}
		if req.ReturnTokenIDs {
			choice.TokenIDs = s.reply.Tokens
		}
		resp.Choices[i] = choice
	}
	c.end()
	if req.Stream {
		g.streamChat(w, c, &resp, req.includeUsage())
		return nil
	}
	c.setHeaders(w)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// chatLogprobs are the logprobs of a chat sample's tokens, and of the most likely ones.
func (c *call) chatLogprobs(asIDs bool) *chatLogprobs {
	lp := &chatLogprobs{Content: make([]chatLogprob, len(c.reply.Tokens))}
	for i := range c.reply.Tokens {
		lp.Content[i] = chatLogprob{
			Token: c.tokenString(i, asIDs), Logprob: c.reply.Logprobs[i],
			Bytes: textBytes(c.texts[i]), TopLogprobs: make([]chatTopLogprob, c.topCount(i)),
		}
		for j := range lp.Content[i].TopLogprobs {
			lp.Content[i].TopLogprobs[j] = chatTopLogprob{Token: c.altString(i, j, asIDs),
				Logprob: c.reply.TopLogprobs[i].Logprobs[j], Bytes: textBytes(c.altTexts[i][j])}
		}
	}
	return lp
}

// sampleSession is the session a sample of a call with n > 1 is recorded in, for its choice;
// empty for a call with n = 1 (its session is in the X-Session-ID header) or not recorded.
func (c *call) sampleSession() string {
	if c.lease == nil || c.lease.s.group == nil || c.lease.s.group.size <= 1 {
		return ""
	}
	return c.lease.s.id
}

// chatOutcome is a chat completion's reply as the parsers read it.
type chatOutcome struct {
	message chatOut
	finish  string
}

// chatTurn renders and tokenizes a chat request's messages and tools on the model server,
// generates the n completions, records them in the call's sessions and parses the replies,
// one outcome per sample.
func (g *Gateway) chatTurn(ctx context.Context, c *call, req *chatRequest, model messages.ModelInfo) ([]*chatOutcome, error) {
	if err := req.checkTools(g.opts.ToolCallParser); err != nil {
		return nil, err
	}
	kwargs, err := req.templateKwargsWithEffort()
	if err != nil {
		return nil, err
	}
	c.metadata = keptMetadata(req.Metadata)
	c.prompt, c.rendered, err = g.chatPrompt(ctx, c, &messages.ChatTokenizeRequest{
		EpisodeID: c.key, Messages: plainMessages(req.Messages), AddGenerationPrompt: req.addGenerationPrompt(),
		ContinueFinalMessage: req.ContinueFinalMessage, AddSpecialTokens: req.AddSpecialTokens,
		ChatTemplateKwargs: kwargs, Tools: req.toolsJSON,
	})
	if err != nil {
		return nil, err
	}
	if len(c.prompt) == 0 {
		return nil, vllmapi.BadRequest("the rendered prompt is empty")
	}
	requested := req.MaxCompletionTokens
	if requested == nil {
		requested = req.MaxTokens
	}
	if c.maxTokens, err = maxTokens(requested, len(c.prompt), int(model.MaxModelLen), fallbackMaxTokens, true); err != nil {
		return nil, err
	}
	c.pieces = req.Logprobs
	if req.Logprobs && req.TopLogprobs != nil {
		c.topN = int32(*req.TopLogprobs)
	}
	c.promptText = req.Messages[len(req.Messages)-1].Content
	if req.forced.outputs != nil {
		if c.sampling.StructuredOutputs != nil {
			return nil, vllmapi.BadRequest("a forced tool call and a structured output cannot be asked at once")
		}
		c.sampling.StructuredOutputs = req.forced.outputs
	}
	if err := g.run(ctx, c, req.choices()); err != nil {
		return nil, err
	}
	outs := make([]*chatOutcome, 0, 1+len(c.samples))
	for _, s := range c.all() {
		out, err := g.parseReply(s, req)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// parseReply reads a sample's reply as vLLM's parsers do, reasoning first, then tool calls,
// and remembers it in the sample's session.
func (g *Gateway) parseReply(c *call, req *chatRequest) (*chatOutcome, error) {
	out := &chatOutcome{message: chatOut{Role: "assistant", ToolCalls: []apiToolCall{}}, finish: c.reply.FinishReason}
	content := c.reply.Text
	if g.opts.ReasoningParser == ReasoningParserQwen3 {
		if reasoning, rest, ok := splitQwen3Reasoning(content); ok {
			out.message.ReasoningContent, out.message.Reasoning = &reasoning, &reasoning
			content = rest
		}
	}
	if c.reply.FinishReason == "length" {
		// Cut off before the forced call was whole: the text is returned as it is, as vLLM does.
	} else if forced, err := req.forced.calls(content); err != nil {
		return nil, vllmapi.StatusError(http.StatusBadGateway, "the model's reply to a forced tool call: %v", err)
	} else if forced != nil {
		for _, fc := range forced {
			out.message.ToolCalls = append(out.message.ToolCalls, apiToolCall{
				ID: g.nextID("chatcmpl-tool-"), Type: "function", Function: apiToolFunction{Name: fc.name, Arguments: fc.arguments},
			})
		}
		content, out.finish = "", "tool_calls"
	} else if req.parseTools {
		if rest, calls, ok := parseHermesToolCalls(content); ok {
			if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
				calls = calls[:1]
			}
			for _, pc := range calls {
				out.message.ToolCalls = append(out.message.ToolCalls, apiToolCall{
					ID: g.nextID("chatcmpl-tool-"), Type: "function", Function: apiToolFunction{Name: pc.name, Arguments: pc.arguments},
				})
			}
			content = rest
			out.finish = "tool_calls"
		}
	}
	if content != "" || (len(out.message.ToolCalls) == 0 && out.message.ReasoningContent == nil) {
		out.message.Content = &content
	}
	if c.lease != nil {
		c.lease.remember(c.rendered, &out.message, c.reply.EndOfTurn, c.settings)
	}
	return out, nil
}

// textBytes is a token's text as the list of its UTF-8 bytes.
func textBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usage              `json:"usage"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	TokenIDs       []int32             `json:"token_ids"`
	PromptLogprobs *any                `json:"prompt_logprobs"`
	PromptTokenIDs []int32             `json:"prompt_token_ids"`
	// SessionID is, for a call with n > 1, the session this sample is recorded in.
	SessionID string `json:"session_id,omitempty"`
}

type completionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

// completionLogprobs are the logprobs of a completion sample's tokens, and of the most likely
// ones.
func (c *call) completionLogprobs(asIDs bool) *completionLogprobs {
	n := len(c.reply.Tokens)
	lp := &completionLogprobs{
		TextOffset: make([]int, n), TokenLogprobs: c.reply.Logprobs,
		Tokens: make([]string, n), TopLogprobs: make([]map[string]float32, n),
	}
	offset := 0
	for i := range n {
		tok := c.tokenString(i, asIDs)
		lp.TextOffset[i] = offset
		offset += utf8.RuneCountInString(c.texts[i])
		lp.Tokens[i] = tok
		lp.TopLogprobs[i] = map[string]float32{tok: c.reply.Logprobs[i]}
		for j := range c.topCount(i) {
			lp.TopLogprobs[i][c.altString(i, j, asIDs)] = c.reply.TopLogprobs[i].Logprobs[j]
		}
	}
	return lp
}

func (g *Gateway) handleCompletion(w http.ResponseWriter, r *http.Request) error {
	req, c, model, err := beginGeneration(g, w, r, decodeCompletion, g.opts.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer c.end()
	ctx := r.Context()
	if req.Prompt.isText {
		c.promptText = req.Prompt.text
		c.prompt, err = g.tokenize(ctx, &messages.ChatTokenizeRequest{
			EpisodeID: c.key, AddSpecialTokens: req.AddSpecialTokens == nil || *req.AddSpecialTokens,
		}, req.Prompt.text)
		if err != nil {
			return err
		}
		if len(c.prompt) == 0 {
			return vllmapi.BadRequest("the tokenized prompt is empty")
		}
	} else {
		c.prompt = req.Prompt.ids
	}
	if c.maxTokens, err = maxTokens(req.MaxTokens, len(c.prompt), int(model.MaxModelLen), 16, false); err != nil {
		return err
	}
	c.pieces = req.Logprobs != nil
	if req.Logprobs != nil {
		c.topN = int32(*req.Logprobs)
	}
	if err := g.run(ctx, c, req.choices()); err != nil {
		return err
	}
	resp := completionResponse{
		ID: g.nextID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: model.ID,
		Choices: make([]completionChoice, 1+len(c.samples)), Usage: c.usage(),
	}
	for i, s := range c.all() {
		choice := completionChoice{Index: i, Text: s.reply.Text, FinishReason: s.reply.FinishReason, SessionID: s.sampleSession()}
		if req.Logprobs != nil {
			choice.Logprobs = s.completionLogprobs(req.ReturnTokensAsTokenIDs)
		}
		if req.ReturnTokenIDs {
			choice.TokenIDs, choice.PromptTokenIDs = s.reply.Tokens, s.prompt
		}
		resp.Choices[i] = choice
	}
	c.end()
	if req.Stream {
		g.streamCompletion(w, c, &resp, req.includeUsage())
		return nil
	}
	c.setHeaders(w)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

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
