package vllm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/rollfleet/rollfleet/internal/jsonw"
)

// CompletionRequest is one generation from a token-id prompt. Fields left
// at zero are omitted where noted, so the server's default applies.
type CompletionRequest struct {
	Prompt       []int32 // the prompt's token ids; must not be empty
	MaxTokens    int     // required, > 0 (vLLM's default of 16 is never relied on)
	Temperature  float64 // always sent; 0 is greedy
	TopP         float64 // in [0, 1]; 0 = omit (server default 1)
	TopK         int     // 0 = omit; -1 = off
	Seed         *int64  // nil = omit
	Stop         []string
	StopTokenIDs []int32

	// Optional sampling settings, omitted at their zero values so that the
	// server's defaults apply.
	MinP              float64 // in [0, 1]; 0 = omit
	PresencePenalty   float64 // 0 = omit
	FrequencyPenalty  float64 // 0 = omit
	RepetitionPenalty float64 // > 0; 0 = omit (server default 1)
	MinTokens         int     // >= 0; 0 = omit
	IgnoreEOS         bool    // false = omit

	// SkipSpecialTokens leaves special tokens out of Text; the default,
	// false, keeps them, as RL rollouts want. Token ids are never affected.
	SkipSpecialTokens bool
	// IncludeStopStrInOutput keeps a matched stop string in Text.
	IncludeStopStrInOutput bool
	// StructuredOutputs is vLLM's structured_outputs object (guided decoding: "json",
	// "choice", "regex" ...); nil omits it.
	StructuredOutputs json.RawMessage
	// TopLogprobs asks for the most likely tokens at each position (vLLM's logprobs=N); 0
	// reports the sampled token's logprob only.
	TopLogprobs int
}

// Completion is what the engine generated: the sampled token ids, each with
// its logprob, exactly as sampled.
type Completion struct {
	TokenIDs     []int32
	Logprobs     []float32 // the sampled token's logprob, aligned with TokenIDs
	Text         string
	FinishReason string // "stop" | "length" | "abort" (ended by a pause) | other engine values passed through
	StopReason   string // "" when null; the decimal id for a stop token, the string for a stop string
	PromptTokens int    // usage.prompt_tokens
	// TopLogprobs holds, when the request asked for TopLogprobs, the most likely tokens at each
	// position, most likely first (the sampled one among them, as vLLM adds it).
	TopLogprobs []TopLogprobs
}

// TopLogprobs are the most likely tokens at one position, with their logprobs.
type TopLogprobs struct {
	IDs      []int32
	Logprobs []float32
}

func (r *CompletionRequest) validate() error {
	switch {
	case len(r.Prompt) == 0:
		return errors.New("empty prompt")
	case r.MaxTokens <= 0:
		return fmt.Errorf("MaxTokens %d, must be > 0", r.MaxTokens)
	case math.IsNaN(r.Temperature) || math.IsInf(r.Temperature, 0) || r.Temperature < 0:
		return fmt.Errorf("Temperature %v, must be finite and >= 0", r.Temperature)
	case !(r.TopP >= 0 && r.TopP <= 1):
		return fmt.Errorf("TopP %v, must be in [0, 1]", r.TopP)
	case r.TopK < -1:
		return fmt.Errorf("TopK %d, must be >= -1", r.TopK)
	case !(r.MinP >= 0 && r.MinP <= 1):
		return fmt.Errorf("MinP %v, must be in [0, 1]", r.MinP)
	case !isFinite(r.PresencePenalty) || !isFinite(r.FrequencyPenalty):
		return fmt.Errorf("presence and frequency penalties %v, %v must be finite", r.PresencePenalty, r.FrequencyPenalty)
	case !isFinite(r.RepetitionPenalty) || r.RepetitionPenalty < 0:
		return fmt.Errorf("RepetitionPenalty %v, must be finite and >= 0", r.RepetitionPenalty)
	case r.MinTokens < 0:
		return fmt.Errorf("MinTokens %d, must be >= 0", r.MinTokens)
	case r.TopLogprobs < 0:
		return fmt.Errorf("TopLogprobs %d, must be >= 0", r.TopLogprobs)
	case len(r.StructuredOutputs) > 0 && !json.Valid(r.StructuredOutputs):
		return errors.New("StructuredOutputs is not valid JSON")
	}
	return nil
}

