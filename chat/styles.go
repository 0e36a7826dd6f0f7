package chat

import "strings"

// History is the text of GEM's concat observation wrapper (include_action off, no chat
// template): every observation so far, each ending in a newline (one is added only when
// missing), followed by the env's current info suffix. The model sees the whole history as one
// fresh prompt each turn, without its own earlier actions.
func History(observations []string, suffix string) string {
	n := len(suffix)
	for _, o := range observations {
		n += len(o) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for _, o := range observations {
		b.WriteString(o)
		if o != "" && !strings.HasSuffix(o, "\n") {
			b.WriteByte('\n')
		}
	}
	b.WriteString(suffix)
	return b.String()
}

// Qwen3Game wraps an observation in GEM's qwen3_game prompt template: a single ChatML user turn
// that frames the game, then the generation prompt.
func Qwen3Game(observation string) string {
	return ImStart + "user\nYou are playing language games. Make valid actions to win.\nObservation: " + observation +
		"\nPlease reason step by step, and put your final answer within \\boxed{}." + ImEnd + "\n" + generationPrompt
}
