package env

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestPromptOverflow plays episodes whose prompt does or does not fit the
// budget, in every observation style and both overflow settings, through
// the env worker, the LLM worker and the collector: each ends as exactly
// one trajectory or failure record, and a cut prompt keeps its template and
// says so.
func TestPromptOverflow(t *testing.T) {
	const maxTokens = 64
	var tok toyllm.Tokenizer
	env, err := envs.New(overflowEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, info := env.Reset(envs.NewRNG(overflowSeed))
	chatPrompt := chat.Render([]chat.Message{{Role: "user", Content: obs}}, true)
	concatPrompt := chat.History([]string{obs}, info["suffix"])
	qwenPrompt := chat.Qwen3Game(concatPrompt)
	// The text each style's template puts around the content.
	chatHead, chatTail := "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
	qwenHead, qwenTail, _ := strings.Cut(chat.Qwen3Game("\x00"), "\x00")
	const keep = 300 // a budget under every style's first prompt, over its template
	for _, p := range []string{chatPrompt, concatPrompt, qwenPrompt} {
		if n := len(tok.Encode(p)); n <= keep {
			t.Fatalf("first prompt of %d tokens fits the budget of %d", n, keep)
		}
	}

	cases := []struct {
		name, style, overflow string
		maxLength             int
		check                 func(t *testing.T, o outcome)
	}{
		{"chat fits", messages.ObsChat, "", 4096, fits},
		{"concat fits", messages.ObsConcat, messages.PromptOverflowTruncateLeft, 4096, fits},
		{"qwen3_game fits", messages.ObsQwen3Game, messages.PromptOverflowFail, 4096, fits},

		{"chat fails", messages.ObsChat, "", keep + maxTokens, tooLong(len(tok.Encode(chatPrompt)), keep)},
		{"concat fails", messages.ObsConcat, messages.PromptOverflowFail, keep + maxTokens, tooLong(len(tok.Encode(concatPrompt)), keep)},
		{"qwen3_game fails", messages.ObsQwen3Game, "", keep + maxTokens, tooLong(len(tok.Encode(qwenPrompt)), keep)},

		{"chat truncate-left", messages.ObsChat, messages.PromptOverflowTruncateLeft, keep + maxTokens, func(t *testing.T, o outcome) {
			tr := trajectoryOf(t, o.traj, o.failure)
			prompt := tr.ObservationTokens[:tr.ActionRanges[0].Start]
			checkTemplated(t, tok.Decode(prompt), chatHead, chatTail, obs)
			if len(prompt) != keep || tr.PromptTruncated != int32(len(tok.Encode(chatPrompt))-keep) {
				t.Fatalf("prompt of %d tokens with %d cut, want %d with %d cut", len(prompt), tr.PromptTruncated, keep, len(tok.Encode(chatPrompt))-keep)
			}
			if prompt[0] != toyllm.ImStartID || !slices.Equal(prompt[len(prompt)-len(tok.Encode(chatTail)):], tok.Encode(chatTail)) {
				t.Fatalf("prompt tokens do not start with <|im_start|> and end with the assistant header: %v", prompt)
			}
		}},
		{"concat truncate-left", messages.ObsConcat, messages.PromptOverflowTruncateLeft, keep + maxTokens, func(t *testing.T, o outcome) {
			tr := trajectoryOf(t, o.traj, o.failure)
			first := tr.Samples[0]
			// Plain text is all content: its last tokens are kept.
			full := tok.Encode(concatPrompt)
			if got := first.ObservationTokens[:first.ActionRanges[0].Start]; !slices.Equal(got, full[len(full)-keep:]) {
				t.Fatalf("first prompt %q, want the last %d tokens of %q", tok.Decode(got), keep, concatPrompt)
			}
			checkSamplesCut(t, tr, int32(len(full)-keep), func(string) {})
		}},
		{"qwen3_game truncate-left", messages.ObsQwen3Game, messages.PromptOverflowTruncateLeft, keep + maxTokens, func(t *testing.T, o outcome) {
			tr := trajectoryOf(t, o.traj, o.failure)
			first := tr.Samples[0]
			checkTemplated(t, tok.Decode(first.ObservationTokens[:first.ActionRanges[0].Start]), qwenHead, qwenTail, concatPrompt)
			checkSamplesCut(t, tr, int32(len(tok.Encode(qwenPrompt))-keep), func(prompt string) {
				if !strings.HasPrefix(prompt, qwenHead) || !strings.HasSuffix(prompt, qwenTail) {
					t.Fatalf("prompt %q lost its template", prompt)
				}
			})
		}},

		// Truncation never cuts the template: one longer than the budget fails.
		{"chat template over the budget", messages.ObsChat, messages.PromptOverflowTruncateLeft, 10 + maxTokens, func(t *testing.T, o outcome) {
			tooLong(len(tok.Encode(chatPrompt)), 10)(t, o)
			if !strings.Contains(o.failure.Reason, fmt.Sprintf("template alone takes %d", len(tok.Encode(chatHead+chatTail)))) {
				t.Fatalf("reason %q does not name the template's size", o.failure.Reason)
			}
		}},
		{"qwen3_game template over the budget", messages.ObsQwen3Game, messages.PromptOverflowTruncateLeft, 100 + maxTokens, tooLong(len(tok.Encode(qwenPrompt)), 100)},

		// A single-turn style's history outgrowing the budget after the first
		// turn ends the episode truncated, with the turns it played.
		{"concat outgrows the budget", messages.ObsConcat, "", len(tok.Encode(concatPrompt)) + 10 + maxTokens, outgrows},
		{"qwen3_game outgrows the budget", messages.ObsQwen3Game, "", len(tok.Encode(qwenPrompt)) + 10 + maxTokens, outgrows},
	}

	s := bustest.RunServer(t)
	srv := httptest.NewServer(toyllm.New(toyllm.Options{}).Handler())
	t.Cleanup(srv.Close)
	js, coll, _, start := resumeHarness(t, s, srv.URL)
	startWorker(t, s, "env", Options{Concurrency: len(cases)}, start)
	subj := messages.NewSubjects("")
	for i, tc := range cases {
		req := episodeRequest(fmt.Sprint("overflow-", i), func(r *messages.EpisodeRequest) {
			seed := uint64(overflowSeed)
			r.Env, r.EnvSeed, r.ObsStyle, r.PromptOverflow = overflowEnv, &seed, tc.style, tc.overflow
			r.MaxLength, r.Sampling.MaxTokens = int32(tc.maxLength), maxTokens
		})
		data, err := messages.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(context.Background(), js, subj.Episodes(req.RunID, req.Env), data, ""); err != nil {
			t.Fatal(err)
		}
	}
	got := gatherOutcomes(t, js, coll, len(cases))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, got[fmt.Sprint("overflow-", i)]) })
	}
}

