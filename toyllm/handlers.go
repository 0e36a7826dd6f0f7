package toyllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rollfleet/rollfleet/internal/jsonw"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// writeJSON writes v with encoding/json, for the endpoints off the hot path.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, fmt.Errorf("encoding response: %w", err))
		return
	}
	vllmapi.WriteBody(w, http.StatusOK, body)
}

// writeError answers err with vLLM's error body: its status for a
// *vllmapi.Error, 500 otherwise.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var ae *vllmapi.Error
	if errors.As(err, &ae) {
		status = ae.Status
	}
	// A 503 only means that the client left or the server is stopping.
	if status >= 500 && status != http.StatusServiceUnavailable {
		s.log.Error("toyllm: request failed", "status", status, "err", err)
	} else {
		s.log.Debug("toyllm: request rejected", "status", status, "err", err)
	}
	body, _ := json.Marshal(errorBody{Object: "error", Message: err.Error(), Type: errorType(status), Code: status})
	vllmapi.WriteBody(w, status, body)
}

// decode parses a JSON request body into v.
func decode(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	// Only errors of encoding/json itself are rephrased: the custom
	// unmarshalers' errors already say what is wrong.
	switch e := err.(type) {
	case *json.SyntaxError:
		return vllmapi.BadRequest("invalid JSON body: %w", err)
	case *json.UnmarshalTypeError:
		if e.Field == "" {
			return vllmapi.BadRequest("request body must be a JSON object")
		}
		field := strings.TrimPrefix(e.Field, "samplingRequest.")
		return vllmapi.BadRequest("invalid value for field %q: JSON %s where %s was expected", field, e.Value, e.Type)
	}
	return vllmapi.BadRequest("%w", err)
}

// checkModel accepts an empty model name or the served one.
func (s *Server) checkModel(name string) error {
	if name == "" || name == s.opts.Model {
		return nil
	}
	return vllmapi.StatusError(http.StatusNotFound, "The model `%s` does not exist.", name)
}

// checkLogprobCount validates a requested number of alternatives.
func checkLogprobCount(n int) error {
	if n < 0 {
		return vllmapi.BadRequest("logprobs must be non-negative, got %d", n)
	}
	if n > maxLogprobs {
		return vllmapi.BadRequest("Requested sample logprobs of %d, which is greater than max allowed: %d", n, maxLogprobs)
	}
	return nil
}

// responseOptions are the output choices of a generation request.
type responseOptions struct {
	logprobs bool // report logprobs
	asIDs    bool // token strings as "token_id:<id>"
	tokenIDs bool // include token_ids and prompt_token_ids
	topN     int
	model    *ModelTokenizer // nil: the byte vocabulary
}

// serveGeneration answers a generation request: gen validates it and
// generates the answer into st, and appendResponse writes the response.
func (s *Server) serveGeneration(w http.ResponseWriter, r *http.Request,
	gen func(*Server, *http.Request, http.ResponseWriter, *genState) (responseOptions, error),
	appendResponse func(*Server, []byte, *genState, responseOptions) []byte,
) {
	st := s.getState()
	defer s.putState(st)
	ro, err := gen(s, r, w, st)
	if err != nil {
		s.writeError(w, err)
		return
	}
	st.resp = appendResponse(s, st.resp[:0], st, ro)
	vllmapi.WriteBody(w, http.StatusOK, st.resp)
}

// serveJSON answers a request off the hot path with what answer returns,
// encoded by encoding/json.
func serveJSON[T any](s *Server, w http.ResponseWriter, r *http.Request,
	answer func(*Server, *http.Request, http.ResponseWriter, *genState) (T, error),
) {
	st := s.getState()
	defer s.putState(st)
	resp, err := answer(s, r, w, st)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, resp)
}

// readRequest reads a request body into st and decodes it into req, then
// checks the model it names; model points at req's model field.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, st *genState, req any, model *string) error {
	if err := vllmapi.ReadBody(w, r, s.maxBody, &st.body); err != nil {
		return err
	}
	if err := decode(st.body.Bytes(), req); err != nil {
		return err
	}
	return s.checkModel(*model)
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveGeneration(w, r, (*Server).completion, (*Server).appendCompletion)
}

