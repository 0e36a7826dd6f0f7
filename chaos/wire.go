package chaos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// The harness reads what the fleet stored with a decoder of its own, written
// from the documented wire format rather than taken from the messages
// package: a check must not share the code it judges. Every message is one
// msgpack map from short string tags to values; Tokens are one bin of packed
// little-endian int32s, Logprobs one bin of packed little-endian float32s,
// Ranges one bin of packed little-endian int32 pairs (start, end). A missing
// tag (omitempty) is the zero value, and tags the harness does not know are
// ignored.

// wireVersion is the only wire version the harness knows (the messages'
// "v" tag).
const wireVersion = 1

// errWire marks a message that does not follow the wire format.
var errWire = errors.New("not a rollfleet wire message")

// Span is a half-open [Start, End) span of token positions.
type Span struct{ Start, End int32 }

// Trajectory is the harness's reading of a trajectory record: the fields
// the checks and the replay look at.
type Trajectory struct {
	V                 int64
	RunID             string
	EpisodeID         string
	GroupID           string
	SampleIndex       int64
	GroupSize         int64
	Env               string
	EnvSeed           *uint64
	Prompt            string
	ObservationTokens []int32
	ActionRanges      []Span
	RolloutLogProbs   []float32
	Reward            float64
	Scores            float64
	ExtraLogs         map[string]float64
	Truncated         bool
	Turns             int64
	StepRewards       []float64
	FinishReason      string
	ObsStyle          string
	Samples           []Sample
	Success           bool
	Resumed           int64
}

// Sample is one turn of a trajectory of a single-turn observation style.
type Sample struct {
	ObservationTokens []int32
	ActionRanges      []Span
	RolloutLogProbs   []float32
	Reward, Return    float64
}

// Failure is the harness's reading of a failure record.
type Failure struct {
	V         int64
	RunID     string
	EpisodeID string
	Kind      string
	Reason    string
	Subject   string
	Turn      int64
}

// Step is the harness's reading of a step event.
type Step struct {
	V              int64
	RunID          string // the job the episode belongs to (not Run, a delivery's nonce)
	EpisodeID      string
	Turn           int64
	Attempt        int64
	Request        uint64 // episodes-stream sequence of the request the run plays; 0 if unknown
	Run            string // nonce of the delivery that played the run
	HasEpisode     bool   // turn 0 carries the episode request
	EnvSeed        *uint64
	PromptTokens   []int32
	ActionTokens   []int32
	ActionLogprobs []float32
	FeedbackTokens []int32
	Reward         float64
	Done           bool
	Truncated      bool
	Resumed        int64
	Error          string
}

// endMarker reports whether s only marks the end of its episode: no action,
// done and no error. It is not a turn.
func (s *Step) endMarker() bool { return len(s.ActionTokens) == 0 && s.Done && s.Error == "" }

// Group is the harness's reading of a group record: whose trajectories it
// holds.
type Group struct {
	V         int64
	RunID     string
	GroupID   string
	Env       string
	MeanScore float64
	// Episodes are the episode ids of its trajectories, in order.
	Episodes []string
}

// DecodeTrajectory decodes a message of the trajectories stream.
func DecodeTrajectory(data []byte) (*Trajectory, error) {
	f, err := decodeFields(data)
	if err != nil {
		return nil, err
	}
	t := trajectoryOf(f)
	return t, f.done(t.V)
}

// DecodeGroup decodes a message of the groups stream, each of its
// trajectories as DecodeTrajectory reads one.
func DecodeGroup(data []byte) (*Group, error) {
	f, err := decodeFields(data)
	if err != nil {
		return nil, err
	}
	g := &Group{V: f.int("v"), RunID: f.str("rid"), GroupID: f.str("g"), Env: f.str("e"), MeanScore: f.float("ms")}
	for i, m := range f.maps("t") {
		tf := &fields{m: m, path: fmt.Sprintf("t[%d].", i)}
		t := trajectoryOf(tf)
		if err := tf.done(t.V); err != nil && f.err == nil {
			f.err = err
		}
		g.Episodes = append(g.Episodes, t.EpisodeID)
	}
	return g, f.done(g.V)
}

