package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// recorder keeps, server-side, what the stand-in sampled for each prompt.
// The n samples of a group share their first prompt, so a prompt can have
// several generations.
type recorder struct {
	mu  sync.Mutex
	gen map[string][][]int32
}

func key(ids []int32) string { return fmt.Sprint(ids) }

func (r *recorder) record(prompt, generated []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key(prompt)
	r.gen[k] = append(r.gen[k], slices.Clone(generated))
}

// returned reports whether the stand-in returned exactly ids for prompt.
func (r *recorder) returned(prompt, ids []int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.gen[key(prompt)], func(g []int32) bool { return slices.Equal(g, ids) })
}

var gtnIDs = []string{
	"game:GuessTheNumber-v0", "game:GuessTheNumber-v0-easy",
	"game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0-random",
}

// TestEndToEndGuessTheNumber runs every GuessTheNumber id through the whole
// fleet (embedded NATS, the stand-in over real HTTP, the three actors) and
// checks each trajectory against the contract, the model's own output and a
// replay of the game.
func TestEndToEndGuessTheNumber(t *testing.T) {
	const perEnv, n = 200, 4
	dir := t.TempDir()
	var rows bytes.Buffer
	for _, id := range gtnIDs {
		for range perEnv / n {
			fmt.Fprintf(&rows, "{\"env\": %q}\n", id)
		}
	}
	dataset := filepath.Join(dir, "data.jsonl")
	if err := os.WriteFile(dataset, rows.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{gen: map[string][][]int32{}}
	var out bytes.Buffer
	seed := uint64(7)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{
		Dataset: dataset, NSamples: n, Seed: &seed, MaxLength: 2048, MaxTokens: 64,
		DataDir: filepath.Join(dir, "nats"), Out: &out,
		ToyLLM: toyllm.Options{Record: rec.record},
	})
	if err != nil {
		t.Fatalf("run: %v (summary %s)", err, sum)
	}
	total := perEnv * len(gtnIDs)
	if sum.Trajectories != total || sum.Failures != 0 || sum.Duplicates != 0 {
		t.Fatalf("want %d trajectories and no failures, got %s", total, sum)
	}

	trajs := readTrajectories(t, out.Bytes())
	if len(trajs) != total {
		t.Fatalf("want %d JSONL lines, got %d", total, len(trajs))
	}
	seen := map[string]bool{}
	perEnvCount := map[string]int{}
	groups := map[string][]*messages.Trajectory{}
	rewards := map[float64]int{}
	for _, tr := range trajs {
		if seen[tr.EpisodeID] {
			t.Fatalf("episode %s appears twice", tr.EpisodeID)
		}
		seen[tr.EpisodeID] = true
		perEnvCount[tr.Env]++
		groups[tr.GroupID] = append(groups[tr.GroupID], tr)
		rewards[tr.Reward]++
		checkTrajectory(t, tr, rec)
	}
	for _, id := range gtnIDs {
		if perEnvCount[id] != perEnv {
			t.Errorf("%s: want %d trajectories, got %d", id, perEnv, perEnvCount[id])
		}
	}
	for g, members := range groups {
		if len(members) != n {
			t.Errorf("group %s has %d members, want %d", g, len(members), n)
		}
	}
	// The stand-in plays noisily: a healthy run shows wins and losses.
	if sum.Successes == 0 || sum.Successes == total || len(rewards) < 3 {
		t.Errorf("expected a spread of outcomes, got %d successes of %d and rewards %v", sum.Successes, total, rewards)
	}
	t.Logf("summary: %s", sum)
}

func readTrajectories(t *testing.T, data []byte) []*messages.Trajectory {
	t.Helper()
	var out []*messages.Trajectory
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var tr messages.Trajectory
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		tr.V = messages.Version
		out = append(out, &tr)
	}
	return out
}

