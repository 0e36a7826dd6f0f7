package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/envs/mathgrade"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/nemogym"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestNeMoGymRoundTrip: question/answer rows with fields of their own are
// prepared as NeMo Gym items with its math prompt, run through the fleet
// (the stand-in model, rows reused, one row twice) and written as NeMo Gym
// records; each record is checked field by field as a NeMo Gym user's
// scripts read it: names, order, types, nulls and indices.
func TestNeMoGymRoundTrip(t *testing.T) {
	dir := t.TempDir()
	qa := strings.Join([]string{
		`{"id": "p1", "question": "What is 12 + 7?", "answer": "19", "level": 1}`,
		`{"id": "p2", "question": "Compute 3*(4+5).", "answer": "27", "level": 2}`,
		`{"id": "p1", "question": "What is 12 + 7?", "answer": "19", "level": 1}`,
		`{"id": "p3", "question": "What is 100 / 8?", "answer": "\\frac{25}{2}", "level": 3, "_ng_task_index": 40}`,
	}, "\n") + "\n"
	var items bytes.Buffer
	if _, err := nemogym.PrepareJSONL(strings.NewReader(qa), &items, nemogym.PrepareOptions{Prompt: nemogym.PromptNemo}); err != nil {
		t.Fatal(err)
	}
	itemsPath := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(itemsPath, items.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	seed := uint64(5)
	sum, err := Run(context.Background(), Options{
		Dataset: itemsPath, NSamples: 4, Episodes: 32, Seed: &seed, MaxLength: 1024, MaxTokens: 128,
		Format: FormatNeMoGym, Out: &out, DataDir: filepath.Join(dir, "nats"),
	})
	if err != nil || sum.Trajectories != 32 {
		t.Fatalf("run: %v (%s)", err, sum)
	}

	wantKeys := []string{"responses_create_params", "response", "reward", "mask_sample", "failure_kind", "failure_reason",
		"expected_answer", "extracted_answer", "library_reward", "judge_evaluations", "_ng_task_index", "_ng_rollout_index",
		"agent_ref", "question", "id", "level", "episode_id"}
	taskOf := map[string]int32{"p1": 0, "p2": 1, "p3": 40}
	pairs := map[[2]int32]bool{}
	perTask := map[int32]int{}
	rewarded := 0
	var tok toyllm.Tokenizer
	for n, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		if keys := topKeys(t, line); !reflect.DeepEqual(keys, wantKeys) {
			t.Fatalf("line %d: keys %v\nwant %v", n+1, keys, wantKeys)
		}
		var rec map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		// Rewards are floats in the JSON text (1.0, 0.0), never integers.
		for _, k := range []string{"reward", "library_reward"} {
			if num, ok := rec[k].(json.Number); !ok || !strings.Contains(string(num), ".") {
				t.Fatalf("line %d: %s is %v, want a float", n+1, k, rec[k])
			}
		}
		if rec["judge_evaluations"] != nil || rec["mask_sample"] != false || rec["failure_kind"] != nil {
			t.Fatalf("line %d: judge_evaluations %v mask_sample %v failure_kind %v", n+1, rec["judge_evaluations"], rec["mask_sample"], rec["failure_kind"])
		}
		id := rec["id"].(string)
		task, _ := rec["_ng_task_index"].(json.Number).Int64()
		rollout, _ := rec["_ng_rollout_index"].(json.Number).Int64()
		if int32(task) != taskOf[id] {
			t.Fatalf("line %d: row %s has task %d, want %d", n+1, id, task, taskOf[id])
		}
		key := [2]int32{int32(task), int32(rollout)}
		if pairs[key] {
			t.Fatalf("line %d: (task, rollout) %v repeated", n+1, key)
		}
		pairs[key] = true
		perTask[int32(task)]++
		if ref := rec["agent_ref"].(map[string]any); ref["name"] != nemogym.AgentName || ref["type"] != nemogym.AgentType {
			t.Fatalf("line %d: agent_ref %v", n+1, ref)
		}
		question := rec["question"].(string)
		input := rec["responses_create_params"].(map[string]any)["input"].([]any)
		if len(input) != 1 {
			t.Fatalf("line %d: input %v", n+1, input)
		}
		msg := input[0].(map[string]any)
		if msg["role"] != "user" || msg["type"] != "message" || msg["content"] != nemogym.MathPrompt+"\n\n"+question {
			t.Fatalf("line %d: input message %v", n+1, msg)
		}
		resp := rec["response"].(map[string]any)
		output := resp["output"].([]any)
		if resp["object"] != "response" || resp["model"] != toyllm.DefaultModel || len(output) != 1 {
			t.Fatalf("line %d: response %v", n+1, resp)
		}
		om := output[0].(map[string]any)
		text := om["content"].([]any)[0].(map[string]any)["text"].(string)
		gen := numbers(om["generation_token_ids"].([]any))
		if len(gen) == 0 || len(om["generation_log_probs"].([]any)) != len(gen) || len(om["prompt_token_ids"].([]any)) == 0 {
			t.Fatalf("line %d: output tokens %v", n+1, om)
		}
		// The text is what the model server decoded (a stray byte as U+FFFD).
		if decoded := strings.ToValidUTF8(tok.Decode(gen), "\uFFFD"); !strings.HasPrefix(decoded, text) || text == "" {
			t.Fatalf("line %d: text %q, tokens say %q", n+1, text, decoded)
		}
		expected := rec["expected_answer"].(string)
		g := mathgrade.Grade(text, expected)
		reward, _ := rec["reward"].(json.Number).Float64()
		if reward != g.Reward {
			t.Fatalf("line %d: reward %v, the verifier says %v for %q", n+1, reward, g.Reward, text)
		}
		rewarded += int(reward)
		switch x := rec["extracted_answer"].(type) {
		case nil:
			if g.Extracted != "" {
				t.Fatalf("line %d: extracted_answer null, the verifier extracted %q", n+1, g.Extracted)
			}
		case string:
			if x != envs.MathAnswerString(g.Extracted) || x == "" {
				t.Fatalf("line %d: extracted_answer %q, the verifier extracted %q", n+1, x, g.Extracted)
			}
		default:
			t.Fatalf("line %d: extracted_answer %T", n+1, x)
		}
	}
	// p1 appears twice, and the four rows are used twice with 4 samples.
	if want := map[int32]int{0: 16, 1: 8, 40: 8}; !reflect.DeepEqual(perTask, want) {
		t.Fatalf("rollouts per task %v, want %v", perTask, want)
	}
	for task, n := range perTask {
		for r := range n {
			if !pairs[[2]int32{task, int32(r)}] {
				t.Fatalf("task %d: rollout %d missing (rollouts number 0..%d)", task, r, n-1)
			}
		}
	}
	if rewarded == 0 || rewarded == 32 {
		t.Errorf("%d of 32 rewarded: the stand-in should be right most of the time, not always", rewarded)
	}
}