// trajectoryOf reads a trajectory's fields; f holds the first error.
func trajectoryOf(f *fields) *Trajectory {
	t := &Trajectory{
		V: f.int("v"), RunID: f.str("rid"), EpisodeID: f.str("id"), GroupID: f.str("g"), SampleIndex: f.int("i"), GroupSize: f.int("n"),
		Env: f.str("e"), EnvSeed: f.optUint("es"), Prompt: f.str("p"),
		ObservationTokens: f.int32s("ot"), ActionRanges: f.spans("ar"), RolloutLogProbs: f.float32s("lp"),
		Reward: f.float("r"), Scores: f.float("s"), ExtraLogs: f.floatMap("xl"), Truncated: f.bool("tr"),
		Turns: f.int("tn"), StepRewards: f.floats("sr"), FinishReason: f.str("fr"), ObsStyle: f.str("os"),
		Success: f.bool("ok"), Resumed: f.int("rs"),
	}
	for i, m := range f.maps("sm") {
		s := fields{m: m, path: f.path + fmt.Sprintf("sm[%d].", i)}
		t.Samples = append(t.Samples, Sample{ObservationTokens: s.int32s("ot"), ActionRanges: s.spans("ar"),
			RolloutLogProbs: s.float32s("lp"), Reward: s.float("r"), Return: s.float("rt")})
		if s.err != nil && f.err == nil {
			f.err = s.err
		}
	}
	return t
}

// DecodeFailure decodes a message of the failures stream.
func DecodeFailure(data []byte) (*Failure, error) {
	f, err := decodeFields(data)
	if err != nil {
		return nil, err
	}
	x := &Failure{V: f.int("v"), RunID: f.str("rid"), EpisodeID: f.str("id"), Kind: f.str("k"), Reason: f.str("r"), Subject: f.str("sj"), Turn: f.int("tn")}
	return x, f.done(x.V)
}

// DecodeStep decodes a message of the steps stream.
func DecodeStep(data []byte) (*Step, error) {
	f, err := decodeFields(data)
	if err != nil {
		return nil, err
	}
	s := &Step{
		V: f.int("v"), RunID: f.str("rid"), EpisodeID: f.str("id"), Turn: f.int("tn"), Attempt: f.int("a"), Request: f.uint("rq"), Run: f.str("ru"),
		PromptTokens: f.int32s("pt"), ActionTokens: f.int32s("at"), ActionLogprobs: f.float32s("al"),
		FeedbackTokens: f.int32s("ft"), Reward: f.float("r"), Done: f.bool("d"), Truncated: f.bool("tr"),
		Resumed: f.int("rs"), Error: f.str("err"),
	}
	if m := f.mapField("er"); m != nil {
		s.HasEpisode = true
		er := fields{m: m, path: "er."}
		s.EnvSeed = er.optUint("es")
		if er.err != nil && f.err == nil {
			f.err = er.err
		}
	}
	return s, f.done(s.V)
}

// decodeFields decodes data as exactly one msgpack map with string keys.
func decodeFields(data []byte) (*fields, error) {
	r := bytes.NewReader(data)
	dec := msgpack.NewDecoder(r)
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errWire, err)
	}
	if r.Len() > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the message", errWire, r.Len())
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: a %T, not a map", errWire, v)
	}
	return &fields{m: m}, nil
}

// fields reads typed values out of a decoded map. The first type error
// sticks; later reads return zero values.
type fields struct {
	m    map[string]any
	path string // prefix of tags in errors
	err  error
}

func (f *fields) fail(tag, format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: %s%s: %s", errWire, f.path, tag, fmt.Sprintf(format, args...))
	}
}

// done returns the first error, or one for a version the harness does not
// know.
func (f *fields) done(v int64) error {
	if f.err != nil {
		return f.err
	}
	if v != wireVersion {
		return fmt.Errorf("%w: version %d, want %d", errWire, v, wireVersion)
	}
	return nil
}

func (f *fields) get(tag string) (any, bool) {
	v, ok := f.m[tag]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

func (f *fields) str(tag string) string {
	v, ok := f.get(tag)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		f.fail(tag, "a %T, want a string", v)
	}
	return s
}

