package toyllm

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/envs"
)

// sokobanRoom is GEM's Sokoban transcript room as a state to restore:
// targets at (2,3) and (4,3), boxes at (2,2) and (3,3), the player at (1,3).
const sokobanRoom = `{"room_fixed": [[0,0,0,0,0,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,1,1,1,1,0],[0,1,1,2,1,0],[0,0,0,0,0,0]],
	"boxes": [[2,2],[3,3]], "player": [1,3], "example": "up"}`

// sokobanOpening is the first prompt of an episode in sokobanRoom: the
// instructions, then the board, as the env worker joins them.
func sokobanOpening(t *testing.T, opts string) (envs.Env, string) {
	t.Helper()
	env, err := envs.New("game:Sokoban-v0-easy", []byte(opts))
	if err != nil {
		t.Fatal(err)
	}
	env.Reset(envs.NewRNG(1))
	if err := env.Restore([]byte(sokobanRoom)); err != nil {
		t.Fatal(err)
	}
	return env, env.Instructions() + "\n" + env.Info()["suffix"]
}

func TestReadSokobanBoard(t *testing.T) {
	_, text := sokobanOpening(t, "")
	// A later board wins over the first one.
	text += "\nAt turn 1, you moved down.\nHere is the current board layout:\n" +
		"# # # # # #\n# _ _ _ _ #\n# _ X O _ #\n# _ _ P _ #\n# _ _ √ _ #\n# # # # # #\n\nEnter your move."
	want := sokobanBoard{
		[]byte("######"), []byte("#____#"), []byte("#_XO_#"), []byte("#__P_#"), []byte("#__V_#"), []byte("######"),
	}
	if got := readSokobanBoard([]byte(text)); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("board %q, want %q", got, want)
	}
}

// TestPlanSokobanHeadsForAPush: from the transcript room the useful first
// move is down, toward pushing the lower box onto its target; the planner
// chooses it most of the time and slips at about slipRate.
func TestPlanSokobanHeadsForAPush(t *testing.T) {
	_, text := sokobanOpening(t, "")
	counts := map[string]int{}
	const n = 2000
	for seed := range uint64(n) {
		var rng rand.PCG
		rng.Seed(seed, planStream)
		out, ok := appendBoardGamePlan(nil, []byte(text), &rng)
		if !ok {
			t.Fatal("Sokoban's instructions not recognised")
		}
		counts[string(out)]++
	}
	if down := counts[`I move down. \boxed{down}`]; down < n*3/4 {
		t.Errorf("down chosen %d times of %d: %v", down, n, counts)
	}
	if slips := counts[`I go \boxed{north}`]; slips < n*slipRate/2 || slips > n*slipRate*2 {
		t.Errorf("%d slips in %d plans, want about %v", slips, n, slipRate)
	}
}

// TestPlanSokobanPlays plays easy episodes, each reply planned from the
// conversation so far: the planner solves rooms, and the episodes end with a
// spread of rewards.
func TestPlanSokobanPlays(t *testing.T) {
	rewards := map[float64]int{}
	for seed := range uint64(200) {
		env, err := envs.New("game:Sokoban-v0-easy", nil)
		if err != nil {
			t.Fatal(err)
		}
		obs, info := env.Reset(envs.NewRNG(seed))
		var text strings.Builder
		text.WriteString(obs + "\n" + info["suffix"])
		var rng rand.PCG
		rng.Seed(seed, planStream)
		for {
			reply, ok := appendBoardGamePlan(nil, []byte(text.String()), &rng)
			if !ok {
				t.Fatal("Sokoban's instructions not recognised")
			}
			r := env.Step(string(reply))
			text.WriteString("\n" + string(reply) + "\n" + r.Observation + "\n" + r.Info["suffix"])
			if r.Done() {
				rewards[r.Reward]++
				break
			}
		}
	}
	if rewards[1] < 40 || rewards[-0.1] == 0 || len(rewards) < 3 {
		t.Errorf("final rewards %v: want many wins, some format errors and a spread", rewards)
	}
	t.Logf("final rewards over 200 episodes: %v", rewards)
}
