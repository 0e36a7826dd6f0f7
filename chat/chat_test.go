package chat

import "testing"

func TestRender(t *testing.T) {
	tests := []struct {
		name   string
		msgs   []Message
		genPro bool
		want   string
	}{
		{name: "empty", want: ""},
		{name: "empty with generation prompt", genPro: true, want: "<|im_start|>assistant\n"},
		{
			name: "system and user",
			msgs: []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
		},
		{
			name:   "user with generation prompt",
			msgs:   []Message{{Role: "user", Content: "Guess.\n"}},
			genPro: true,
			want:   "<|im_start|>user\nGuess.\n<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "multi-turn with empty content",
			msgs: []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: ""}, {Role: "user", Content: "é"}},
			want: "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\né<|im_end|>\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Render(tc.msgs, tc.genPro); got != tc.want {
				t.Errorf("Render = %q, want %q", got, tc.want)
			}
		})
	}
}

// openRLHFSuffix is the call to action of OpenRLHF's GEM multi-turn example.
const openRLHFSuffix = `Enter your next guess within \boxed{}.`

func TestFeedback(t *testing.T) {
	const obs = "At turn 1, you guessed 10, and the target number is higher than 10."
	tests := []struct {
		name   string
		action string
		obs    string
		suffix string
		done   bool
		want   string
	}{
		{
			// OpenRLHF: "<|im_end|>\n" is prepended when the action lacks it.
			name:   "not done, action without im_end",
			action: `\boxed{10}`,
			obs:    obs,
			suffix: openRLHFSuffix,
			want: "<|im_end|>\n" + "<|im_start|>user\n" + obs +
				"\nEnter your next guess within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			// rollfleet closes the turn canonically with "\n" where OpenRLHF adds nothing.
			name:   "not done, action ending with im_end",
			action: `\boxed{10}<|im_end|>`,
			obs:    obs,
			suffix: openRLHFSuffix,
			want: "\n" + "<|im_start|>user\n" + obs +
				"\nEnter your next guess within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name:   "done, action without im_end",
			action: `I think \boxed{13}`,
			obs:    "Congratulations! You guessed the correct number 13 in 3 turns.",
			suffix: openRLHFSuffix,
			done:   true,
			want:   "<|im_end|>\n<|im_start|>user\nCongratulations! You guessed the correct number 13 in 3 turns.<|im_end|>\n",
		},
		{
			name:   "done, action ending with im_end",
			action: "no box<|im_end|>",
			obs:    "At turn 1, you did not provide a valid guess.",
			done:   true,
			want:   "\n<|im_start|>user\nAt turn 1, you did not provide a valid guess.<|im_end|>\n",
		},
		{
			name:   "not done, empty suffix",
			action: "x<|im_end|>",
			obs:    "o",
			want:   "\n<|im_start|>user\no<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			// Only a final im_end closes the turn; one in the middle does not.
			name:   "im_end inside the action",
			action: "a<|im_end|>b",
			obs:    "o",
			done:   true,
			want:   "<|im_end|>\n<|im_start|>user\no<|im_end|>\n",
		},
		{
			name: "empty action and observation",
			done: false,
			want: "<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Feedback(tc.action, tc.obs, tc.suffix, tc.done); got != tc.want {
				t.Errorf("Feedback = %q, want %q", got, tc.want)
			}
		})
	}
}

// The feedback after an action ending in <|im_end|> continues the rendered
// conversation exactly as the chat template would render the next turn.
func TestFeedbackMatchesTemplate(t *testing.T) {
	first := []Message{{Role: "user", Content: "Guess a number."}}
	action := `\boxed{10}`
	obs := "At turn 1, you guessed 10, and the target number is higher than 10."
	got := Render(first, true) + action + ImEnd + Feedback(action+ImEnd, obs, openRLHFSuffix, false)
	want := Render(append(first,
		Message{Role: "assistant", Content: action},
		Message{Role: "user", Content: obs + "\n" + openRLHFSuffix},
	), true)
	if got != want {
		t.Errorf("conversation = %q, want %q", got, want)
	}
}

func TestFeedbackClosed(t *testing.T) {
	const obs = "At turn 2, you guessed 15, and the target number is lower than 15."
	tests := []struct {
		name   string
		closed bool
		suffix string
		done   bool
		want   string
	}{
		{
			name: "closed, not done", closed: true, suffix: openRLHFSuffix,
			want: "\n<|im_start|>user\n" + obs + "\nEnter your next guess within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "open, not done", suffix: openRLHFSuffix,
			want: "<|im_end|>\n<|im_start|>user\n" + obs + "\nEnter your next guess within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
		},
		{name: "closed, done", closed: true, done: true, want: "\n<|im_start|>user\n" + obs + "<|im_end|>\n"},
		{name: "open, done", suffix: openRLHFSuffix, done: true, want: "<|im_end|>\n<|im_start|>user\n" + obs + "<|im_end|>\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FeedbackClosed(tc.closed, obs, tc.suffix, tc.done); got != tc.want {
				t.Errorf("FeedbackClosed = %q, want %q", got, tc.want)
			}
			// Feedback decides the same from the action text.
			action := `\boxed{15}`
			if tc.closed {
				action += ImEnd
			}
			if got := Feedback(action, obs, tc.suffix, tc.done); got != tc.want {
				t.Errorf("Feedback = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	tests := []struct {
		name   string
		obs    []string
		suffix string
		want   string
	}{
		{name: "nothing", want: ""},
		{name: "reset only", obs: []string{"Rules."}, suffix: "Board.", want: "Rules.\nBoard."},
		{name: "newline kept, not doubled", obs: []string{"Rules.\n", "At turn 1, ok."}, suffix: "S", want: "Rules.\nAt turn 1, ok.\nS"},
		{name: "empty observation adds nothing", obs: []string{"Rules.", ""}, want: "Rules.\n"},
		{name: "no suffix", obs: []string{"a", "b"}, want: "a\nb\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := History(tt.obs, tt.suffix); got != tt.want {
				t.Fatalf("History = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestQwen3Game(t *testing.T) {
	want := "<|im_start|>user\nYou are playing language games. Make valid actions to win.\nObservation: Guess.\nEnter.\n" +
		"Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
	if got := Qwen3Game("Guess.\nEnter."); got != want {
		t.Fatalf("Qwen3Game = %q, want %q", got, want)
	}
}