// Complete sends POST /v1/completions with the prompt as token ids and asks
// for exactly what a trainer needs back: the sampled tokens as
// "token_id:<id>" strings and their logprobs (logprobs: 0,
// return_tokens_as_token_ids), special tokens kept in the text, one choice.
// It does not ask for return_token_ids, whose reply echoes the whole prompt
// (thousands of ids the server encodes and the client skips on every
// turn); a server that sends token_ids anyway has them read instead. A
// prompt that does not fit the model's context fails with ErrContextLength.
func (c *Client) Complete(ctx context.Context, req CompletionRequest) (_ Completion, err error) {
	if c.obs != nil {
		defer func(start time.Time) { c.obs.Completed(time.Since(start), err) }(time.Now())
	}
	if err := req.validate(); err != nil {
		return Completion{}, fmt.Errorf("vllm: complete: invalid request: %w", err)
	}
	model, err := c.modelName(ctx)
	if err != nil {
		return Completion{}, err
	}
	body := encode(func(b []byte) []byte { return appendCompletionRequest(b, model, &req) })
	buf, err := c.do(ctx, c.completionsURL, body)
	if err != nil {
		return Completion{}, opError("complete", c.completionsURL, err)
	}
	defer putBuffer(buf)
	comp, err := decodeCompletion(buf.Bytes())
	if err == nil && req.TopLogprobs > 0 {
		comp.TopLogprobs, err = decodeTopLogprobs(buf.Bytes(), len(comp.TokenIDs))
	}
	if err != nil {
		return Completion{}, opError("complete", c.completionsURL, err)
	}
	return comp, nil
}

