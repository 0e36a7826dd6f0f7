// Package chat renders conversations with the ChatML chat template used by
// Qwen models and builds the per-turn feedback text that multi-turn RL
// appends after each model action.
//
// The feedback text follows OpenRLHF's GEM multi-turn example, with one
// deliberate difference: a turn is always closed with the canonical
// "<|im_end|>\n" boundary, so the token sequence of a trajectory matches what
// the chat template would render for the same conversation.
package chat

import "strings"

// Special-token strings of the ChatML template.
const (
	// ImStart opens a message; the role and a newline follow it.
	ImStart = "<|im_start|>"
	// ImEnd closes a message.
	ImEnd = "<|im_end|>"
	// EndOfText is the end-of-document token of Qwen tokenizers.
	EndOfText = "<|endoftext|>"
)

// Message is one chat message, with the JSON field names of the OpenAI and
// vLLM chat APIs.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// generationPrompt opens the assistant turn the model is asked to write.
const generationPrompt = ImStart + "assistant\n"

// Render renders msgs with the ChatML template: each message becomes
// "<|im_start|>" + role + "\n" + content + "<|im_end|>\n". With
// addGenerationPrompt it appends "<|im_start|>assistant\n" so that the model
// continues as the assistant.
func Render(msgs []Message, addGenerationPrompt bool) string {
	n := 0
	for _, m := range msgs {
		n += len(ImStart) + len(m.Role) + 1 + len(m.Content) + len(ImEnd) + 1
	}
	if addGenerationPrompt {
		n += len(generationPrompt)
	}
	var b strings.Builder
	b.Grow(n)
	for _, m := range msgs {
		b.WriteString(ImStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString(ImEnd)
		b.WriteByte('\n')
	}
	if addGenerationPrompt {
		b.WriteString(generationPrompt)
	}
	return b.String()
}

// Feedback returns the text appended to the token sequence after a model
// action in a multi-turn ChatML conversation.
//
// It first closes the action's turn: "\n" when the action already ends with
// "<|im_end|>", otherwise "<|im_end|>\n". It then adds the environment's
// observation as a user turn:
//
//   - not done: "<|im_start|>user\n" + obs + "\n" + suffix +
//     "<|im_end|>\n<|im_start|>assistant\n", so the model can answer at once
//     (with an empty suffix the "\n" + suffix part is left out);
//   - done: "<|im_start|>user\n" + obs + "<|im_end|>", which ends the
//     trajectory.
//
// A typical suffix is `Enter your next guess within \boxed{}.`.
func Feedback(action, obs, suffix string, done bool) string {
	return FeedbackClosed(strings.HasSuffix(action, ImEnd), obs, suffix, done)
}

// FeedbackClosed is Feedback for a caller that knows whether the action's
// tokens ended with the end-of-turn token. vLLM leaves a stop token's text
// out of the completion text, so the text alone cannot tell.
func FeedbackClosed(closed bool, obs, suffix string, done bool) string {
	closing := ImEnd + "\n"
	if closed {
		closing = "\n"
	}
	var b strings.Builder
	b.Grow(len(closing) + len(ImStart) + len("user\n") + len(obs) + 1 + len(suffix) + len(ImEnd) + 1 + len(generationPrompt))
	b.WriteString(closing)
	b.WriteString(ImStart)
	b.WriteString("user\n")
	b.WriteString(obs)
	if done {
		b.WriteString(ImEnd)
		return b.String()
	}
	if suffix != "" {
		b.WriteByte('\n')
		b.WriteString(suffix)
	}
	b.WriteString(ImEnd)
	b.WriteByte('\n')
	b.WriteString(generationPrompt)
	return b.String()
}