// completion validates a /v1/completions request and generates its answer
// into st.
func (s *Server) completion(r *http.Request, w http.ResponseWriter, st *genState) (responseOptions, error) {
	if err := vllmapi.ReadBody(w, r, s.maxBody, &st.body); err != nil {
		return responseOptions{}, err
	}
	body := st.body.Bytes()
	var req completionRequest
	req.Prompt.ids, req.Prompt.vocab = st.prompt[:0], s.vocabSize()
	if start, end, ok := findPromptList(body); ok {
		if err := req.Prompt.parseIDs(body[start:end]); err != nil {
			return responseOptions{}, vllmapi.BadRequest("%w", err)
		}
		req.Prompt.set = true
		st.rest = append(append(append(st.rest[:0], body[:start]...), "null"...), body[end:]...)
		body = st.rest
	}
	if err := decode(body, &req); err != nil {
		return responseOptions{}, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return responseOptions{}, err
	}
	gp, err := req.genParams()
	if err != nil {
		return responseOptions{}, err
	}
	switch {
	case !req.Prompt.set:
		return responseOptions{}, vllmapi.BadRequest("prompt is required")
	case req.Prompt.isText && s.model != nil:
		st.prompt = append(req.Prompt.ids, s.model.tok.Encode(req.Prompt.text, req.AddSpecialTokens == nil || *req.AddSpecialTokens)...)
	case req.Prompt.isText:
		st.prompt = appendEncode(req.Prompt.ids, req.Prompt.text)
	default:
		st.prompt = req.Prompt.ids
	}
	if len(st.prompt) == 0 {
		return responseOptions{}, vllmapi.BadRequest("prompt must not be empty")
	}
	gp.maxTokens = 16
	if req.MaxTokens != nil {
		gp.maxTokens = *req.MaxTokens
	}
	if err := checkMaxTokens(gp.maxTokens, len(st.prompt), s.opts.MaxModelLen); err != nil {
		return responseOptions{}, err
	}
	gp.model, gp.reasoning = s.model, s.reasoning
	ro := responseOptions{asIDs: req.ReturnTokensAsTokenIDs, tokenIDs: req.ReturnTokenIDs, model: s.model}
	if req.Logprobs != nil {
		if err := checkLogprobCount(*req.Logprobs); err != nil {
			return responseOptions{}, err
		}
		ro.logprobs, ro.topN, gp.topN = true, *req.Logprobs, *req.Logprobs
	}
	return ro, s.run(r.Context(), st, &gp)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveGeneration(w, r, (*Server).chatCompletion, (*Server).appendChatCompletion)
}

// chatCompletion validates a /v1/chat/completions request and generates its
// answer into st.
func (s *Server) chatCompletion(r *http.Request, w http.ResponseWriter, st *genState) (responseOptions, error) {
	var req chatRequest
	if err := s.readRequest(w, r, st, &req, &req.Model); err != nil {
		return responseOptions{}, err
	}
	gp, err := req.genParams()
	if err != nil {
		return responseOptions{}, err
	}
	if st.prompt, err = s.encodeChat(st.prompt[:0], &req.chatTemplateFields); err != nil {
		return responseOptions{}, err
	}
	maxLen := s.opts.MaxModelLen
	switch {
	case req.MaxCompletionTokens != nil:
		gp.maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		gp.maxTokens = *req.MaxTokens
	case len(st.prompt) >= maxLen:
		return responseOptions{}, vllmapi.BadRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
			"Please reduce the length of the input messages.", maxLen, len(st.prompt))
	default:
		// Like vLLM: whatever room the context window leaves.
		gp.maxTokens = maxLen - len(st.prompt)
	}
	if err := checkMaxTokens(gp.maxTokens, len(st.prompt), maxLen); err != nil {
		return responseOptions{}, err
	}
	gp.model, gp.reasoning = s.model, s.reasoning
	ro := responseOptions{logprobs: req.Logprobs, asIDs: req.ReturnTokensAsTokenIDs, tokenIDs: req.ReturnTokenIDs, model: s.model}
	if req.TopLogprobs != nil {
		if !req.Logprobs && *req.TopLogprobs > 0 {
			return responseOptions{}, vllmapi.BadRequest("when using `top_logprobs`, `logprobs` must be set to true.")
		}
		if err := checkLogprobCount(*req.TopLogprobs); err != nil {
			return responseOptions{}, err
		}
		ro.topN, gp.topN = *req.TopLogprobs, *req.TopLogprobs
	}
	return ro, s.run(r.Context(), st, &gp)
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	serveJSON(s, w, r, (*Server).tokenize)
}

