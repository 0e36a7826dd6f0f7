package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// roundTrip checks that v is valid, survives Marshal and Decode unchanged, and returns the copy.
func roundTrip[T any, P interface {
	*T
	Validate() error
}](t *testing.T, v *T) *T {
	t.Helper()
	if err := P(v).Validate(); err != nil {
		t.Fatalf("sample is invalid: %v", err)
	}
	got, err := Decode[T, P](mustMarshal(t, v))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip changed the message\n got %+v\nwant %+v", got, v)
	}
	return got
}

// jsonRoundTrip checks that v reads back from its JSON as want: v itself, except that the version
// is not part of the JSON form.
func jsonRoundTrip[T any](t *testing.T, v, want *T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	got := new(T)
	if err := json.Unmarshal(b, got); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON round trip changed the message\n got %+v\nwant %+v\njson %s", got, want, b)
	}
}

// Extreme values that a packed codec must carry bit for bit.
var (
	extremeTokens   = Tokens{math.MinInt32, -1, 0, 1, math.MaxInt32, 151645}
	extremeLogprobs = Logprobs{
		-9999.0,
		float32(math.Copysign(0, -1)),
		math.Float32frombits(0x80000002),  // a negative subnormal
		-math.Float32frombits(0x007fffff), // largest subnormal, negated
		-math.MaxFloat32,
		-math.SmallestNonzeroFloat32,
	}
)

func sameBits(a, b Logprobs) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func TestRoundTripEveryType(t *testing.T) {
	t.Run("EpisodeRequest", func(t *testing.T) {
		roundTrip(t, sampleEpisode())
		minimal := &EpisodeRequest{V: Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "x", MaxLength: 1}
		roundTrip(t, minimal)
	})
	t.Run("GenerateRequest", func(t *testing.T) {
		roundTrip(t, sampleGenerateRequest())
		r := sampleGenerateRequest()
		r.Prompt = extremeTokens
		roundTrip(t, r)
	})
	t.Run("GenerateReply", func(t *testing.T) {
		roundTrip(t, sampleGenerateReply())
		r := sampleGenerateReply()
		r.Tokens, r.Logprobs = extremeTokens, extremeLogprobs
		got := roundTrip(t, r)
		if !sameBits(got.Logprobs, extremeLogprobs) {
			t.Errorf("logprobs not bit-exact: %v", got.Logprobs)
		}
		failed := &GenerateReply{V: Version, Error: "prompt has 9000 tokens", Code: CodeContextLength}
		roundTrip(t, failed)
	})
	t.Run("TokenizeRequest", func(t *testing.T) {
		roundTrip(t, sampleTokenizeRequest())
		roundTrip(t, &TokenizeRequest{V: Version, Text: "Too low.", AddSpecialTokens: true})
	})
	t.Run("TokenizeReply", func(t *testing.T) {
		roundTrip(t, sampleTokenizeReply())
		roundTrip(t, &TokenizeReply{V: Version, Error: "no endpoint", Code: CodeUnavailable})
	})
	t.Run("StepEvent", func(t *testing.T) {
		roundTrip(t, sampleStep())
		later := sampleStep()
		later.Turn, later.Episode, later.PromptTokens = 3, nil, nil
		later.ActionLogprobs = Logprobs{-9999, float32(math.Copysign(0, -1))}
		got := roundTrip(t, later)
		if !sameBits(got.ActionLogprobs, later.ActionLogprobs) {
			t.Errorf("logprobs not bit-exact: %v", got.ActionLogprobs)
		}
		end := &StepEvent{V: Version, EpisodeID: "ep-0001", Turn: 4, Done: true, Truncated: true, FinishReason: "length"}
		if !roundTrip(t, end).IsEndMarker() {
			t.Error("end marker lost")
		}
		failed := &StepEvent{V: Version, EpisodeID: "ep-0001", Error: "env crashed"}
		roundTrip(t, failed)
	})
	t.Run("Trajectory", func(t *testing.T) {
		roundTrip(t, sampleTrajectory())
		noTurns := sampleTrajectory()
		noTurns.ObservationTokens, noTurns.RolloutLogProbs = Tokens{1, 2}, Logprobs{0, float32(math.Copysign(0, -1))}
		noTurns.ActionRanges, noTurns.StepRewards, noTurns.PolicyVersions = nil, nil, nil
		noTurns.Turns, noTurns.Reward, noTurns.Truncated, noTurns.ExtraLogs = 0, 0, true, nil
		got := roundTrip(t, noTurns)
		if !sameBits(got.RolloutLogProbs, noTurns.RolloutLogProbs) {
			t.Errorf("-0 logprob not bit-exact: %v", got.RolloutLogProbs)
		}
	})
	t.Run("Group", func(t *testing.T) { roundTrip(t, sampleGroup()) })
	t.Run("Failure", func(t *testing.T) {
		roundTrip(t, sampleFailure())
		roundTrip(t, &Failure{V: Version, Kind: FailureEpisode, Reason: "env worker lost"})
	})
}