// The game of TestPromptOverflow: one the model plays for a few turns.
const (
	overflowEnv  = "game:GuessTheNumber-v0-hard"
	overflowSeed = 12
)

// outcome is an episode's trajectory or failure record.
type outcome struct {
	traj    *messages.Trajectory
	failure *messages.Failure
}

// gatherOutcomes waits until the collector has recorded n outcomes and
// handled every step, then reads them back, failing on an episode with
// two.
func gatherOutcomes(t *testing.T, js jetstream.JetStream, coll *collector.Collector, n int) map[string]outcome {
	t.Helper()
	ctx := context.Background()
	subj := messages.NewSubjects("")
	bustest.CheckFor(t, time.Minute, 5*time.Millisecond, func() error {
		if st := coll.Stats(); st.Trajectories+st.Failures < uint64(n) {
			return fmt.Errorf("%d of %d outcomes: %+v", st.Trajectories+st.Failures, n, st)
		}
		cons, err := js.Consumer(ctx, subj.StreamSteps(), "collector")
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil || ci.NumPending+uint64(ci.NumAckPending) != 0 {
			return fmt.Errorf("steps not yet handled: %+v %v", ci, err)
		}
		return nil
	})
	got := map[string]outcome{}
	read := func(stream string, add func(data []byte, o *outcome) (string, error)) {
		for _, m := range bustest.StoredMessages(t, js, stream, "") {
			var o outcome
			id, err := add(m.Data, &o)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := got[id]; dup {
				t.Fatalf("%s: a second outcome", id)
			}
			got[id] = o
		}
	}
	read(subj.StreamTrajectories(), func(data []byte, o *outcome) (string, error) {
		tr, err := messages.Decode[messages.Trajectory](data)
		if err != nil {
			return "", err
		}
		o.traj = tr
		return tr.EpisodeID, nil
	})
	read(subj.StreamFailures(), func(data []byte, o *outcome) (string, error) {
		f, err := messages.Decode[messages.Failure](data)
		if err != nil {
			return "", err
		}
		o.failure = f
		return f.EpisodeID, nil
	})
	if len(got) != n {
		t.Fatalf("%d outcomes for %d episodes", len(got), n)
	}
	return got
}