// tokenize answers POST /tokenize: text as is, or messages through the chat
// template.
func (s *Server) tokenize(r *http.Request, w http.ResponseWriter, st *genState) (tokenizeResponse, error) {
	var req tokenizeRequest
	if err := s.readRequest(w, r, st, &req, &req.Model); err != nil {
		return tokenizeResponse{}, err
	}
	var ids []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return tokenizeResponse{}, vllmapi.BadRequest("give either prompt or messages, not both")
	case req.Prompt != nil && s.model != nil:
		ids = s.model.tok.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case req.Prompt != nil:
		ids = Tokenizer{}.Encode(*req.Prompt)
	case req.Messages != nil:
		var err error
		if ids, err = s.encodeChat(nil, &req.chatTemplateFields); err != nil {
			return tokenizeResponse{}, err
		}
	default:
		return tokenizeResponse{}, vllmapi.BadRequest("prompt or messages is required")
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: s.opts.MaxModelLen, Tokens: ids}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			if s.model != nil {
				// As vLLM: the vocabulary's token strings, such as "Ġthe".
				resp.TokenStrs[i], _ = s.model.tok.Token(id)
			} else {
				resp.TokenStrs[i] = tokenStrings[id]
			}
		}
	}
	return resp, nil
}

// encodeChat appends to dst the tokens of a conversation rendered by the
// chat template: the byte vocabulary's, or the real model's, encoded
// without its BOS unless add_special_tokens asks for it, as vLLM does.
func (s *Server) encodeChat(dst []int32, f *chatTemplateFields) ([]int32, error) {
	if s.model == nil {
		text, err := f.render()
		if err != nil {
			return nil, err
		}
		return appendEncode(dst, text), nil
	}
	text, err := s.model.render(f)
	if err != nil {
		return nil, err
	}
	return append(dst, s.model.tok.Encode(text, f.AddSpecialTokens != nil && *f.AddSpecialTokens)...), nil
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	serveJSON(s, w, r, (*Server).detokenize)
}

// detokenize answers POST /detokenize.
func (s *Server) detokenize(r *http.Request, w http.ResponseWriter, st *genState) (detokenizeResponse, error) {
	var req detokenizeRequest
	if err := s.readRequest(w, r, st, &req, &req.Model); err != nil {
		return detokenizeResponse{}, err
	}
	for _, id := range req.Tokens {
		if id < 0 || int(id) >= s.vocabSize() {
			return detokenizeResponse{}, vllmapi.BadRequest("Token id %d is out of vocabulary", id)
		}
	}
	if s.model != nil {
		return detokenizeResponse{Prompt: s.model.tok.Decode(req.Tokens, false)}, nil
	}
	return detokenizeResponse{Prompt: Tokenizer{}.Decode(req.Tokens)}, nil
}

// vocabSize is the number of token ids of the served vocabulary.
func (s *Server) vocabSize() int {
	if s.model != nil {
		return s.model.tok.VocabSize()
	}
	return VocabSize
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, vllmapi.ModelList[modelCard]{Object: "list", Data: []modelCard{{
		ID: s.opts.Model, Object: "model", Created: s.created, OwnedBy: "vllm",
		Root: s.opts.Model, MaxModelLen: s.opts.MaxModelLen,
	}}})
}

// handleHealth answers 200 with an empty body, as a healthy vLLM does.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
}

