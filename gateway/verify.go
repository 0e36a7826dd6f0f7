package gateway

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// A NeMo Gym verify result — what a resources server's /verify answers and what rollout
// collection writes per rollout: the request's fields, the agent's "response" (a Responses API
// object whose output items carry the token ids of each model call) and "reward" — finishes
// the session whose tokens end with the last model call of that response. The verifier's
// other number fields become extra_logs, its short string fields info.

// Bounds on what a verify result adds to a trajectory.
const (
	maxVerifyFields     = 64
	maxVerifyInfoLength = 1024
)

// verifyFinish is a decoded verify result: the tokens of the session it finishes and the
// finish it amounts to.
type verifyFinish struct {
	trace  []int32
	finish finishRequest
}

// decodeVerify decodes a verify result.
func decodeVerify(body []byte) (*verifyFinish, error) {
	var fields map[string]json.RawMessage
	if err := decodeJSON(body, &fields); err != nil {
		return nil, err
	}
	v := &verifyFinish{finish: finishRequest{ExtraLogs: map[string]float64{}, Info: map[string]string{}}}
	if err := json.Unmarshal(fields["reward"], &v.finish.Reward); err != nil || v.finish.Reward == nil {
		return nil, vllmapi.BadRequest("reward must be a number")
	}
	var resp struct {
		Output []struct {
			PromptTokenIDs     []int64 `json:"prompt_token_ids"`
			GenerationTokenIDs []int64 `json:"generation_token_ids"`
		} `json:"output"`
	}
	if err := json.Unmarshal(fields["response"], &resp); err != nil {
		return nil, vllmapi.BadRequest("response must be a Responses API object with output items")
	}
	for i := len(resp.Output) - 1; i >= 0 && v.trace == nil; i-- {
		it := resp.Output[i]
		if it.GenerationTokenIDs == nil || it.PromptTokenIDs == nil {
			continue
		}
		prompt, err := tokenIDs("prompt_token_ids", it.PromptTokenIDs)
		if err != nil {
			return nil, vllmapi.BadRequest("response.output[%d]: %w", i, err)
		}
		gen, err := tokenIDs("generation_token_ids", it.GenerationTokenIDs)
		if err != nil {
			return nil, vllmapi.BadRequest("response.output[%d]: %w", i, err)
		}
		v.trace = append(prompt, gen...)
	}
	if len(v.trace) == 0 {
		return nil, vllmapi.BadRequest("response.output has no item with prompt_token_ids and generation_token_ids: " +
			"the model server must return token information (vllm_model's return_token_id_information)")
	}
	// In key order, so which fields the bound keeps does not vary from call to call.
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if k == "reward" || k == "response" || len(v.finish.ExtraLogs)+len(v.finish.Info) >= maxVerifyFields {
			continue
		}
		raw := bytes.TrimSpace(fields[k])
		var x float64
		var s string
		switch {
		case len(raw) > 0 && raw[0] == '"':
			if json.Unmarshal(raw, &s) == nil && len(s) <= maxVerifyInfoLength {
				v.finish.Info[k] = s
			}
		case json.Unmarshal(raw, &x) == nil && !math.IsNaN(x) && !math.IsInf(x, 0):
			v.finish.ExtraLogs[k] = x
		}
	}
	return v, nil
}

// handleVerify finishes the session a NeMo Gym verify result belongs to.
func (g *Gateway) handleVerify(w http.ResponseWriter, r *http.Request) error {
	body, err := g.readBody(w, r)
	if err != nil {
		return err
	}
	v, err := decodeVerify(body)
	if err != nil {
		return err
	}
	l, err := g.sessions.byTrace(v.trace)
	if err != nil {
		return err
	}
	return g.finish(w, r, l, &v.finish)
}
