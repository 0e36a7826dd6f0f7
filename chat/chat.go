// Package chat holds rollfleet's own ChatML rendering and the texts of GEM's
// observation styles.
//
// A chat-style episode is rendered by the model's own chat template on the
// model server; ChatML is used only when a request names it
// (messages.TemplateChatML), for a server that cannot render. Its feedback
// text follows OpenRLHF's GEM multi-turn example, with one deliberate
// difference: every message is closed with the canonical "<|im_end|>\n", so
// the token sequence of a trajectory is exactly what a ChatML template
// (Qwen's) renders for the same conversation.
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

// Feedback returns the ChatML text appended to the token sequence after a
// model action in a multi-turn conversation: Turn of the feedback content,
// without its leading "<|im_end|>" when the action already ends with it.
func Feedback(action, obs, suffix string, done bool) string {
	return FeedbackClosed(strings.HasSuffix(action, ImEnd), obs, suffix, done)
}

// FeedbackClosed is Feedback for a caller that knows whether the action's
// tokens ended with the end-of-turn token. vLLM leaves a stop token's text
// out of the completion text, so the text alone cannot tell.
func FeedbackClosed(closed bool, obs, suffix string, done bool) string {
	t := Turn(FeedbackContent(obs, suffix, done), done)
	if closed {
		return t[len(ImEnd):]
	}
	return t
}

// FeedbackContent is the content of the user message that answers a model
// action: the env's observation and, while the episode goes on, its call to
// action on a line of its own (a typical suffix is `Enter your next guess
// within \boxed{}.`). Once done, the observation alone ends the
// conversation.
func FeedbackContent(obs, suffix string, done bool) string {
	if done || suffix == "" {
		return obs
	}
	return obs + "\n" + suffix
}

// Turn is what the ChatML template renders after an assistant turn's
// content when a user message with content follows: "<|im_end|>\n", the user
// message "<|im_start|>user\n" + content + "<|im_end|>\n", and, unless the
// conversation ends there, the generation prompt "<|im_start|>assistant\n".
func Turn(content string, done bool) string {
	var b strings.Builder
	b.Grow(2*len(ImEnd) + len(ImStart) + len("\nuser\n") + len(content) + 1 + len(generationPrompt))
	b.WriteString(ImEnd)
	b.WriteString("\n" + ImStart + "user\n")
	b.WriteString(content)
	b.WriteString(ImEnd)
	b.WriteByte('\n')
	if !done {
		b.WriteString(generationPrompt)
	}
	return b.String()
}
