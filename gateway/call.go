package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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

	// samples are samples 1 … n-1 of a call with n > 1 (see Gateway.run).
	samples []*call

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
	if c.samples != nil && c.lease != nil {
		// Placed only now: a call that failed leaves the session as it was.
		c.lease.s.group = &placement{id: c.lease.s.id, size: int32(n)}
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
		s.samples = nil
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

// respond ends the call, its samples recorded, and writes the answer: as an event stream
// with stream when streamed is set, else resp as JSON with the session headers.
func (g *Gateway) respond(w http.ResponseWriter, c *call, resp any, streamed bool, stream func()) {
	c.end()
	if streamed {
		stream()
		return
	}
	c.setHeaders(w)
	writeJSON(w, http.StatusOK, resp)
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

// tokenString is a token as logprobs show it.
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

// sampleSession is the session a sample of a call with n > 1 is recorded in, for its choice;
// empty for a call with n = 1 (its session is in the X-Session-ID header) or not recorded.
func (c *call) sampleSession() string {
	if c.lease == nil || c.lease.s.group == nil || c.lease.s.group.size <= 1 {
		return ""
	}
	return c.lease.s.id
}
