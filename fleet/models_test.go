package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/chat/hftemplate"
	"github.com/rollfleet/rollfleet/internal/tokenizertest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// foreignMarkers are the role markers of each model's chat template: a
// trajectory of one model must hold none of another's.
var foreignMarkers = map[string][]string{
	"qwen3":       {"<|im_start|>", "<|im_end|>"},
	"llama3_1":    {"<|start_header_id|>", "<|eot_id|>"},
	"gemma3":      {"<start_of_turn>", "<end_of_turn>"},
	"deepseek_v3": {"<｜User｜>", "<｜Assistant｜>"},
}

// TestRealModels runs GuessTheNumber, Sudoku and math episodes against the
// stand-in speaking each real model's tokenizer and chat template, and
// checks every trajectory against that model's own template: the tokens
// before each action are the rendering of the conversation so far with the
// generation prompt, the whole sequence (when the env answered last) is
// the rendering of the whole conversation, every action the model ended
// ends with the template's end-of-turn token, and no other model's markers
// appear. When node and the reference are installed, the JavaScript
// reference checks the same trajectories from outside (scripts/
// check-chat-tokens.cjs).
func TestRealModels(t *testing.T) {
	models := []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3"}
	envIDs := []string{"game:GuessTheNumber-v0", "game:Sudoku-v0-easy", "math"}
	if testing.Short() {
		models, envIDs = models[:2], []string{"game:GuessTheNumber-v0", "math"}
	}
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			dir := tokenizertest.Dir(t, model)
			mt, err := toyllm.LoadModelTokenizer(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			tpl, err := hftemplate.FromConfig(mt.Tokenizer().Config())
			if err != nil {
				t.Fatal(err)
			}
			for _, env := range envIDs {
				t.Run(env, func(t *testing.T) {
					out := runRealModel(t, mt, env, nil)
					trajs := readTrajectories(t, out)
					convs := readConversations(t, out)
					for i, tr := range trajs {
						checkRendered(t, model, tr, convs[i], mt, tpl)
					}
					checkWithReference(t, out, dir, "", len(trajs))
				})
			}
		})
	}
}