// trajectoryOf returns the trajectory of an episode that must have one.
func trajectoryOf(t *testing.T, tr *messages.Trajectory, f *messages.Failure) *messages.Trajectory {
	t.Helper()
	if tr == nil {
		t.Fatalf("no trajectory; failure %+v", f)
	}
	return tr
}

// fits checks a trajectory whose prompts all fit: nothing says truncated.
func fits(t *testing.T, o outcome) {
	tr := trajectoryOf(t, o.traj, o.failure)
	if tr.PromptTruncated != 0 || tr.Truncated {
		t.Fatalf("prompt_truncated_tokens %d, truncated %v; want neither", tr.PromptTruncated, tr.Truncated)
	}
	for i, smp := range tr.Samples {
		if smp.PromptTruncated != 0 {
			t.Fatalf("sample %d: prompt_truncated_tokens %d", i, smp.PromptTruncated)
		}
	}
}

// tooLong checks for the failure of a first prompt of n tokens over the
// budget keep.
func tooLong(n, keep int) func(*testing.T, outcome) {
	return func(t *testing.T, o outcome) {
		t.Helper()
		if o.traj != nil {
			t.Fatalf("a trajectory, want a failure: %+v", o.traj)
		}
		want := fmt.Sprintf("%d tokens, over the budget of %d", n, keep)
		if o.failure.Kind != messages.FailurePromptTooLong || !strings.Contains(o.failure.Reason, want) || o.failure.Turn != 0 {
			t.Fatalf("failure %+v, want kind %s at turn 0 with %q", o.failure, messages.FailurePromptTooLong, want)
		}
	}
}

// outgrows checks a single-turn episode whose later prompt did not fit: a
// truncated trajectory of the turns played, nothing cut.
func outgrows(t *testing.T, o outcome) {
	tr := trajectoryOf(t, o.traj, o.failure)
	if !tr.Truncated || tr.FinishReason != FinishBudget || tr.Turns < 1 || tr.PromptTruncated != 0 {
		t.Fatalf("truncated %v, finish %q, %d turns, %d prompt tokens cut; want a budget truncation after a turn, nothing cut",
			tr.Truncated, tr.FinishReason, tr.Turns, tr.PromptTruncated)
	}
}

// checkTemplated checks a prompt that truncation cut: the template's head
// and tail around a proper ending of the content.
func checkTemplated(t *testing.T, prompt, head, tail, content string) {
	t.Helper()
	kept, ok := strings.CutPrefix(prompt, head)
	if ok {
		kept, ok = strings.CutSuffix(kept, tail)
	}
	if !ok || !strings.HasSuffix(content, kept) || len(kept) >= len(content) {
		t.Fatalf("prompt %q is not %q + a cut ending of the content + %q", prompt, head, tail)
	}
}

// checkSamplesCut checks a single-turn trajectory whose every prompt was
// cut to the budget: the first by first tokens, each prompt passed to
// check.
func checkSamplesCut(t *testing.T, tr *messages.Trajectory, first int32, check func(prompt string)) {
	t.Helper()
	var tok toyllm.Tokenizer
	if tr.Samples[0].PromptTruncated != first {
		t.Fatalf("first prompt: %d tokens cut, want %d", tr.Samples[0].PromptTruncated, first)
	}
	var sum int32
	for i, smp := range tr.Samples {
		if smp.PromptTruncated <= 0 {
			t.Fatalf("sample %d: no tokens cut", i)
		}
		sum += smp.PromptTruncated
		check(tok.Decode(smp.ObservationTokens[:smp.ActionRanges[0].Start]))
	}
	if tr.PromptTruncated != sum {
		t.Fatalf("trajectory counts %d tokens cut, its samples %d", tr.PromptTruncated, sum)
	}
}

