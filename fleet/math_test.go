package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/envs/mathgrade"
	"github.com/rollfleet/rollfleet/nemogym"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestEndToEndMath runs the shipped math examples through the fleet with 4
// samples per problem and dynamic filtering: NeMo Gym items (system prompt
// and question as chat messages, env math:nemo) and plain question/answer
// rows (env math). Every trajectory must be valid, hold what the stand-in
// sampled, be graded as the verifier grades the decoded answer, and carry
// NeMo Gym's result fields beside OpenRLHF's.
func TestEndToEndMath(t *testing.T) {
	for _, tc := range []struct {
		file, env string
		system    bool
	}{
		{"items.jsonl", "math:nemo", true},
		{"arithmetic.jsonl", "math", false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rec := &recorder{gen: map[string][][]int32{}}
			var out bytes.Buffer
			seed := uint64(9)
			sum, err := Run(context.Background(), Options{
				Dataset: filepath.Join("..", "examples", "math", tc.file), NSamples: 4, Seed: &seed,
				MaxLength: 1024, MaxTokens: 128, Filter: &collector.ScoreRange{Low: 0, High: 1}, Out: &out,
				DataDir: filepath.Join(t.TempDir(), "nats"), ToyLLM: toyllm.Options{Record: rec.record},
			})
			if err != nil {
				t.Fatalf("run: %v (%s)", err, sum)
			}
			if sum.Trajectories != 256 || sum.Failures != 0 {
				t.Fatalf("want 256 trajectories, got %s", sum)
			}
			if r := sum.SuccessRate(); r < 0.6 || r > 0.95 {
				t.Errorf("success rate %.3f, the stand-in is right about 80%% of the time", r)
			}
			if sum.GroupsKept == 0 || sum.GroupsFiltered == 0 {
				t.Errorf("filter not exercised: %s", sum)
			}
			var tok toyllm.Tokenizer
			questions := map[int32]string{}
			for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
				var fields map[string]any
				if err := json.Unmarshal(line, &fields); err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"reward", "library_reward", "expected_answer", "extracted_answer", "_ng_task_index", "_ng_rollout_index", "observation_tokens", "action_ranges", "rollout_log_probs"} {
					if _, ok := fields[k]; !ok {
						t.Fatalf("result has no %s: %s", k, line)
					}
				}
			}
			for _, tr := range readTrajectories(t, out.Bytes()) {
				if err := tr.Validate(); err != nil {
					t.Fatalf("%s: %v", tr.EpisodeID, err)
				}
				if tr.Env != tc.env || tr.Turns != 1 {
					t.Fatalf("%s: env %s turns %d", tr.EpisodeID, tr.Env, tr.Turns)
				}
				if q, ok := questions[tr.TaskIndex]; ok && q != tr.Prompt {
					t.Fatalf("task %d has two questions", tr.TaskIndex)
				}
				questions[tr.TaskIndex] = tr.Prompt
				msgs := []chat.Message{{Role: "user", Content: tr.Prompt + "\nPlease reason step by step, and put your final answer within \\boxed{}."}}
				if tc.system {
					msgs = []chat.Message{{Role: "system", Content: nemogym.SystemPrompt}, {Role: "user", Content: tr.Prompt}}
				}
				r := tr.ActionRanges[0]
				prompt, gen := tr.ObservationTokens[:r.Start], tr.ObservationTokens[r.Start:r.End]
				if got, want := tok.Decode(prompt), chat.Render(msgs, true); got != want {
					t.Fatalf("%s: prompt\n got %q\nwant %q", tr.EpisodeID, got, want)
				}
				if int(r.End) != len(tr.ObservationTokens) {
					t.Fatalf("%s: tokens after the answer", tr.EpisodeID)
				}
				if !rec.returned(prompt, gen) {
					t.Fatalf("%s: answer tokens are not what the stand-in returned", tr.EpisodeID)
				}
				g := mathgrade.Grade(tok.Decode(gen), tr.Label)
				if tr.Reward != g.Reward || tr.ExtraLogs["library_reward"] != g.Reward || tr.Success != (g.Reward == 1) ||
					tr.Info["extracted_answer"] != envs.MathAnswerString(g.Extracted) || tr.Info["expected_answer"] != tr.Label {
					t.Fatalf("%s: reward %v info %v, verifier says %+v", tr.EpisodeID, tr.Reward, tr.Info, g)
				}
			}
			// With the filter the output holds the kept groups only: one
			// task (prompt) each.
			if len(questions) != sum.GroupsKept || sum.GroupsKept+sum.GroupsFiltered != 64 {
				t.Fatalf("%d task indexes in the output, want the %d kept groups' (of 64: %s)", len(questions), sum.GroupsKept, sum)
			}
		})
	}
}
