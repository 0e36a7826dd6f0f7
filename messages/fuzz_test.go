package messages

import (
	"bytes"
	"errors"
	"strings"
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

// FuzzParseSubject checks the parsers of subject tokens and steps subjects on arbitrary strings:
// they never panic, and whatever they accept is exactly what Token and Steps write.
func FuzzParseSubject(f *testing.F) {
	s := NewSubjects("")
	for _, seed := range []string{
		"", "%", "ep-0001", "a%2Eb", "%2", "%2e", "%41", "rf.steps.%.ep", "rf.steps.run-1.ep%201",
		"rf.steps.r.a.b", "rf.steps.ep", "rf.episodes.r.e", s.Steps("a.b", "g", "c d"), "rf.steps.r.1.3.7.15.e",
		"rf.steps.r.1.3.7.015.e", "rf.steps.r.0.0.0.16.e", "rf.steps.r.0.3.7.15.e", "rf.steps.r.1.3.7.15.e.f", "rf.steps.r.1.1.1.1.%",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if id, err := ParseToken(in); err == nil {
			if Token(id) != in {
				t.Fatalf("ParseToken(%q) = %q, whose token is %q", in, id, Token(id))
			}
		} else if id != "" {
			t.Fatalf("ParseToken(%q) returned both %q and %v", in, id, err)
		}
		run, slot, ep, err := s.ParseSteps(in)
		if err != nil {
			// The run of a subject whose episode token is bad is still reported (the collector
			// files its failure record under that run), but never an episode.
			if ep != "" || run != "" && Token(run) != strings.Split(strings.TrimPrefix(in, "rf.steps."), ".")[0] {
				t.Fatalf("ParseSteps(%q) returned %q, %q with %v", in, run, ep, err)
			}
			return
		}
		if got := s.stepsIn(run, slot, ep); got != in || slot < 0 || slot >= MaxStepShards {
			t.Fatalf("ParseSteps(%q) = %q, %d, %q, whose subject is %q", in, run, slot, ep, got)
		}
	})
}
