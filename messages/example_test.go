package messages_test

import (
	"errors"
	"fmt"

	"github.com/rollfleet/rollfleet/messages"
)

func ExampleMarshal() {
	req := &messages.GenerateRequest{
		V:         messages.Version,
		EpisodeID: "ep-0001",
		Turn:      0,
		Prompt:    messages.Tokens{151644, 872, 198},
		Sampling:  messages.SamplingParams{Temperature: 1},
		MaxTokens: 256,
	}
	data, err := messages.Marshal(req)
	if err != nil {
		panic(err)
	}
	subject := messages.NewSubjects("").Generate()
	fmt.Println(subject, len(data), "bytes")
	// Output: rf.llm.generate 73 bytes
}

func ExampleDecode() {
	data, _ := messages.Marshal(&messages.StepEvent{
		V: messages.Version, EpisodeID: "ep-0001", Turn: 4, Done: true, Truncated: true, FinishReason: "length",
	})
	step, err := messages.Decode[messages.StepEvent](data)
	if err != nil {
		panic(err)
	}
	fmt.Println(step.EpisodeID, step.Turn, step.IsEndMarker())

	// A message that breaks a rule is rejected with the field named.
	data, _ = messages.Marshal(&messages.StepEvent{V: messages.Version, EpisodeID: "ep-0001", Turn: -1})
	_, err = messages.Decode[messages.StepEvent](data)
	fmt.Println(err)
	fmt.Println(errors.Is(err, messages.ErrInvalid))
	// Output:
	// ep-0001 4 true
	// messages: decode StepEvent: StepEvent.turn: must be >= 0, got -1
	// true
}

func ExampleToken() {
	s := messages.NewSubjects("rf")
	fmt.Println(s.Episodes("run-7", "game:GuessTheNumber-v0"))
	fmt.Println(s.Steps("", "math.gsm8k/17", "math.gsm8k/17 #2"))
	fmt.Println(messages.Token(""))
	id, _ := messages.ParseToken("math%2Egsm8k/17%20#2")
	fmt.Println(id)
	// Output:
	// rf.episodes.run-7.game:GuessTheNumber-v0
	// rf.steps.%.0.2.2.10.math%2Egsm8k/17%20#2
	// %
	// math.gsm8k/17 #2
}
