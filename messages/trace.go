package messages

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// HeaderTraceparent is the NATS message header that carries an episode's trace context, in the
// W3C trace-context format "00-<trace id>-<parent id>-<flags>": on the episode request, on each
// step, and on the generate and tokenize requests of the episode's turns.
const HeaderTraceparent = "traceparent"

// TraceIDLength is the length of a trace id: 16 bytes as lowercase hex.
const TraceIDLength = 32

// NewTraceID returns a random trace id: 32 lowercase hex digits, never all zeros.
func NewTraceID() string {
	var b [16]byte
	for {
		hi, lo := rand.Uint64(), rand.Uint64()
		if hi|lo != 0 {
			binary.BigEndian.PutUint64(b[:8], hi)
			binary.BigEndian.PutUint64(b[8:], lo)
			return hex.EncodeToString(b[:])
		}
	}
}

// TraceIDOf derives a trace id from names (a run and an episode id, say): the same names always
// give the same id, so an episode made twice (a request checked before it is submitted, a
// resumed run) keeps its trace.
func TraceIDOf(names ...string) string {
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	b := h.Sum(sum[:0])[:16]
	if allZero(b) {
		b[15] = 1
	}
	return hex.EncodeToString(b)
}

// ValidTraceID reports whether s is a W3C trace id: 32 lowercase hex digits, not all zeros.
func ValidTraceID(s string) bool { return validHexID(s, TraceIDLength) }

// validHexID reports whether s is n lowercase hex digits, not all zeros.
func validHexID(s string, n int) bool {
	if len(s) != n {
		return false
	}
	zero := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '0':
		case '1' <= c && c <= '9', 'a' <= c && c <= 'f':
			zero = false
		default:
			return false
		}
	}
	return !zero
}

// Traceparent formats a W3C traceparent header value for a trace id and the id of the span the
// message belongs to (16 hex digits), sampled.
func Traceparent(traceID, spanID string) string {
	return "00-" + traceID + "-" + spanID + "-01"
}

// NewSpanID returns a random span id: 16 lowercase hex digits, never all zeros.
func NewSpanID() string {
	var b [8]byte
	for {
		if x := rand.Uint64(); x != 0 {
			binary.BigEndian.PutUint64(b[:], x)
			return hex.EncodeToString(b[:])
		}
	}
}

// ParseTraceparent returns the trace id and parent span id of a W3C traceparent header value
// (version 00, or a later version's first four fields), and whether it is one.
func ParseTraceparent(v string) (traceID, spanID string, ok bool) {
	// version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 = 55 bytes.
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || (len(v) > 55 && v[55] != '-') {
		return "", "", false
	}
	if v[:2] == "ff" || !isHex(v[:2]) || !isHex(v[53:55]) || (v[:2] == "00" && len(v) != 55) {
		return "", "", false
	}
	traceID, spanID = v[3:35], v[36:52]
	if !ValidTraceID(traceID) || !validHexID(spanID, 16) {
		return "", "", false
	}
	return traceID, spanID, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TurnTimings says where one turn's time went, in nanoseconds. The env worker measures each turn
// from the moment the previous turn's step was ready to be stored (turn 0: the submission) to the
// moment its own step is: Wall. The parts do not overlap, so Queue + Tokenize + Generate + Step +
// Publish ≤ Wall; the rest is the worker's own (encoding, prompt building, snapshots).
type TurnTimings struct {
	// Queue is time spent waiting: for turn 0, from the submission to the start of the episode's
	// delivery; for every turn, while the fleet was paused before the turn, and in the LLM
	// worker before the model call (its queue, a pause, a free slot on a model server).
	Queue int64 `msgpack:"q,omitempty" json:"queue_ns"`
	// Tokenize is the round trips of the turn's tokenize requests (the first prompt for turn 0,
	// each prompt in a single-turn style, the feedback).
	Tokenize int64 `msgpack:"tk,omitempty" json:"tokenize_ns"`
	// Generate is the generate request's round trip without the LLM worker's queue: the model
	// call, transport and retries.
	Generate int64 `msgpack:"g,omitempty" json:"generate_ns"`
	// Model is the model server call alone, as the LLM worker measured it (part of Generate).
	Model int64 `msgpack:"m,omitempty" json:"model_ns"`
	// Step is the env's step on the action.
	Step int64 `msgpack:"s,omitempty" json:"step_ns"`
	// Publish is the time it took to store the previous turn's step in JetStream, which this
	// turn waited for (0 for turn 0; the last turn's own step is stored after its timings are).
	Publish int64 `msgpack:"p,omitempty" json:"publish_ns"`
	// Wall is the whole turn.
	Wall int64 `msgpack:"w,omitempty" json:"wall_ns"`
	// Endpoint is the model server that generated the turn: set in a trajectory's timings, empty
	// on a StepEvent, whose own endpoint it is.
	Endpoint string `msgpack:"ep,omitempty" json:"endpoint,omitempty"`
}

// IsZero reports whether t holds nothing, so that a step without timings carries none on the
// wire.
func (t TurnTimings) IsZero() bool { return t == TurnTimings{} }

// Parts is the sum of the measured parts: Queue + Tokenize + Generate + Step + Publish.
func (t TurnTimings) Parts() int64 { return t.Queue + t.Tokenize + t.Generate + t.Step + t.Publish }