func TestCutFront(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, []string{"ab", "", "cde"}},
		{1, []string{"b", "", "cde"}},
		{2, []string{"", "", "cde"}},
		{4, []string{"", "", "e"}},
		{5, []string{"", "", ""}},
	} {
		content := []string{"ab", "", "cde"}
		if got := cutFront(content, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("cutFront(%q, %d) = %q, want %q", content, tc.n, got, tc.want)
		}
		if content[0] != "ab" || content[2] != "cde" {
			t.Fatalf("cutFront changed its input: %q", content)
		}
	}
}

func TestRuneBoundaries(t *testing.T) {
	s := "aé日b" // 1-, 2-, 3- and 1-byte runes
	for i, want := range []int{0, 1, 3, 3, 6, 6, 6, 7} {
		if got := runeStart(s, i); got != want {
			t.Errorf("runeStart(%q, %d) = %d, want %d", s, i, got, want)
		}
	}
	for i, want := range []int{0, 1, 1, 3, 3, 3, 6, 7} {
		if got := runeAt(s, i); got != want {
			t.Errorf("runeAt(%q, %d) = %d, want %d", s, i, got, want)
		}
	}
}

// TestCutContent: the cut found keeps the longest ending of the content
// that fits (checked against every possible cut), on rune boundaries, in
// few tokenizations when token counts shrink evenly with the cut.
func TestCutContent(t *testing.T) {
	var tok toyllm.Tokenizer
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	for _, tc := range []struct {
		name      string
		roles     []string
		content   []string
		keep      int
		maxProbes int
		// weigh tokenizes a rendering; nil is the toy model's byte tokenizer.
		weigh func(string) []int32
	}{
		{"one message", []string{"user"}, []string{long}, 500, 2, nil},
		{"system prompt cut first", []string{"system", "user"}, []string{"Be brief.", long}, 100, 2, nil},
		{"into the second message", []string{"system", "user"}, []string{long, "Guess a number."}, 40, 2, nil},
		{"all content cut", []string{"system", "user"}, []string{"Be brief.", long}, 29, 2, nil},
		{"multi-byte runes", []string{"user"}, []string{strings.Repeat("é日本語ü", 60)}, 301, 3, nil},
		{"uneven token counts", []string{"user"}, []string{strings.Repeat("~", 30) + long}, 300, 8, func(s string) []int32 {
			// Each ~ weighs 20 tokens: guesses from even shrinking miss.
			var out []int32
			for _, id := range tok.Encode(s) {
				out = append(out, id)
				if id == '~' {
					out = append(out, make([]int32, 19)...)
				}
			}
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			weigh := tc.weigh
			if weigh == nil {
				weigh = tok.Encode
			}
			render := func(content []string) []int32 {
				msgs := make([]chat.Message, len(content))
				for i, c := range content {
					msgs[i] = chat.Message{Role: tc.roles[i], Content: c}
				}
				return weigh(chat.Render(msgs, true))
			}
			probes := 0
			tokenize := func(content []string) ([]int32, error) {
				probes++
				return render(content), nil
			}
			full := render(tc.content)
			bare := render(make([]string, len(tc.content)))
			got, kept, err := cutContent(tc.content, len(full), bare, tc.keep, tokenize)
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(tc.content, "")
			var want []int32
			for c := 0; c <= len(joined); c = runeStart(joined, c+1) {
				if want = render(cutFront(tc.content, c)); len(want) <= tc.keep {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("kept %d tokens %q,\nwant %d tokens %q", len(got), tok.Decode(got), len(want), tok.Decode(want))
			}
			if !slices.Equal(render(kept), got) {
				t.Fatalf("kept content %q does not render the kept tokens", kept)
			}
			if probes > tc.maxProbes {
				t.Fatalf("%d tokenizations, want at most %d", probes, tc.maxProbes)
			}
			t.Logf("%d of %d tokens kept in %d tokenizations", len(got), len(full), probes)
		})
	}
}