// labelEscaper escapes a Prometheus label value.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// handleMetrics serves vLLM's scheduler gauges and prefix cache counters in
// Prometheus' text format, which load-aware routers and the LLM worker's
// in-flight control read, and the stand-in's own: its skill, its weight
// version (as a label of an info gauge), whether generation is held, its
// concurrency cap and the running time of its generations. KV-cache usage
// is the prefix cache's blocks held by running requests over its capacity;
// without a prefix cache, the KV cache is the generation slots: usage is
// the running sequences over Options.MaxConcurrent (0 without a cap). The
// prefix cache counters, in tokens, are always served, 0 without a cache,
// as by vLLM.
func (s *Server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	pol, held := s.gate.pol, s.gate.held()
	s.mu.Unlock()
	model := labelEscaper.Replace(s.opts.Model)
	label := `{model_name="` + model + `"}`
	paused := 0
	if held {
		paused = 1
	}
	running := s.running.Load()
	cs := s.cache.stats()
	usage := 0.0
	switch {
	case cs.capacity > 0:
		usage = float64(cs.used) / float64(cs.capacity)
	case s.opts.MaxConcurrent > 0:
		usage = min(float64(running)/float64(s.opts.MaxConcurrent), 1)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"+
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d.0\n"+
		"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"+
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %d.0\n"+
		"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s %s\n"+
		"# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"+
		"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total%s %d.0\n"+
		"# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"+
		"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total%s %d.0\n"+
		"# HELP toyllm:skill The policy's logit for the planned token.\n"+
		"# TYPE toyllm:skill gauge\ntoyllm:skill%s %s\n"+
		"# HELP toyllm:weight_info The current weight version, as a label.\n"+
		"# TYPE toyllm:weight_info gauge\ntoyllm:weight_info{model_name=\"%s\",weight_version=\"%s\"} 1.0\n"+
		"# HELP toyllm:is_paused Whether new generations are held by a pause or a weight update.\n"+
		"# TYPE toyllm:is_paused gauge\ntoyllm:is_paused%s %d.0\n"+
		"# HELP toyllm:max_concurrent The cap on sequences generating at once (0: none).\n"+
		"# TYPE toyllm:max_concurrent gauge\ntoyllm:max_concurrent%s %d.0\n"+
		"# HELP toyllm:running_seconds_total Time finished generations spent running, summed (the running gauge integrated over time).\n"+
		"# TYPE toyllm:running_seconds_total counter\ntoyllm:running_seconds_total%s %s\n",
		label, running, label, s.waiting.Load(),
		label, strconv.FormatFloat(usage, 'g', -1, 64),
		label, cs.queries, label, cs.hits,
		label, strconv.FormatFloat(pol.skill, 'g', -1, 64),
		model, labelEscaper.Replace(pol.version), label, paused,
		label, s.opts.MaxConcurrent,
		label, strconv.FormatFloat(time.Duration(s.runNanos.Load()).Seconds(), 'g', -1, 64))
}

// appendHeader appends the fields every generation response starts with.
func (s *Server) appendHeader(b []byte, idPrefix, object string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, `{"id":"`...)
	b = append(b, idPrefix...)
	seq := s.idSeq.Add(1)
	for _, v := range [2]uint64{s.idPrefix, seq} {
		for shift := 60; shift >= 0; shift -= 4 {
			b = append(b, hex[(v>>uint(shift))&15])
		}
	}
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	return append(b, s.modelJSON...)
}