// topKeys returns the keys of a JSON object line in their order.
func topKeys(t *testing.T, line []byte) []string {
	t.Helper()
	fields, err := nemogym.ObjectFields(line)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	return keys
}

func numbers(xs []any) []int32 {
	out := make([]int32, len(xs))
	for i, x := range xs {
		v, err := x.(json.Number).Int64()
		if err != nil {
			panic(fmt.Sprint(x))
		}
		out[i] = int32(v)
	}
	return out
}

// TestNeMoGymJudge: with a math judge, every answer the grader rejects that
// has a box is judged through the fleet's LLM workers (the stand-in, which
// says the off-by-one answers differ) and its evaluations recorded; answers
// without a box and rewarded ones are not judged.
func TestNeMoGymJudge(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	seed := uint64(3)
	sum, err := Run(context.Background(), Options{
		Dataset: filepath.Join("..", "examples", "math", "items.jsonl"), NSamples: 4, Seed: &seed, MaxLength: 1024, MaxTokens: 128,
		Format: FormatNeMoGym, MathJudge: "judge-model", Out: &out, DataDir: filepath.Join(dir, "nats"),
	})
	if err != nil || sum.Failures != 0 {
		t.Fatalf("run: %v (%s)", err, sum)
	}
	judged := 0
	for n, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var rec struct {
			Reward        float64           `json:"reward"`
			LibraryReward float64           `json:"library_reward"`
			Extracted     *string           `json:"extracted_answer"`
			Evals         []json.RawMessage `json:"judge_evaluations"`
			Response      struct {
				Output []struct {
					Content []struct{ Text string }
				}
			}
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		text := rec.Response.Output[0].Content[0].Text
		wantJudge := rec.LibraryReward == 0 && strings.Contains(text, `\boxed{`)
		if (rec.Evals != nil) != wantJudge {
			t.Fatalf("line %d: judged %v for %q (library %v)", n+1, rec.Evals != nil, text, rec.LibraryReward)
		}
		if wantJudge {
			judged++
			if len(rec.Evals) != 1 || rec.Reward != 0 || !bytes.Contains(rec.Evals[0], []byte(`[[A!=B]]`)) || !bytes.Contains(rec.Evals[0], []byte(`"model":"judge-model"`)) {
				t.Fatalf("line %d: reward %v evaluations %s", n+1, rec.Reward, rec.Evals)
			}
		}
	}
	if judged == 0 {
		t.Fatal("no answer was judged")
	}
}