// checkTrajectory checks one trajectory against the DESIGN invariants, the
// ids the stand-in actually returned, and a replay of the game.
func checkTrajectory(t *testing.T, tr *messages.Trajectory, rec *recorder) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatalf("%s: invariant: %v", tr.EpisodeID, err)
	}
	var tok toyllm.Tokenizer
	obs := []int32(tr.ObservationTokens)
	spec, err := envs.Lookup(tr.Env)
	if err != nil {
		t.Fatal(err)
	}
	env, err := envs.New(tr.Env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.EnvSeed == nil {
		t.Fatalf("%s: no env seed recorded", tr.EpisodeID)
	}
	first, info := env.Reset(envs.NewRNG(*tr.EnvSeed))
	if spec.ChatSuffix == "" && info["suffix"] != "" {
		// A board game: GEM's wrappers show the board after the instructions.
		if !strings.HasSuffix(first, "\n") {
			first += "\n"
		}
		first += info["suffix"]
	}
	wantPrompt := chat.Render([]chat.Message{{Role: "user", Content: first}}, true)
	if got := tok.Decode(obs[:tr.ActionRanges[0].Start]); got != wantPrompt {
		t.Fatalf("%s: prompt span\n got %q\nwant %q", tr.EpisodeID, got, wantPrompt)
	}
	var sum float64
	var won bool
	for i, r := range tr.ActionRanges {
		gen := obs[r.Start:r.End]
		if !rec.returned(obs[:r.Start], gen) {
			t.Fatalf("%s turn %d: action tokens are not what the stand-in returned for this prompt", tr.EpisodeID, i)
		}
		for j := r.Start; j < r.End; j++ {
			if tr.RolloutLogProbs[j] > 0 {
				t.Fatalf("%s: positive logprob at %d", tr.EpisodeID, j)
			}
		}
		action := tok.Decode(gen)
		res := env.Step(action)
		if res.Reward != tr.StepRewards[i] {
			t.Fatalf("%s turn %d: reward %v, replay gives %v", tr.EpisodeID, i, tr.StepRewards[i], res.Reward)
		}
		sum += res.Reward
		won = res.Won
		end := int32(len(obs))
		if i+1 < len(tr.ActionRanges) {
			end = tr.ActionRanges[i+1].Start
		}
		suffix := spec.ChatSuffix
		if suffix == "" {
			suffix = res.Info["suffix"]
		}
		wantFeedback := chat.Feedback(action, res.Observation, suffix, res.Done())
		if got := tok.Decode(obs[r.End:end]); got != wantFeedback {
			t.Fatalf("%s turn %d: feedback span\n got %q\nwant %q", tr.EpisodeID, i, got, wantFeedback)
		}
		if res.Done() != (i == len(tr.ActionRanges)-1) && !tr.Truncated {
			t.Fatalf("%s turn %d: replay done=%v disagrees with the trajectory", tr.EpisodeID, i, res.Done())
		}
	}
	if sum != tr.Reward {
		t.Fatalf("%s: reward %v, replay sums to %v", tr.EpisodeID, tr.Reward, sum)
	}
	checkEnd(t, tr, won)
}

// checkEnd checks the trajectory's success against the replay's last step,
// and the bookkeeping every style shares.
func checkEnd(t *testing.T, tr *messages.Trajectory, won bool) {
	t.Helper()
	if tr.Success != won {
		t.Fatalf("%s: success %v, replay won %v", tr.EpisodeID, tr.Success, won)
	}
	if got := tr.ExtraLogs["turn_count"]; got != float64(tr.Turns) {
		t.Fatalf("%s: extra_logs.turn_count %v, turns %d", tr.EpisodeID, got, tr.Turns)
	}
	if !strings.HasPrefix(tr.GroupID, strings.Split(tr.EpisodeID, "-")[0]) {
		t.Fatalf("%s: group %s is not of this run", tr.EpisodeID, tr.GroupID)
	}
}