// appendChoiceTail appends finish_reason, stop_reason and token_ids.
func appendChoiceTail(b []byte, st *genState, ro responseOptions) []byte {
	b = append(b, `,"finish_reason":"`...)
	b = append(b, st.finish...)
	b = append(b, `","stop_reason":`...)
	switch st.stopKind {
	case stopToken:
		b = strconv.AppendInt(b, int64(st.stopID), 10)
	case stopString:
		b = jsonw.AppendString(b, st.stopMatch)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"token_ids":`...)
	return appendTokenIDs(b, st.ids, ro)
}

// appendTokenIDs appends ids as a JSON array if ro asks for token ids, and
// null otherwise.
func appendTokenIDs(b []byte, ids []int32, ro responseOptions) []byte {
	if ro.tokenIDs {
		return jsonw.AppendInt32s(b, ids)
	}
	return append(b, "null"...)
}

// appendUsage appends the usage object and what follows it.
func appendUsage(b []byte, st *genState) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(len(st.prompt)), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(len(st.prompt)+len(st.ids)), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(len(st.ids)), 10)
	return append(b, `,"prompt_tokens_details":null}`...)
}

// appendTokenKey appends a token's JSON string as logprobs show it.
func appendTokenKey(b []byte, id int32, ro responseOptions) []byte {
	switch {
	case ro.model != nil:
		return ro.model.appendTokenKey(b, id, ro.asIDs)
	case ro.asIDs:
		return append(b, tokenIDJSON[id]...)
	}
	return append(b, tokenJSON[id]...)
}

// appendTokenBytes appends a token's bytes as a JSON array.
func appendTokenBytes(b []byte, id int32, ro responseOptions) []byte {
	if ro.model != nil {
		return ro.model.appendTokenBytes(b, id)
	}
	return append(b, tokenBytesJSON[id]...)
}

// appendCompletion appends the /v1/completions response for st.
func (s *Server) appendCompletion(b []byte, st *genState, ro responseOptions) []byte {
	b = s.appendHeader(b, "cmpl-", "text_completion")
	b = append(b, `,"choices":[{"index":0,"text":`...)
	b = jsonw.AppendString(b, string(st.out))
	b = append(b, `,"logprobs":`...)
	if ro.logprobs {
		b = appendCompletionLogprobs(b, st, ro)
	} else {
		b = append(b, "null"...)
	}
	b = appendChoiceTail(b, st, ro)
	b = append(b, `,"prompt_logprobs":null,"prompt_token_ids":`...)
	b = appendTokenIDs(b, st.prompt, ro)
	b = append(b, `}],"service_tier":null,"system_fingerprint":null,`...)
	b = appendUsage(b, st)
	return append(b, `,"kv_transfer_params":null}`...)
}

// appendCompletionLogprobs appends the legacy completions logprobs object.
// As in vLLM, each top_logprobs entry maps the sampled token and the topN
// most likely tokens to their logprobs.
func appendCompletionLogprobs(b []byte, st *genState, ro responseOptions) []byte {
	var lpf logprobFormatter
	b = append(b, `{"text_offset":`...)
	b = jsonw.AppendInt32s(b, st.offsets)
	b = append(b, `,"token_logprobs":[`...)
	for i, lp := range st.logp {
		if i > 0 {
			b = append(b, ',')
		}
		b = lpf.append(b, lp)
	}
	b = append(b, `],"tokens":[`...)
	for i, id := range st.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendTokenKey(b, id, ro)
	}
	b = append(b, `],"top_logprobs":[`...)
	for i, id := range st.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendTokenKey(b, id, ro)
		b = append(b, ':')
		b = lpf.append(b, st.logp[i])
		for _, a := range st.tops[i*ro.topN : (i+1)*ro.topN] {
			if a.id == id {
				continue
			}
			b = append(b, ',')
			b = appendTokenKey(b, a.id, ro)
			b = append(b, ':')
			b = lpf.append(b, a.logp)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendChatCompletion appends the /v1/chat/completions response for st.
func (s *Server) appendChatCompletion(b []byte, st *genState, ro responseOptions) []byte {
	b = s.appendHeader(b, "chatcmpl-", "chat.completion")
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	b = jsonw.AppendString(b, string(st.out))
	b = append(b, `,"reasoning_content":null,"tool_calls":[]},"logprobs":`...)
	if ro.logprobs {
		b = appendChatLogprobs(b, st, ro)
	} else {
		b = append(b, "null"...)
	}
	b = appendChoiceTail(b, st, ro)
	b = append(b, `}],"service_tier":null,"system_fingerprint":null,`...)
	b = appendUsage(b, st)
	b = append(b, `,"prompt_logprobs":null,"prompt_token_ids":`...)
	b = appendTokenIDs(b, st.prompt, ro)
	return append(b, `,"kv_transfer_params":null}`...)
}

// appendChatLogprobs appends the chat logprobs object: per token its
// string, logprob, bytes and the topN most likely tokens.
func appendChatLogprobs(b []byte, st *genState, ro responseOptions) []byte {
	var lpf logprobFormatter
	entry := func(b []byte, id int32, lp float64) []byte {
		b = append(b, `{"token":`...)
		b = appendTokenKey(b, id, ro)
		b = append(b, `,"logprob":`...)
		b = lpf.append(b, lp)
		b = append(b, `,"bytes":`...)
		return appendTokenBytes(b, id, ro)
	}
	b = append(b, `{"content":[`...)
	for i, id := range st.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = entry(b, id, st.logp[i])
		b = append(b, `,"top_logprobs":[`...)
		for j, a := range st.tops[i*ro.topN : (i+1)*ro.topN] {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(entry(b, a.id, a.logp), '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}
