package remoteenv

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/rollfleet/rollfleet/envs"
)

// sessionCookie names the cookie GymHandler keeps its sessions under.
const sessionCookie = "rf_session"

// GymHandler serves a registered env over the Gymnasium-style protocol that
// KindGym speaks: POST /reset {seed} → {observation, info}, POST /step
// {response} → {observation, reward, terminated, truncated, info}, one game
// per session cookie. It is the reference server for remote envs (and lets a
// rollfleet env be played by any NeMo Gym-style agent).
func GymHandler(envID string) (http.Handler, error) {
	if _, err := envs.Lookup(envID); err != nil {
		return nil, err
	}
	h := &gymHandler{id: envID, games: map[string]*game{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reset", h.reset)
	mux.HandleFunc("POST /step", h.step)
	return mux, nil
}

type gymHandler struct {
	id    string
	mu    sync.Mutex
	games map[string]*game
}

// game is one session's env; a client sending two steps at once must not
// step it concurrently.
type game struct {
	mu  sync.Mutex
	env envs.Env
}

func (h *gymHandler) reset(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Seed uint64 `json:"seed"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
		http.Error(w, fmt.Sprintf("bad /reset body: %v", err), http.StatusBadRequest)
		return
	}
	env, err := envs.New(h.id, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	obs, info := env.Reset(envs.NewRNG(body.Seed))
	var id [16]byte
	_, _ = rand.Read(id[:])
	sid := hex.EncodeToString(id[:])
	h.mu.Lock()
	h.games[sid] = &game{env: env}
	h.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/"})
	writeJSON(w, map[string]any{"observation": obs, "info": info})
}

func (h *gymHandler) step(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Response *string `json:"response"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil || body.Response == nil {
		http.Error(w, "bad /step body: want {\"response\": string}", http.StatusBadRequest)
		return
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		http.Error(w, "no session: call /reset first", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	g, ok := h.games[c.Value]
	h.mu.Unlock()
	if !ok {
		http.Error(w, "unknown session", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	res := g.env.Step(*body.Response)
	g.mu.Unlock()
	if res.Done() {
		h.mu.Lock()
		delete(h.games, c.Value)
		h.mu.Unlock()
	}
	writeJSON(w, map[string]any{
		"observation": res.Observation, "reward": res.Reward,
		"terminated": res.Terminated, "truncated": res.Truncated, "info": res.Info,
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