// TestDynamicFiltering: with a filter, the output holds exactly the kept
// groups' trajectories — every member of each, and each group's mean score
// strictly inside (0, 1) — and --groups-out the same groups; the counts add
// up to every group of the run.
func TestDynamicFiltering(t *testing.T) {
	var out, groupsOut bytes.Buffer
	seed := uint64(3)
	sum, err := Run(context.Background(), Options{
		Env: "game:GuessTheNumber-v0-hard", Episodes: 256, NSamples: 4, Seed: &seed,
		Filter: &collector.ScoreRange{Low: 0, High: 1}, Out: &out, GroupsOut: &groupsOut,
		DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Trajectories != 256 {
		t.Fatalf("summary counts %d trajectories, want all 256: %s", sum.Trajectories, sum)
	}
	scores := map[string][]float64{}
	for _, tr := range readTrajectories(t, out.Bytes()) {
		scores[tr.GroupID] = append(scores[tr.GroupID], tr.Scores)
	}
	for id, s := range scores {
		var total float64
		for _, x := range s {
			total += x
		}
		if mean := total / float64(len(s)); len(s) != 4 || mean <= 0 || mean >= 1 {
			t.Errorf("group %s in the output: %d members, mean %v; want 4 and inside (0, 1)", id, len(s), mean)
		}
	}
	kept := len(scores)
	if sum.GroupsKept != kept || sum.GroupsKept+sum.GroupsFiltered != 64 {
		t.Fatalf("groups: %d in the output, summary says %s", kept, sum)
	}
	var groups []messages.Group
	for _, line := range bytes.Split(bytes.TrimSpace(groupsOut.Bytes()), []byte("\n")) {
		var g messages.Group
		if err := json.Unmarshal(line, &g); err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	if len(groups) != kept {
		t.Fatalf("%d groups in --groups-out, want the %d kept", len(groups), kept)
	}
	for _, g := range groups {
		if len(g.Trajectories) != 4 || len(scores[g.GroupID]) != 4 || g.RunID == "" {
			t.Errorf("group %s: %d trajectories, run %q; the output has %d", g.GroupID, len(g.Trajectories), g.RunID, len(scores[g.GroupID]))
		}
	}
	if kept == 0 || kept == 64 {
		t.Fatalf("the filter was not exercised: %d of 64 kept", kept)
	}
	if want := float64(kept) / 64; sum.PassRate() != want {
		t.Fatalf("pass rate %v, want %v", sum.PassRate(), want)
	}
}

// TestMixedEnvs: --env with several ids and patterns spreads the prompts
// over them in turn, and the summary breaks the run down per env.
func TestMixedEnvs(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{
		Env: "game:GuessTheNumber-v0-easy, game:GuessTheNumber-v0-h*", Episodes: 40, NSamples: 2,
		Out: &out, DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, tr := range readTrajectories(t, out.Bytes()) {
		counts[tr.Env]++
	}
	want := map[string]int{"game:GuessTheNumber-v0-easy": 20, "game:GuessTheNumber-v0-hard": 20}
	if !maps.Equal(counts, want) {
		t.Fatalf("trajectories per env %v, want %v", counts, want)
	}
	for id, n := range want {
		if e := sum.PerEnv[id]; e == nil || e.Trajectories != n {
			t.Fatalf("summary for %s: %+v, want %d trajectories", id, e, n)
		}
	}
	if !strings.Contains(sum.Table(), "game:GuessTheNumber-v0-hard") {
		t.Fatalf("table lacks an env:\n%s", sum.Table())
	}
	if _, err := Run(context.Background(), Options{Env: "game:Nope*", Episodes: 1, DataDir: filepath.Join(t.TempDir(), "x")}); err == nil || !strings.Contains(err.Error(), "known ids") {
		t.Fatalf("an env pattern matching nothing must fail clearly, got %v", err)
	}
}

// TestEndToEndAllGames runs at least 50 episodes of every game family
// through the fleet, spread over each family's ids, and checks every
// trajectory against the contract, the stand-in's own output and a replay
// of the game.
func TestEndToEndAllGames(t *testing.T) {
	const perFamily = 50
	ids, err := envs.Match("game:*")
	if err != nil {
		t.Fatal(err)
	}
	families := map[string][]string{}
	for _, id := range ids {
		spec, err := envs.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		families[spec.Family] = append(families[spec.Family], id)
	}
	var rows bytes.Buffer
	for _, fam := range slices.Sorted(maps.Keys(families)) {
		for i := range perFamily {
			fmt.Fprintf(&rows, "{\"env\": %q}\n", families[fam][i%len(families[fam])])
		}
	}
	dataset := filepath.Join(t.TempDir(), "games.jsonl")
	if err := os.WriteFile(dataset, rows.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{gen: map[string][][]int32{}}
	var out bytes.Buffer
	seed := uint64(5)
	sum, err := Run(context.Background(), Options{
		Dataset: dataset, Seed: &seed, MaxLength: 4096, MaxTokens: 64, Out: &out,
		DataDir: filepath.Join(t.TempDir(), "nats"), ToyLLM: toyllm.Options{Record: rec.record},
	})
	if err != nil {
		t.Fatalf("run: %v (%s)", err, sum)
	}
	total := perFamily * len(families)
	if sum.Trajectories != total || sum.Failures != 0 || sum.Duplicates != 0 {
		t.Fatalf("want %d trajectories and no failures, got %s", total, sum)
	}
	rewards := map[string]map[float64]bool{}
	for _, tr := range readTrajectories(t, out.Bytes()) {
		checkTrajectory(t, tr, rec)
		spec, _ := envs.Lookup(tr.Env)
		if rewards[spec.Family] == nil {
			rewards[spec.Family] = map[float64]bool{}
		}
		rewards[spec.Family][tr.Reward] = true
	}
	for fam := range families {
		if len(rewards[fam]) < 2 {
			t.Errorf("%s: every episode got the same reward %v; the stand-in should show a spread", fam, rewards[fam])
		}
	}
	t.Logf("per env:\n%s", sum.Table())
}

// checkSingleTurn checks a trajectory of a single-turn style: each sample's
// prompt is GEM's concat history (in the qwen3_game template if asked) of a
// replay of the game, its action is what the stand-in returned for that
// prompt, and rewards and returns follow the replay.
func checkSingleTurn(t *testing.T, tr *messages.Trajectory, rec *recorder) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatalf("%s: invariant: %v", tr.EpisodeID, err)
	}
	var tok toyllm.Tokenizer
	env, err := envs.New(tr.Env, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, info := env.Reset(envs.NewRNG(*tr.EnvSeed))
	history, suffix := []string{first}, info["suffix"]
	var won bool
	for i, smp := range tr.Samples {
		r := smp.ActionRanges[0]
		prompt, gen := smp.ObservationTokens[:r.Start], smp.ObservationTokens[r.Start:r.End]
		want := chat.History(history, suffix)
		if tr.ObsStyle == messages.ObsQwen3Game {
			want = chat.Qwen3Game(want)
		}
		if got := tok.Decode(prompt); got != want {
			t.Fatalf("%s turn %d: prompt\n got %q\nwant %q", tr.EpisodeID, i, got, want)
		}
		if int(r.End) != len(smp.ObservationTokens) {
			t.Fatalf("%s turn %d: sample goes on after its action", tr.EpisodeID, i)
		}
		if !rec.returned(prompt, gen) {
			t.Fatalf("%s turn %d: action tokens are not what the stand-in returned for this prompt", tr.EpisodeID, i)
		}
		res := env.Step(tok.Decode(gen))
		if res.Reward != smp.Reward || res.Reward != tr.StepRewards[i] {
			t.Fatalf("%s turn %d: reward %v, replay gives %v", tr.EpisodeID, i, smp.Reward, res.Reward)
		}
		history, suffix, won = append(history, res.Observation), res.Info["suffix"], res.Won
	}
	checkEnd(t, tr, won)
}

// TestEndToEndObsStyles plays games in GEM's single-turn observation styles
// through the fleet: every turn is a fresh prompt and its own sample.
func TestEndToEndObsStyles(t *testing.T) {
	games := []string{"game:GuessTheNumber-v0-easy", "game:Mastermind-v0-easy", "game:Minesweeper-v0-easy", "game:Game2048-v0-easy"}
	for _, style := range []string{messages.ObsConcat, messages.ObsQwen3Game} {
		t.Run(style, func(t *testing.T) {
			rec := &recorder{gen: map[string][][]int32{}}
			var out bytes.Buffer
			seed := uint64(11)
			sum, err := Run(context.Background(), Options{
				Env: strings.Join(games, ","), Episodes: 16 * len(games), ObsStyle: style, Seed: &seed,
				MaxLength: 4096, MaxTokens: 64, Out: &out,
				DataDir: filepath.Join(t.TempDir(), "nats"), ToyLLM: toyllm.Options{Record: rec.record},
			})
			if err != nil {
				t.Fatalf("run: %v (%s)", err, sum)
			}
			if sum.Trajectories != 16*len(games) || sum.Failures != 0 {
				t.Fatalf("want %d trajectories and no failures, got %s", 16*len(games), sum)
			}
			multi := 0
			for _, tr := range readTrajectories(t, out.Bytes()) {
				if tr.ObsStyle != style {
					t.Fatalf("%s: obs_style %q, want %q", tr.EpisodeID, tr.ObsStyle, style)
				}
				checkSingleTurn(t, tr, rec)
				if len(tr.Samples) > 1 {
					multi++
				}
			}
			if multi == 0 {
				t.Error("no episode lasted more than one turn: the history was never exercised")
			}
		})
	}
}
