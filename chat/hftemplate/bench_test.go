package hftemplate

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkRender renders a 10-turn conversation (a system prompt, ten
// user and assistant turns) with each model's template.
func BenchmarkRender(b *testing.B) {
	msgs := []Message{system("You play tic-tac-toe. Answer with a cell.")}
	for i := range 10 {
		msgs = append(msgs,
			user(fmt.Sprintf("Board:\n X | O | . \n . | X | . \n . | . | O \nTurn %d, your move.", i)),
			assistant(fmt.Sprintf("<think>\nThe centre is taken; row %d is open.\n</think>\n\n%d", i%3, i%9)))
	}
	for _, m := range parityModels {
		tmpl, err := Load(filepath.Join(tokenizersDir(b), m, "tokenizer_config.json"))
		if err != nil {
			b.Skipf("%v: run scripts/fetch-tokenizers.sh", err)
		}
		b.Run(m, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
