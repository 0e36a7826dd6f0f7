package gateway

import (
	"bytes"
	"net/http"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/messages"
)

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