// judgeRecord is what the judge tests read of a NeMo Gym record.
type judgeRecord struct {
	Reward        float64 `json:"reward"`
	MaskSample    bool    `json:"mask_sample"`
	FailureKind   *string `json:"failure_kind"`
	FailureReason *string `json:"failure_reason"`
	LibraryReward float64 `json:"library_reward"`
	Evals         []struct {
		Response *struct {
			Output []struct {
				Content []struct{ Text string }
			}
		} `json:"response"`
		Error string `json:"error"`
	} `json:"judge_evaluations"`
}

// runJudged runs the math items through a fleet whose judge is the vLLM
// server at judge, and returns the NeMo Gym records that asked it.
func runJudged(t *testing.T, judge string) []judgeRecord {
	t.Helper()
	var out bytes.Buffer
	seed := uint64(3)
	sum, err := Run(context.Background(), Options{
		Dataset: filepath.Join("..", "examples", "math", "items.jsonl"), NSamples: 4, Seed: &seed, MaxLength: 1024, MaxTokens: 128,
		Format: FormatNeMoGym, MathJudge: judge, Out: &out, DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if err != nil || sum.Failures != 0 || sum.Trajectories != 256 {
		t.Fatalf("run: %v (%s)", err, sum)
	}
	var judged []judgeRecord
	for line := range bytes.SplitSeq(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var rec judgeRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Evals != nil {
			judged = append(judged, rec)
		} else if rec.MaskSample || rec.FailureKind != nil {
			t.Fatalf("a record without a judge is masked: %s", line)
		}
	}
	if len(judged) == 0 {
		t.Fatal("no answer was judged")
	}
	return judged
}

// A judge that says equal both ways round rewards an answer the grader
// rejected (reward 1.0, library_reward 0.0), through the fleet's own judge
// LLM worker in front of a vLLM server given by URL.
func TestNeMoGymJudgeEqual(t *testing.T) {
	judge, hits := faultyModel(t, "equal")
	judged := runJudged(t, judge.URL)
	for _, rec := range judged {
		if rec.Reward != 1 || rec.LibraryReward != 0 || rec.MaskSample || len(rec.Evals) != 2 {
			t.Fatalf("reward %v library %v masked %v, %d asks", rec.Reward, rec.LibraryReward, rec.MaskSample, len(rec.Evals))
		}
		for _, ev := range rec.Evals {
			if ev.Response == nil || !envs.JudgeSaysEqual(ev.Response.Output[0].Content[0].Text) {
				t.Fatalf("evaluation %+v", ev)
			}
		}
	}
	if n := hits.Load(); n != int64(2*len(judged)) {
		t.Fatalf("%d judge calls for %d answers judged both ways round", n, len(judged))
	}
}

// A judge whose calls fail settles the answer as NeMo Gym's judge_failsafe
// does: the episode is a trajectory with the grader's reward 0.0, masked
// (mask_sample true, failure_kind judge_failed, failure_reason the error),
// and the failed ask is in judge_evaluations with a null response. A server
// error or a broken reply is retried first (the model endpoint unavailable),
// a rejected request is not (NeMo Gym retries no HTTP error either).
func TestNeMoGymJudgeFailure(t *testing.T) {
	for _, tc := range []struct{ fault, reason string }{
		{"400", "judge refuses"},
		{"500", "gave up after"},
		{"garbage", "gave up after"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			judge, hits := faultyModel(t, tc.fault)
			judged := runJudged(t, judge.URL)
			for _, rec := range judged {
				if rec.Reward != 0 || rec.LibraryReward != 0 || !rec.MaskSample || rec.FailureKind == nil || *rec.FailureKind != "judge_failed" ||
					rec.FailureReason == nil || !strings.Contains(*rec.FailureReason, tc.reason) {
					t.Fatalf("record %+v", rec)
				}
				if len(rec.Evals) != 1 || rec.Evals[0].Response != nil || rec.Evals[0].Error != *rec.FailureReason {
					t.Fatalf("evaluations %+v", rec.Evals)
				}
			}
			if n := hits.Load(); tc.fault == "400" && n != int64(len(judged)) || n == 0 {
				t.Fatalf("%d judge calls for %d answers", n, len(judged))
			}
		})
	}
}

// Math episodes carry the run's judge and strict choices in their env
// options; other envs carry none.
func TestMathEnvOptions(t *testing.T) {
	rows := []jobs.DatasetRow{{Prompt: "What is 1 + 1?", Label: "2", Env: "math"}, {Env: "game:GuessTheNumber-v0"}}
	for _, tc := range []struct {
		judge  string
		strict bool
		want   string
	}{
		{"", false, ""},
		{"judge-model", false, `{"judge":true}`},
		{"", true, `{"strict":true}`},
		{"http://judge:8000", true, `{"judge":true,"strict":true}`},
	} {
		opts := Options{MathJudge: tc.judge, MathStrict: tc.strict}
		opts.setDefaults()
		p, err := jobs.New(opts.jobOptions(), rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{tc.want, ""} {
			req, err := p.Request(i)
			if err != nil || string(req.EnvOptions) != want {
				t.Errorf("judge %q strict %v, %s: env options %s (%v), want %s", tc.judge, tc.strict, req.Env, req.EnvOptions, err, want)
			}
		}
	}
}

// TestNeMoGymGameInput: a game played from its own instructions is written
// with those instructions as NeMo Gym's input, exactly the first prompt the
// model was given (the stand-in's tokens decode to the input rendered by
// the chat template), board included where the game shows one.
func TestNeMoGymGameInput(t *testing.T) {
	for _, env := range []string{"game:GuessTheNumber-v0", "game:Sudoku-v0-easy"} {
		t.Run(env, func(t *testing.T) {
			var out bytes.Buffer
			seed := uint64(9)
			sum, err := Run(context.Background(), Options{
				Env: env, Episodes: 3, Seed: &seed, MaxTokens: 64, Format: FormatNeMoGym, Out: &out,
				DataDir: filepath.Join(t.TempDir(), "nats"),
			})
			if err != nil || sum.Trajectories != 3 {
				t.Fatalf("run: %v (%s)", err, sum)
			}
			var tok toyllm.Tokenizer
			for n, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
				var rec struct {
					Params struct {
						Input []chat.Message `json:"input"`
					} `json:"responses_create_params"`
					Response struct {
						Output []struct {
							PromptTokenIDs []int32 `json:"prompt_token_ids"`
						} `json:"output"`
					} `json:"response"`
				}
				if err := json.Unmarshal(line, &rec); err != nil {
					t.Fatal(err)
				}
				if len(rec.Params.Input) == 0 || len(rec.Response.Output) == 0 {
					t.Fatalf("line %d: input %v, %d outputs", n+1, rec.Params.Input, len(rec.Response.Output))
				}
				if got, want := chat.Render(rec.Params.Input, true), tok.Decode(rec.Response.Output[0].PromptTokenIDs); got != want {
					t.Fatalf("line %d: input renders as\n%q\nthe model was given\n%q", n+1, got, want)
				}
			}
		})
	}
}