func (f *fields) bool(tag string) bool {
	v, ok := f.get(tag)
	if !ok {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		f.fail(tag, "a %T, want a bool", v)
	}
	return b
}

// integer converts any msgpack integer to an int64, reporting whether v is
// one and fits.
func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}

func (f *fields) int(tag string) int64 {
	v, ok := f.get(tag)
	if !ok {
		return 0
	}
	n, ok := integer(v)
	if !ok {
		f.fail(tag, "a %T (%v), want an integer", v, v)
	}
	return n
}

// uint reads an unsigned 64-bit integer.
func (f *fields) uint(tag string) uint64 {
	if u := f.optUint(tag); u != nil {
		return *u
	}
	return 0
}

// optUint reads an optional unsigned 64-bit integer (a *uint64 field).
func (f *fields) optUint(tag string) *uint64 {
	v, ok := f.get(tag)
	if !ok {
		return nil
	}
	var u uint64
	switch x := v.(type) {
	case uint64:
		u = x
	default:
		n, ok := integer(v)
		if !ok || n < 0 {
			f.fail(tag, "a %T (%v), want an unsigned integer", v, v)
			return nil
		}
		u = uint64(n)
	}
	return &u
}

// number converts any msgpack number to a float64.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	if n, ok := integer(v); ok {
		return float64(n), true
	}
	if x, ok := v.(uint64); ok {
		return float64(x), true
	}
	return 0, false
}

func (f *fields) float(tag string) float64 {
	v, ok := f.get(tag)
	if !ok {
		return 0
	}
	x, ok := number(v)
	if !ok {
		f.fail(tag, "a %T, want a number", v)
	}
	return x
}

func (f *fields) array(tag string) []any {
	v, ok := f.get(tag)
	if !ok {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		f.fail(tag, "a %T, want an array", v)
	}
	return a
}

func (f *fields) floats(tag string) []float64 {
	a := f.array(tag)
	if a == nil {
		return nil
	}
	out := make([]float64, len(a))
	for i, v := range a {
		x, ok := number(v)
		if !ok {
			f.fail(fmt.Sprintf("%s[%d]", tag, i), "a %T, want a number", v)
		}
		out[i] = x
	}
	return out
}

func (f *fields) mapField(tag string) map[string]any {
	v, ok := f.get(tag)
	if !ok {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		f.fail(tag, "a %T, want a map", v)
	}
	return m
}

func (f *fields) floatMap(tag string) map[string]float64 {
	m := f.mapField(tag)
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		x, ok := number(v)
		if !ok {
			f.fail(tag+"."+k, "a %T, want a number", v)
		}
		out[k] = x
	}
	return out
}

func (f *fields) maps(tag string) []map[string]any {
	a := f.array(tag)
	out := make([]map[string]any, 0, len(a))
	for i, v := range a {
		m, ok := v.(map[string]any)
		if !ok {
			f.fail(fmt.Sprintf("%s[%d]", tag, i), "a %T, want a map", v)
			return nil
		}
		out = append(out, m)
	}
	return out
}

// packed returns a bin value's bytes, checking that they are whole 4-byte
// words.
func (f *fields) packed(tag string, word int) []byte {
	v, ok := f.get(tag)
	if !ok {
		return nil
	}
	b, ok := v.([]byte)
	if !ok {
		f.fail(tag, "a %T, want a bin of packed words", v)
		return nil
	}
	if len(b)%word != 0 {
		f.fail(tag, "%d bytes, not a multiple of %d", len(b), word)
		return nil
	}
	return b
}

func (f *fields) int32s(tag string) []int32 {
	b := f.packed(tag, 4)
	if len(b) == 0 {
		return nil
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func (f *fields) float32s(tag string) []float32 {
	b := f.packed(tag, 4)
	if len(b) == 0 {
		return nil
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func (f *fields) spans(tag string) []Span {
	b := f.packed(tag, 8)
	if len(b) == 0 {
		return nil
	}
	out := make([]Span, len(b)/8)
	for i := range out {
		out[i] = Span{int32(binary.LittleEndian.Uint32(b[8*i:])), int32(binary.LittleEndian.Uint32(b[8*i+4:]))}
	}
	return out
}