// decodeTopLogprobs reads a completion's logprobs.top_logprobs, one map of "token_id:<id>" to
// logprob per token, into entries sorted most likely first (ties by id). It is read only when
// asked for: most completions want the sampled tokens alone.
func decodeTopLogprobs(data []byte, n int) ([]TopLogprobs, error) {
	var r struct {
		Choices []struct {
			Logprobs struct {
				TopLogprobs []map[string]float32 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if len(r.Choices) != 1 {
		return nil, fmt.Errorf("%w: %d choices, want 1", ErrBadResponse, len(r.Choices))
	}
	tops := r.Choices[0].Logprobs.TopLogprobs
	if len(tops) != n {
		return nil, fmt.Errorf("%w: %d top_logprobs entries for %d tokens", ErrBadResponse, len(tops), n)
	}
	out := make([]TopLogprobs, n)
	type alt struct {
		id int32
		lp float32
	}
	for i, m := range tops {
		alts := make([]alt, 0, len(m))
		for k, lp := range m {
			id, err := parseTokenID(k)
			if err != nil {
				return nil, fmt.Errorf("%w: top_logprobs[%d]: %w", ErrBadResponse, i, err)
			}
			alts = append(alts, alt{id, lp})
		}
		slices.SortFunc(alts, func(a, b alt) int { return cmp.Or(cmp.Compare(b.lp, a.lp), cmp.Compare(a.id, b.id)) })
		t := TopLogprobs{IDs: make([]int32, len(alts)), Logprobs: make([]float32, len(alts))}
		for j, a := range alts {
			t.IDs[j], t.Logprobs[j] = a.id, a.lp
		}
		out[i] = t
	}
	return out, nil
}

func appendCompletionRequest(b []byte, model string, r *CompletionRequest) []byte {
	b = append(b, `{"model":`...)
	b = jsonw.AppendString(b, model)
	b = append(b, `,"prompt":`...)
	b = jsonw.AppendInt32s(b, r.Prompt)
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	b = append(b, `,"temperature":`...)
	b = appendFloat(b, r.Temperature)
	if r.TopP != 0 {
		b = append(b, `,"top_p":`...)
		b = appendFloat(b, r.TopP)
	}
	if r.TopK != 0 {
		b = append(b, `,"top_k":`...)
		b = strconv.AppendInt(b, int64(r.TopK), 10)
	}
	if r.Seed != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendInt(b, *r.Seed, 10)
	}
	if len(r.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range r.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.AppendString(b, s)
		}
		b = append(b, ']')
	}
	if len(r.StopTokenIDs) > 0 {
		b = append(b, `,"stop_token_ids":`...)
		b = jsonw.AppendInt32s(b, r.StopTokenIDs)
	}
	if r.MinP != 0 {
		b = append(b, `,"min_p":`...)
		b = appendFloat(b, r.MinP)
	}
	if r.PresencePenalty != 0 {
		b = append(b, `,"presence_penalty":`...)
		b = appendFloat(b, r.PresencePenalty)
	}
	if r.FrequencyPenalty != 0 {
		b = append(b, `,"frequency_penalty":`...)
		b = appendFloat(b, r.FrequencyPenalty)
	}
	if r.RepetitionPenalty != 0 {
		b = append(b, `,"repetition_penalty":`...)
		b = appendFloat(b, r.RepetitionPenalty)
	}
	if r.MinTokens != 0 {
		b = append(b, `,"min_tokens":`...)
		b = strconv.AppendInt(b, int64(r.MinTokens), 10)
	}
	if r.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	if r.IncludeStopStrInOutput {
		b = append(b, `,"include_stop_str_in_output":true`...)
	}
	if len(r.StructuredOutputs) > 0 {
		b = append(b, `,"structured_outputs":`...)
		b = append(b, r.StructuredOutputs...)
	}
	b = append(b, `,"n":1,"logprobs":`...)
	b = strconv.AppendInt(b, int64(r.TopLogprobs), 10)
	b = append(b, `,"return_tokens_as_token_ids":true,"skip_special_tokens":`...)
	b = strconv.AppendBool(b, r.SkipSpecialTokens)
	return append(b, '}')
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// completionResponse is the part of vLLM's completion response the client
// reads; the rest (top_logprobs, text_offset, prompt_token_ids) is skipped.
type completionResponse struct {
	Choices []completionChoice `json:"choices"`
	Usage   struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

type completionChoice struct {
	Text     string `json:"text"`
	Logprobs struct {
		Tokens        tokenIDStrings `json:"tokens"`
		TokenLogprobs logprobList    `json:"token_logprobs"`
	} `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   stopReason  `json:"stop_reason"`
	TokenIDs     tokenIDList `json:"token_ids"`
}

// decodeCompletion parses and checks a completion response body.
func decodeCompletion(data []byte) (Completion, error) {
	var r completionResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return Completion{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if len(r.Choices) != 1 {
		return Completion{}, fmt.Errorf("%w: %d choices, want 1", ErrBadResponse, len(r.Choices))
	}
	ch := &r.Choices[0]
	if !ch.Logprobs.TokenLogprobs.set {
		return Completion{}, fmt.Errorf("%w: no logprobs.token_logprobs", ErrBadResponse)
	}
	ids := ch.TokenIDs.ids
	if !ch.TokenIDs.set {
		switch toks := ch.Logprobs.Tokens; {
		case !toks.set:
			return Completion{}, fmt.Errorf("%w: neither token_ids nor logprobs.tokens", ErrBadResponse)
		case toks.err != nil:
			return Completion{}, fmt.Errorf("%w: no token_ids, and %w", ErrBadResponse, toks.err)
		}
		ids = ch.Logprobs.Tokens.ids
	}
	lps := ch.Logprobs.TokenLogprobs.vals
	if len(ids) != len(lps) {
		return Completion{}, fmt.Errorf("%w: %d token ids but %d logprobs", ErrBadResponse, len(ids), len(lps))
	}
	if ch.FinishReason == "" {
		return Completion{}, fmt.Errorf("%w: no finish_reason", ErrBadResponse)
	}
	return Completion{
		TokenIDs:     ids,
		Logprobs:     lps,
		Text:         ch.Text,
		FinishReason: ch.FinishReason,
		StopReason:   string(ch.StopReason),
		PromptTokens: r.Usage.PromptTokens,
	}, nil
}
