package nemogym

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// Record is one result line of NeMo Gym's rollout collection for a math
// agent: the verify response of its math_with_judge server (the request's
// responses_create_params, the model's response, reward and the verifier's
// fields) with the row's _ng_task_index, _ng_rollout_index and agent_ref.
// AppendRecord writes it as NeMo Gym does (orjson: compact, UTF-8, the
// pydantic models dumped with every field).
type Record struct {
	// Input are the input messages; CreateParams, when set, is the row's own
	// responses_create_params (raw JSON object), whose other members are
	// kept. Temperature, TopP and MaxOutputTokens are the sampling the
	// response was made with (nil: null).
	Input           []Message
	CreateParams    json.RawMessage
	Temperature     *float64
	TopP            *float64
	MaxOutputTokens *int32

	// Response: its id, creation time (unix seconds), model, one output
	// message per model turn, whether the last turn was cut by
	// max_output_tokens, and the token counts of its usage.
	ResponseID   string
	CreatedAt    float64
	Model        string
	Output       []OutputMessage
	Incomplete   bool
	InputTokens  int
	OutputTokens int

	Reward float64
	// JudgeFailure, when set, marks a verify response whose LLM judge could
	// not be asked: NeMo Gym's judge_failsafe row, written with mask_sample
	// true, failure_kind "judge_failed" and this as failure_reason.
	JudgeFailure string
	// Math marks a math verify response: expected_answer, extracted_answer,
	// library_reward and judge_evaluations are written (null when nil).
	Math             bool
	ExpectedAnswer   string
	ExtractedAnswer  *string
	LibraryReward    float64
	JudgeEvaluations json.RawMessage

	TaskIndex, RolloutIndex int32
	// AgentRef is the row's agent_ref (raw JSON), or nil for {"name": AgentName}.
	AgentRef json.RawMessage
	// Extra are further members written at the end (the row's question and
	// other fields, rollfleet's episode id); a key already written is skipped.
	Extra []Field
}

// OutputMessage is one assistant message of a response, with the token ids
// and log-probabilities NeMo Gym's model servers attach in training mode.
type OutputMessage struct {
	ID                 string
	Text               string
	PromptTokenIDs     []int32
	GenerationTokenIDs []int32
	GenerationLogProbs []float32
}

// createParamsKeys are the members of responses_create_params as NeMo Gym
// dumps its NeMoGymResponseCreateParamsNonStreaming model, in order, with
// their defaults.
var createParamsKeys = []Field{
	{"background", json.RawMessage("null")}, {"include", json.RawMessage("null")}, {"input", nil},
	{"instructions", json.RawMessage("null")}, {"max_output_tokens", nil}, {"max_tool_calls", json.RawMessage("null")},
	{"metadata", json.RawMessage("null")}, {"model", json.RawMessage("null")}, {"parallel_tool_calls", json.RawMessage("true")},
	{"previous_response_id", json.RawMessage("null")}, {"prompt", json.RawMessage("null")}, {"reasoning", json.RawMessage("null")},
	{"service_tier", json.RawMessage("null")}, {"store", json.RawMessage("null")}, {"temperature", nil},
	{"text", json.RawMessage("null")}, {"tool_choice", json.RawMessage(`"auto"`)}, {"tools", json.RawMessage("[]")},
	{"top_logprobs", json.RawMessage("null")}, {"top_p", nil}, {"truncation", json.RawMessage("null")},
	{"user", json.RawMessage("null")}, {"stream", json.RawMessage("null")},
}

// AppendRecord appends r as one JSON object (no newline).
func AppendRecord(b []byte, r *Record) []byte {
	written := map[string]bool{}
	first := true
	key := func(k string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		written[k] = true
		b = append(appendString(b, k), ':')
	}
	b = append(b, '{')

	key("responses_create_params")
	b = r.appendCreateParams(b)
	key("response")
	b = r.appendResponse(b)
	key("reward")
	b = appendFloat(b, r.Reward)
	// A failed judge masks the sample, as NeMo Gym's judge_failsafe does.
	failed := r.JudgeFailure != ""
	key("mask_sample")
	b = strconv.AppendBool(b, failed)
	key("failure_kind")
	b = appendStringOrNull(b, "judge_failed", failed)
	key("failure_reason")
	b = appendStringOrNull(b, r.JudgeFailure, failed)
	if r.Math {
		key("expected_answer")
		b = appendString(b, r.ExpectedAnswer)
		key("extracted_answer")
		if r.ExtractedAnswer == nil {
			b = append(b, "null"...)
		} else {
			b = appendString(b, *r.ExtractedAnswer)
		}
		key("library_reward")
		b = appendFloat(b, r.LibraryReward)
		key("judge_evaluations")
		b = appendRaw(b, r.JudgeEvaluations)
	}
	key("_ng_task_index")
	b = strconv.AppendInt(b, int64(r.TaskIndex), 10)
	key("_ng_rollout_index")
	b = strconv.AppendInt(b, int64(r.RolloutIndex), 10)
	key("agent_ref")
	if r.AgentRef != nil {
		b = appendRaw(b, r.AgentRef)
	} else {
		b = append(appendString(append(b, `{"name":`...), AgentName), '}')
	}
	for _, f := range r.Extra {
		if written[f.Key] {
			continue
		}
		key(f.Key)
		b = appendRaw(b, f.Value)
	}
	return append(b, '}')
}

