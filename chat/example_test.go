package chat_test

import (
	"fmt"

	"github.com/rollfleet/rollfleet/chat"
)

func ExampleRender() {
	prompt := chat.Render([]chat.Message{
		{Role: "user", Content: "Guess the number between 1 and 20."},
	}, true)
	fmt.Printf("%q\n", prompt)
	// Output:
	// "<|im_start|>user\nGuess the number between 1 and 20.<|im_end|>\n<|im_start|>assistant\n"
}

func ExampleFeedback() {
	suffix := `Enter your next guess within \boxed{}.`
	// The model stopped on <|im_end|>, so only the newline closes its turn.
	fmt.Printf("%q\n", chat.Feedback(`\boxed{10}<|im_end|>`,
		"At turn 1, you guessed 10, and the target number is higher than 10.", suffix, false))
	// The episode is over: the last user message is closed, as the template
	// closes every message, and no generation prompt follows.
	fmt.Printf("%q\n", chat.Feedback(`\boxed{15}`,
		"Congratulations! You guessed the correct number 15 in 2 turns.", suffix, true))
	// Output:
	// "\n<|im_start|>user\nAt turn 1, you guessed 10, and the target number is higher than 10.\nEnter your next guess within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
	// "<|im_end|>\n<|im_start|>user\nCongratulations! You guessed the correct number 15 in 2 turns.<|im_end|>\n"
}