func TestRoundTripLargeTokens(t *testing.T) {
	const n = 100_000
	r := sampleGenerateReply()
	r.Tokens, r.Logprobs = make(Tokens, n), make(Logprobs, n)
	for i := range n {
		r.Tokens[i] = int32(i*7919) - n
		r.Logprobs[i] = -float32(i) / 1000
	}
	b := mustMarshal(t, r)
	if len(b) > 8*n+200 {
		t.Errorf("encoding of %d tokens and logprobs is %d bytes, want about %d", n, len(b), 8*n)
	}
	roundTrip(t, r)
}

// packedBox holds the packed types the way messages do, for codec-level tests.
type packedBox struct {
	T Tokens   `msgpack:"t"`
	L Logprobs `msgpack:"l"`
	R Ranges   `msgpack:"r"`
}

func TestPackedNilAndEmpty(t *testing.T) {
	for _, in := range []packedBox{{}, {T: Tokens{}, L: Logprobs{}, R: Ranges{}}} {
		var out packedBox
		if err := msgpack.Unmarshal(mustMarshal(t, in), &out); err != nil {
			t.Fatal(err)
		}
		if len(out.T) != 0 || len(out.L) != 0 || len(out.R) != 0 {
			t.Errorf("%+v decoded as %+v, want empty", in, out)
		}
	}
}

func TestPackedExtremes(t *testing.T) {
	nan := math.Float32frombits(0x7fc00001) // a NaN with a payload: packing is bit-exact
	in := packedBox{
		T: extremeTokens,
		L: append(slices.Clone(extremeLogprobs), float32(math.Inf(-1)), nan),
		R: Ranges{{math.MinInt32, math.MaxInt32}, {0, 1}},
	}
	var out packedBox
	if err := msgpack.Unmarshal(mustMarshal(t, in), &out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.T, in.T) || !sameBits(out.L, in.L) || !slices.Equal(out.R, in.R) {
		t.Errorf("got %+v, want %+v", out, in)
	}
}

func TestPackedWireFormat(t *testing.T) {
	for _, tc := range []struct {
		v    msgpack.CustomEncoder
		want []byte
	}{
		{Tokens{1, -2}, []byte{0xc4, 8, 1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}},
		{Logprobs{float32(math.Copysign(0, -1)), 1}, []byte{0xc4, 8, 0, 0, 0, 0x80, 0, 0, 0x80, 0x3f}},
		{Ranges{{3, 258}}, []byte{0xc4, 8, 3, 0, 0, 0, 2, 1, 0, 0}},
		{Tokens{}, []byte{0xc4, 0}},
	} {
		if got := mustMarshal(t, tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("%v encodes as % x, want % x", tc.v, got, tc.want)
		}
	}
}

// TestPackedByteSwapping runs the path a big-endian host takes: words are byte-swapped on the way
// out and back in, so on this (little-endian) host the wire shows reversed words and the values
// still round-trip.
func TestPackedByteSwapping(t *testing.T) {
	if !nativeLittleEndian {
		t.Skip("host is big-endian: every other test runs the swapping path")
	}
	nativeLittleEndian = false
	defer func() { nativeLittleEndian = true }()
	in := packedBox{T: Tokens{1, -2}, L: Logprobs{1.5}, R: Ranges{{3, 4}}}
	b := mustMarshal(t, Tokens{1})
	if want := []byte{0xc4, 4, 0, 0, 0, 1}; !bytes.Equal(b, want) {
		t.Errorf("swapped encoding % x, want % x", b, want)
	}
	var out packedBox
	if err := msgpack.Unmarshal(mustMarshal(t, in), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("got %+v, want %+v", out, in)
	}
	if in.T[1] != -2 {
		t.Error("encoding modified the caller's slice")
	}
}

func TestPackedDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		into any
		want error
	}{
		{"tokens length not a multiple of 4", []byte{0xc4, 5, 1, 2, 3, 4, 5}, new(Tokens), ErrMalformed},
		{"ranges length not a multiple of 8", []byte{0xc4, 4, 1, 2, 3, 4}, new(Ranges), ErrMalformed},
		{"logprobs as an array", []byte{0x91, 0xca, 0, 0, 0, 0}, new(Logprobs), ErrMalformed},
		{"truncated bin", []byte{0xc4, 8, 1, 2, 3, 4}, new(Tokens), ErrMalformed},
		{"huge declared bin", []byte{0xc6, 0xff, 0xff, 0xff, 0xfc}, new(Tokens), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := msgpack.Unmarshal(tc.data, tc.into)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestJSONPacked(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Tokens(nil), `[]`},
		{Tokens{math.MinInt32, 0, math.MaxInt32}, `[-2147483648,0,2147483647]`},
		{Logprobs(nil), `[]`},
		{Logprobs{0.1, -9999, float32(math.Copysign(0, -1)), math.Float32frombits(1), -math.MaxFloat32, 1e-7},
			`[0.1,-9999,-0,1e-45,-3.4028235e+38,1e-07]`},
		{Range{3, 5}, `[3,5]`},
		{Ranges(nil), `[]`},
		{Ranges{{3, 5}, {6, 7}}, `[[3,5],[6,7]]`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("json.Marshal(%#v) = %s, %v; want %s", tc.v, got, err, tc.want)
		}
	}
}

func TestJSONLogprobsShortestRoundTrip(t *testing.T) {
	in := append(slices.Clone(extremeLogprobs), 0.1, 1.0/3, -0.6931472, math.MaxFloat32)
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Logprobs
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !sameBits(out, in) {
		t.Errorf("%s read back as %v, want %v", b, out, in)
	}
}

func TestJSONLogprobsRejectNonFinite(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := json.Marshal(Logprobs{-1, float32(x)})
		if err == nil || !strings.Contains(err.Error(), "Logprobs[1]") {
			t.Errorf("Logprobs with %v: got %v, want an error naming Logprobs[1]", x, err)
		}
	}
}

func TestJSONRangeUnmarshal(t *testing.T) {
	var r Range
	if err := json.Unmarshal([]byte(` [ 3 , 5 ] `), &r); err != nil || r != (Range{3, 5}) {
		t.Errorf("got %v, %v", r, err)
	}
	for _, bad := range []string{`[3]`, `[3,5,7]`, `{"start":3}`, `[3.5,4]`, `"3,5"`, `[3,99999999999]`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	sp := sampleSampling()
	jsonRoundTrip(t, &sp, &sp)
	msg := &ChatMessage{Role: "user", Content: "Hi \"there\"\n"}
	jsonRoundTrip(t, msg, msg)

	tr := sampleTrajectory()
	trWant := *tr
	trWant.V = 0
	jsonRoundTrip(t, tr, &trWant)

	g := sampleGroup()
	gWant := *g
	gWant.V, gWant.Trajectories = 0, slices.Clone(g.Trajectories)
	for i := range gWant.Trajectories {
		gWant.Trajectories[i].V = 0
	}
	jsonRoundTrip(t, g, &gWant)

	f := sampleFailure()
	fWant := *f
	fWant.V = 0
	jsonRoundTrip(t, f, &fWant)
}

// TestTrajectoryJSONShape pins the OpenRLHF field names and shapes of the JSONL record.
func TestTrajectoryJSONShape(t *testing.T) {
	tr := sampleTrajectory()
	tr.ExtraLogs, tr.StepRewards, tr.Turns, tr.ActionRanges, tr.Reward = nil, nil, 0, nil, 0
	tr.RolloutLogProbs = make(Logprobs, len(tr.ObservationTokens))
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"observation_tokens": "[]interface {}", "action_ranges": "[]interface {}",
		"rollout_log_probs": "[]interface {}", "extra_logs": "map[string]interface {}",
		"step_rewards": "[]interface {}", "reward": "float64", "scores": "float64",
		"truncated": "bool", "prompt": "string", "label": "string", "episode_id": "string",
	} {
		if got := reflect.TypeOf(m[field]); got == nil || got.String() != want {
			t.Errorf("%s: JSON type %v, want %s (%s)", field, got, want, b)
		}
	}
	if _, ok := m["v"]; ok {
		t.Errorf("version leaked into JSON: %s", b)
	}
	if !strings.Contains(string(sampleJSON(t, sampleTrajectory())), `"action_ranges":[[3,5],[6,7]]`) {
		t.Error("action_ranges are not [start, end] pairs")
	}
	if got, ok := m["run_id"]; !ok || got != "run-7" {
		t.Errorf("run_id %v, want run-7: %s", got, b)
	}
	tr.RunID = ""
	if b := sampleJSON(t, tr); strings.Contains(string(b), "run_id") {
		t.Errorf("an empty run id is written: %s", b)
	}
	for _, v := range []any{with(sampleGroup, func(g *Group) { g.RunID = "" }), with(sampleFailure, func(f *Failure) { f.RunID = "" })} {
		var top map[string]any
		if err := json.Unmarshal(sampleJSON(t, v), &top); err != nil {
			t.Fatal(err)
		}
		if _, ok := top["run_id"]; ok {
			t.Errorf("an empty run id is written: %v", top)
		}
	}
}

func sampleJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
