package messages

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// typicalStep is a mid-episode turn: a few hundred action tokens, a short feedback.
func typicalStep() *StepEvent {
	e := sampleStep()
	e.Turn, e.Episode, e.PromptTokens = 3, nil, nil
	e.ActionTokens, e.ActionLogprobs = make(Tokens, 300), make(Logprobs, 300)
	for i := range e.ActionTokens {
		e.ActionTokens[i], e.ActionLogprobs[i] = int32(1000+i*37), -float32(i%17)/10
	}
	e.FeedbackTokens = make(Tokens, 40)
	return e
}

func BenchmarkStepEventRoundTrip(b *testing.B) {
	e := typicalStep()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		data, err := Marshal(e)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode[StepEvent](data); err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "wire-bytes")
}

// BenchmarkTokens compares the packed bin encoding of token ids with msgpack's element-wise
// array of the same []int32: encode plus decode time, and the encoded size.
func BenchmarkTokens(b *testing.B) {
	type packed struct {
		T Tokens `msgpack:"t"`
	}
	type array struct {
		T []int32 `msgpack:"t"`
	}
	for _, n := range []int{1_000, 100_000} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(i * 7919 % 151_000) // realistic vocabulary ids, mostly 3-byte ints in msgpack
		}
		b.Run(fmt.Sprintf("packed/n=%d", n), func(b *testing.B) {
			benchRoundTrip(b, &packed{T: ids}, new(packed))
		})
		b.Run(fmt.Sprintf("array/n=%d", n), func(b *testing.B) {
			benchRoundTrip(b, &array{T: ids}, new(array))
		})
	}
}

func benchRoundTrip(b *testing.B, in, out any) {
	b.ReportAllocs()
	var size int
	for b.Loop() {
		data, err := Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		if err := msgpack.Unmarshal(data, out); err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "wire-bytes")
}