// TestRealModelKwargs switches Qwen3's thinking off through the run's chat
// template kwargs: the first prompt and every feedback turn end with the
// empty think block the template renders for it, while Qwen3's template,
// re-rendering, drops those blocks from earlier turns (the documented
// history rewrite), so only the first prompt and the feedback tokens are
// compared with renderings here.
func TestRealModelKwargs(t *testing.T) {
	dir := tokenizertest.Dir(t, "qwen3")
	mt, err := toyllm.LoadModelTokenizer(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	const kwargs = `{"enable_thinking": false}`
	out := runRealModel(t, mt, "game:GuessTheNumber-v0", []byte(kwargs))
	tok := mt.Tokenizer()
	for _, tr := range readTrajectories(t, out) {
		text := tok.Decode(tr.ObservationTokens, false)
		if got, want := strings.Count(text, "<think>\n\n</think>\n\n"), len(tr.ActionRanges); got != want {
			t.Fatalf("%s: %d empty think blocks for %d turns:\n%s", tr.EpisodeID, got, want, text)
		}
	}
	checkWithReference(t, out, dir, kwargs, -1)
}

// runRealModel runs a few episodes of env against the stand-in with mt's
// vocabulary and returns the JSONL written.
func runRealModel(t *testing.T, mt *toyllm.ModelTokenizer, env string, kwargs []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	opts := Options{
		Env: env, Episodes: 12, NSamples: 2, Seed: new(uint64(11)), MaxLength: 4096, MaxTokens: 128,
		DataDir: filepath.Join(dir, "nats"), ChatTemplateKwargs: kwargs, ToyLLM: toyllm.Options{Tokenizer: mt},
	}
	if env == "math" {
		rows := `{"question": "What is 17 + 25?", "expected_answer": "42"}` + "\n" +
			`{"question": "Compute 6 * 7 - 2.", "expected_answer": "40"}` + "\n"
		opts.Dataset = filepath.Join(dir, "math.jsonl")
		if err := os.WriteFile(opts.Dataset, []byte(rows), 0o644); err != nil {
			t.Fatal(err)
		}
		opts.Episodes = 4
	}
	var out bytes.Buffer
	opts.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := Run(ctx, opts)
	if err != nil || sum.Failures != 0 || sum.Trajectories != opts.Episodes {
		t.Fatalf("run: %v, summary %s", err, sum)
	}
	return out.Bytes()
}

// checkRendered compares a chat trajectory with its model's template.
func checkRendered(t *testing.T, model string, tr *messages.Trajectory, conv []messages.ChatMessage, mt *toyllm.ModelTokenizer, tpl *hftemplate.Template) {
	t.Helper()
	tok := mt.Tokenizer()
	if len(conv) == 0 {
		t.Fatalf("%s: no conversation", tr.EpisodeID)
	}
	render := func(msgs []messages.ChatMessage, gen bool) []int32 {
		hm := make([]hftemplate.Message, len(msgs))
		for i, m := range msgs {
			hm[i] = hftemplate.Message{Role: m.Role, Content: hftemplate.Text(m.Content)}
		}
		text, err := tpl.Render(hm, hftemplate.RenderOptions{AddGenerationPrompt: gen})
		if err != nil {
			t.Fatalf("%s: render: %v", tr.EpisodeID, err)
		}
		return tok.Encode(text, false)
	}
	k := 0
	for i, m := range conv {
		if m.Role != "assistant" {
			continue
		}
		r := tr.ActionRanges[k]
		if want, got := render(conv[:i], true), tr.ObservationTokens[:r.Start]; !slices.Equal(got, want) {
			t.Fatalf("%s turn %d: prompt differs from the template's rendering\n got %q\nwant %q",
				tr.EpisodeID, k, tok.Decode(got, false), tok.Decode(want, false))
		}
		last := k == len(tr.ActionRanges)-1
		if end := tr.ObservationTokens[r.End-1]; end != mt.EndOfTurn() && !(last && tr.FinishReason == "length") {
			t.Errorf("%s turn %d: action ends with %d (%q), not the end-of-turn token %d",
				tr.EpisodeID, k, end, tok.Decode([]int32{end}, false), mt.EndOfTurn())
		}
		k++
	}
	if k != len(tr.ActionRanges) {
		t.Fatalf("%s: %d assistant messages for %d actions", tr.EpisodeID, k, len(tr.ActionRanges))
	}
	if conv[len(conv)-1].Role != "assistant" {
		// An episode the budget, the context window or the turn cap ended after the env's
		// answer holds the generation prompt of the turn it did not play.
		open := tr.Truncated && slices.Contains([]string{"budget", "context_length", "max_turns"}, tr.FinishReason)
		if want := render(conv, open); !slices.Equal(tr.ObservationTokens, want) {
			t.Fatalf("%s: tokens differ from the rendering of the whole conversation\n got %q\nwant %q",
				tr.EpisodeID, tok.Decode(tr.ObservationTokens, false), tok.Decode(want, false))
		}
	}
	text := tok.Decode(tr.ObservationTokens, false)
	for other, markers := range foreignMarkers {
		for _, mk := range markers {
			if other != model && strings.Contains(text, mk) {
				t.Errorf("%s: a %s trajectory holds %s's %q", tr.EpisodeID, model, other, mk)
			}
		}
	}
}

// readConversations reads the "messages" of each JSONL trajectory.
func readConversations(t *testing.T, jsonl []byte) [][]messages.ChatMessage {
	t.Helper()
	var out [][]messages.ChatMessage
	for _, line := range bytes.Split(bytes.TrimSpace(jsonl), []byte("\n")) {
		var tr struct {
			Messages []messages.ChatMessage `json:"messages"`
		}
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatal(err)
		}
		out = append(out, tr.Messages)
	}
	return out
}

// checkWithReference runs scripts/check-chat-tokens.cjs, the JavaScript
// reference's reading of the trajectories, when node and the reference
// are installed; want is the number of trajectories it must check (-1: all
// it finds).
func checkWithReference(t *testing.T, jsonl []byte, modelDir, kwargs string, want int) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil || tokenizertest.NodeModules() == "" {
		t.Logf("reference check skipped: needs node and %s", tokenizertest.FetchHint)
		return
	}
	file := filepath.Join(t.TempDir(), "trajectories.jsonl")
	if err := os.WriteFile(file, jsonl, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join("..", "scripts", "check-chat-tokens.cjs"), "trajectories", file, "--model-dir", modelDir}
	if kwargs != "" {
		args = append(args, "--kwargs", kwargs)
	}
	out, err := exec.Command(node, args...).Output()
	var sum struct {
		Checked    int `json:"checked"`
		Mismatches int `json:"mismatches"`
	}
	if jerr := json.Unmarshal(out, &sum); jerr != nil || err != nil || sum.Mismatches != 0 || (want >= 0 && sum.Checked != want) {
		t.Fatalf("reference check (want %d checked): %v %s", want, err, out)
	}
	t.Logf("reference: %s", bytes.TrimSpace(out))
}
