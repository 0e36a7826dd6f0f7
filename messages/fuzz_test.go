package messages

import (
	"bytes"
	"errors"
	"testing"
)

// fuzzDecode checks Decode[T] on arbitrary bytes: it never panics, every failure matches one of
// the package's sentinels, and every success is a valid message whose re-encoding decodes to the
// same encoding again.
func fuzzDecode[T any, P interface {
	*T
	Validate() error
}](f *testing.F, seeds ...*T) {
	for _, s := range seeds {
		if err := P(s).Validate(); err != nil {
			f.Fatalf("seed is invalid: %v", err)
		}
		f.Add(mustMarshal(f, s))
	}
	for _, kind := range everyKind {
		f.Add(kind)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode[T, P](data)
		if err != nil {
			if v != nil {
				t.Fatalf("Decode returned both a message and %v", err)
			}
			if errors.Is(err, errDecoderPanic) {
				t.Fatalf("decoder panicked: %v", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error matches no sentinel: %v", err)
			}
			return
		}
		if err := P(v).Validate(); err != nil {
			t.Fatalf("Decode returned an invalid message: %v", err)
		}
		again := mustMarshal(t, v)
		v2, err := Decode[T, P](again)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !bytes.Equal(canonical(t, mustMarshal(t, v2)), canonical(t, again)) {
			t.Fatalf("encoding is not stable:\n%+v\n%+v", v, v2)
		}
	})
}

func FuzzDecodeEpisodeRequest(f *testing.F) {
	fuzzDecode(f, sampleEpisode(),
		&EpisodeRequest{V: Version, EpisodeID: "e", GroupID: "g", GroupSize: 1, Env: "x", MaxLength: 1})
}

func FuzzDecodeGenerateRequest(f *testing.F) {
	fuzzDecode(f, sampleGenerateRequest())
}

func FuzzDecodeGenerateReply(f *testing.F) {
	fuzzDecode(f, sampleGenerateReply(), &GenerateReply{V: Version, Error: "x", Code: CodeInvalid})
}

func FuzzDecodeTokenizeRequest(f *testing.F) {
	fuzzDecode(f, sampleTokenizeRequest(), &TokenizeRequest{V: Version, Text: "hello"})
}

func FuzzDecodeTokenizeReply(f *testing.F) {
	fuzzDecode(f, sampleTokenizeReply(), &TokenizeReply{V: Version, Error: "x", Code: CodeUnavailable})
}

func FuzzDecodeStepEvent(f *testing.F) {
	fuzzDecode(f, sampleStep(),
		with(sampleStep, func(e *StepEvent) { e.Turn, e.Episode, e.PromptTokens = 2, nil, nil }),
		&StepEvent{V: Version, EpisodeID: "e", Turn: 3, Done: true},
		&StepEvent{V: Version, EpisodeID: "e", Error: "boom"})
}

func FuzzDecodeTrajectory(f *testing.F) {
	fuzzDecode(f, sampleTrajectory())
}

func FuzzDecodeGroup(f *testing.F) {
	fuzzDecode(f, sampleGroup())
}

func FuzzDecodeFailure(f *testing.F) {
	fuzzDecode(f, sampleFailure(), &Failure{V: Version, Kind: FailureEpisode, Reason: "r"})
}

func FuzzDecodeDetokenizeRequest(f *testing.F) {
	fuzzDecode(f, &DetokenizeRequest{V: Version, EpisodeID: "e", Tokens: Tokens{1, 2, 3}, Pieces: true})
}

func FuzzDecodeDetokenizeReply(f *testing.F) {
	fuzzDecode(f, &DetokenizeReply{V: Version, Text: "ab", Pieces: []string{"a", "b"}}, &DetokenizeReply{V: Version, Error: "x", Code: CodeInvalid})
}

func FuzzDecodeChatTokenizeRequest(f *testing.F) {
	fuzzDecode(f, &ChatTokenizeRequest{
		V: Version, Messages: []ChatMessage{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true,
		ChatTemplateKwargs: []byte(`{"enable_thinking": false}`),
	})
}

func FuzzDecodeModelInfoReply(f *testing.F) {
	fuzzDecode(f, &ModelInfoReply{V: Version, Models: []ModelInfo{{ID: "m", MaxModelLen: 4096}}}, &ModelInfoReply{V: Version, Error: "x", Code: CodeUnavailable})
}