// appendCreateParams writes responses_create_params: NeMo Gym's dump of the
// row's, with the input and the sampling as used.
func (r *Record) appendCreateParams(b []byte) []byte {
	own, _ := ObjectFields(r.CreateParams) // nil or not an object: none
	ownAt := map[string]json.RawMessage{}
	for _, f := range own {
		ownAt[f.Key] = f.Value
	}
	b = append(b, '{')
	known := map[string]bool{}
	for i, f := range createParamsKeys {
		known[f.Key] = true
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, f.Key), ':')
		switch f.Key {
		case "input":
			b = append(b, '[')
			for j, m := range r.Input {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendString(append(b, `{"content":`...), m.Content)
				b = appendString(append(b, `,"role":`...), m.Role)
				b = append(b, `,"type":"message"}`...)
			}
			b = append(b, ']')
		case "temperature":
			b = appendOptFloat(b, r.Temperature)
		case "top_p":
			b = appendOptFloat(b, r.TopP)
		case "max_output_tokens":
			if r.MaxOutputTokens == nil {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendInt(b, int64(*r.MaxOutputTokens), 10)
			}
		default:
			if v, ok := ownAt[f.Key]; ok {
				b = appendRaw(b, v)
			} else {
				b = append(b, f.Value...)
			}
		}
	}
	for _, f := range own {
		if !known[f.Key] {
			b = appendRaw(append(appendString(append(b, ','), f.Key), ':'), f.Value)
		}
	}
	return append(b, '}')
}

// appendResponse writes the response as NeMo Gym's vLLM model server returns
// it in training mode (NeMoGymResponse, output messages for training).
func (r *Record) appendResponse(b []byte) []byte {
	b = appendString(append(b, `{"id":`...), r.ResponseID)
	b = appendFloat(append(b, `,"created_at":`...), r.CreatedAt)
	b = append(b, `,"error":null,"incomplete_details":`...)
	if r.Incomplete {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":null,"metadata":null,"model":`...)
	b = appendString(b, r.Model)
	b = append(b, `,"object":"response","output":[`...)
	for i, m := range r.Output {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(append(b, `{"id":`...), m.ID)
		b = appendString(append(b, `,"content":[{"annotations":[],"text":`...), m.Text)
		b = append(b, `,"type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message","prompt_token_ids":`...)
		b = appendInts(b, m.PromptTokenIDs)
		b = append(b, `,"generation_token_ids":`...)
		b = appendInts(b, m.GenerationTokenIDs)
		b = append(b, `,"generation_log_probs":[`...)
		for j, lp := range m.GenerationLogProbs {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendFloat32(b, lp)
		}
		b = append(b, "]}"...)
	}
	b = append(b, `],"parallel_tool_calls":true,"temperature":`...)
	b = appendOptFloat(b, r.Temperature)
	b = append(b, `,"tool_choice":"auto","tools":[],"top_p":`...)
	b = appendOptFloat(b, r.TopP)
	b = append(b, `,"background":false,"conversation":null,"max_output_tokens":`...)
	if r.MaxOutputTokens == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*r.MaxOutputTokens), 10)
	}
	status := "completed"
	if r.Incomplete {
		status = "incomplete"
	}
	b = append(b, `,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"prompt_cache_key":null,"reasoning":null,"safety_identifier":null,"service_tier":"auto","status":`...)
	b = appendString(b, status)
	b = append(b, `,"text":null,"top_logprobs":null,"truncation":"disabled","usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(r.InputTokens), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(r.OutputTokens), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(r.InputTokens+r.OutputTokens), 10)
	return append(b, `},"user":null}`...)
}

// appendRaw appends a JSON value compacted, or null for an empty or invalid
// one.
func appendRaw(b []byte, v json.RawMessage) []byte {
	// Compact validates as it goes and leaves buf as it was on an error.
	buf := bytes.NewBuffer(b)
	if len(v) == 0 || json.Compact(buf, v) != nil {
		return append(b, "null"...)
	}
	return buf.Bytes()
}

func appendInts(b []byte, xs []int32) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

// appendFloat writes a float as Python's repr does (always with a point or
// an exponent), so that readers get a float, never an int; NaN and the
// infinities, which JSON lacks, as null.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return appendPyFloat(b, f)
}

func appendOptFloat(b []byte, f *float64) []byte {
	if f == nil {
		return append(b, "null"...)
	}
	return appendFloat(b, *f)
}

// appendFloat32 writes the shortest decimal that reads back as the same
// float32, always as a float.
func appendFloat32(b []byte, f float32) []byte {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return append(b, "null"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, x, 'g', -1, 32)
	for _, c := range b[start:] {
		if c == '.' || c == 'e' || c == 'n' {
			return b
		}
	}
	return append(b, ".0"...)
}

// appendStringOrNull appends s as a JSON string when set, else null.
func appendStringOrNull(b []byte, s string, set bool) []byte {
	if !set {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

// appendString quotes s as orjson does: UTF-8 as it is, the short escapes
// for quote, backslash and \b \f \n \r \t, \u00XX for other control
// characters; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			b = appendASCII(b, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
