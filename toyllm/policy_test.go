package toyllm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/chat"
)

// gtnInstructions is GEM's GuessTheNumber instruction text.
func gtnInstructions(lo, hi, maxTurns, example int) string {
	return fmt.Sprintf("You are playing Guess The Number.\n"+
		"You have to guess the number between %d and %d (inclusive) within %d turns.\n"+
		"As you enter your guess, the game will provide you with hints such as the target number is 'higher' or 'lower'.\n"+
		"You may provide your response in any manner. Only the number that is wrapped inside \\boxed{} will be considered as your guess, for example, \\boxed{%d}.\n"+
		"As you play, the history of your guesses will be appended below. Use the information to complete the game before you run out of guesses.\n"+
		"Enter your first guess to start the game.\n", lo, hi, maxTurns, example)
}

func TestReadGame(t *testing.T) {
	higher := func(turn, g int) string {
		return fmt.Sprintf("At turn %d, you guessed %d, and the target number is higher than %d.", turn, g, g)
	}
	lower := func(turn, g int) string {
		return fmt.Sprintf("At turn %d, you guessed %d, and the target number is lower than %d.", turn, g, g)
	}
	tests := []struct {
		name             string
		text             string
		min, max, lo, hi int
		history          []int
	}{
		{name: "no game: default range", text: "Hello", min: 1, max: 20, lo: 1, hi: 20},
		{name: "instructions", text: gtnInstructions(4, 30, 7, 22), min: 4, max: 30, lo: 4, hi: 30},
		{
			name: "feedback narrows",
			text: gtnInstructions(1, 20, 10, 14) + `\boxed{10}` + higher(1, 10) + "It is between 11 and 20, so I try 15." + lower(2, 15),
			min:  1, max: 20, lo: 11, hi: 14, history: []int{10, 15},
		},
		{
			name: "out-of-range and repeated lines do not narrow",
			text: gtnInstructions(1, 10, 4, 3) + higher(1, 5) +
				"At turn 2, you guessed 5, which has been already guessed before." +
				"At turn 3, you guessed 11, which is outside the range specified.",
			min: 1, max: 10, lo: 6, hi: 10, history: []int{5},
		},
		{
			name: "contradictory feedback resets",
			text: gtnInstructions(1, 10, 4, 3) + higher(1, 8) + lower(2, 3),
			min:  1, max: 10, lo: 1, hi: 10, history: []int{8, 3},
		},
		{
			name: "huge numbers are capped",
			text: "guess the number between 1 and 99999999999999999999" + higher(1, 5),
			min:  1, max: maxParsed, lo: 6, hi: maxParsed, history: []int{5},
		},
		{name: "reversed range ignored", text: "the number between 9 and 2", min: 1, max: 20, lo: 1, hi: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := readGame([]byte(tc.text))
			if g.min != tc.min || g.max != tc.max || g.lo != tc.lo || g.hi != tc.hi {
				t.Errorf("range %d..%d narrowed to %d..%d, want %d..%d narrowed to %d..%d",
					g.min, g.max, g.lo, g.hi, tc.min, tc.max, tc.lo, tc.hi)
			}
			if got := g.history[:g.nHistory]; !slices.Equal(got, tc.history) {
				t.Errorf("history = %v, want %v", got, tc.history)
			}
		})
	}
}

func TestPlanText(t *testing.T) {
	g := gameView{min: 1, max: 20, lo: 11, hi: 20, nHistory: 1}
	g.history[0] = 10
	tests := []struct {
		p    plan
		want string
	}{
		{plan{kind: planBisect, style: 0, guess: 15}, `It is between 11 and 20, so I try 15. \boxed{15}`},
		{plan{kind: planBisect, style: 1, guess: 15}, `I guess 15. \boxed{15}`},
		{plan{kind: planJitter, style: 2, guess: 12}, `\boxed{12}`},
		{plan{kind: planRepeat, guess: 10}, `I try 10 again. \boxed{10}`},
		{plan{kind: planOutOfRange, guess: 22}, `Maybe 22. \boxed{22}`},
		{plan{kind: planNoBox, guess: 15}, `I guess 15.`},
		{plan{kind: planSpacedBox, guess: 15}, `I guess 15. \boxed{ 15}`},
	}
	for _, tc := range tests {
		if got := string(appendPlanText(nil, &g, tc.p)); got != tc.want {
			t.Errorf("plan %+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestChoosePlan(t *testing.T) {
	g := readGame([]byte(gtnInstructions(1, 50, 7, 3)))
	greedy := samplingParams{temperature: 0, topP: 1}
	var rng rand.PCG
	for range 20 {
		if p := choosePlan(&g, &greedy, &rng); p.kind != planBisect || p.guess != 25 || p.style != 0 {
			t.Fatalf("greedy plan = %+v, want a bisect at 25", p)
		}
	}
	// Over many draws at temperature 1 every kind shows up except a repeat,
	// which needs an earlier guess; out-of-range guesses lie above the range
	// and jitter guesses inside it.
	sp := samplingParams{temperature: 1, topP: 1}
	var seen [numPlanKinds]int
	for i := range 5000 {
		rng.Seed(uint64(i), planStream)
		p := choosePlan(&g, &sp, &rng)
		seen[p.kind]++
		switch p.kind {
		case planOutOfRange:
			if p.guess <= g.max {
				t.Errorf("out-of-range guess %d inside 1..50", p.guess)
			}
		case planJitter:
			if p.guess < 1 || p.guess > 50 || p.guess == 25 {
				t.Errorf("jitter guess %d", p.guess)
			}
		}
	}
	for k, n := range seen {
		if (n == 0) != (planKind(k) == planRepeat) {
			t.Errorf("plan kind %d chosen %d times", k, n)
		}
	}
	// top-k 1 keeps only the most likely plan.
	topK := samplingParams{temperature: 1, topP: 1, topK: 1}
	for i := range 200 {
		rng.Seed(uint64(i), planStream)
		if p := choosePlan(&g, &topK, &rng); p.kind != planBisect {
			t.Fatalf("top_k 1 chose %+v", p)
		}
	}
}

// referee is GEM's GuessTheNumber, restated for this test.
type referee struct {
	min, max, maxTurns, target, turn int
	guessed                          map[int]bool
}

var boxedRE = regexp.MustCompile(`\\boxed\{([0-9]+)\}`)

// outcome classifies a step.
type outcome int

const (
	stepOK outcome = iota
	stepWin
	stepFormatError
	stepOutOfRange
	stepRepeat
)

func (r *referee) step(action string) (obs string, reward float64, done bool, kind outcome) {
	r.turn++
	g := 0
	if ms := boxedRE.FindAllStringSubmatch(action, -1); len(ms) > 0 {
		v, err := strconv.Atoi(ms[len(ms)-1][1])
		if err != nil {
			v = math.MaxInt // too long for an int: certainly out of range
		}
		g = v
	}
	if g == 0 {
		return fmt.Sprintf("At turn %d, you did not provide a valid guess.", r.turn), -0.1, true, stepFormatError
	}
	switch {
	case g < r.min || g > r.max:
		obs, kind = fmt.Sprintf("At turn %d, you guessed %d, which is outside the range specified.", r.turn, g), stepOutOfRange
	case r.guessed[g]:
		obs, kind = fmt.Sprintf("At turn %d, you guessed %d, which has been already guessed before.", r.turn, g), stepRepeat
	default:
		r.guessed[g] = true
		hint := "higher"
		if g > r.target {
			hint = "lower"
		}
		obs = fmt.Sprintf("At turn %d, you guessed %d, and the target number is %s than %d.", r.turn, g, hint, g)
		if g == r.target {
			return fmt.Sprintf("Congratulations! You guessed the correct number %d in %d turns.", r.target, r.turn), 1, true, stepWin
		}
	}
	if r.turn >= r.maxTurns {
		reward = 0
		if kind != stepOutOfRange {
			reward = 1 - math.Abs(float64(g-r.target))/float64(r.max-r.min)
		}
		return "You have reached the maximum number of turns.", reward, true, kind
	}
	return obs, 0, false, kind
}

// TestPolicyPlaysGuessTheNumber plays real games over HTTP, the way the
// rollout workers do: token ids in and out, feedback appended as tokens.
func TestPolicyPlaysGuessTheNumber(t *testing.T) {
	_, url := newTestServer(t, Options{})
	client := newClient(t, url)
	configs := []struct {
		name                string
		min, max, maxTurns  int
		minWinRate, maxRate float64
	}{
		{"v0", 1, 20, 10, 0.6, 0.98},
		{"easy", 1, 10, 4, 0.5, 0.98},
		{"hard", 1, 50, 7, 0.5, 0.98},
	}
	const games = 120
	const suffix = `Enter your next guess within \boxed{}.`
	var tok Tokenizer
	var kinds [stepRepeat + 1]int
	rewards := map[float64]int{}
	for _, cfg := range configs {
		wins := 0
		for game := range games {
			seed := uint64(game)
			rng := rand.New(rand.NewPCG(seed, 7))
			ref := &referee{min: cfg.min, max: cfg.max, maxTurns: cfg.maxTurns,
				target: cfg.min + rng.IntN(cfg.max-cfg.min+1), guessed: map[int]bool{}}
			instr := gtnInstructions(cfg.min, cfg.max, cfg.maxTurns, cfg.min+rng.IntN(cfg.max-cfg.min+1))
			prompt := tok.Encode(chat.Render([]chat.Message{{Role: "user", Content: instr}}, true))
			total := 0.0
			for turn := 0; ; turn++ {
				resp := client.complete(map[string]any{
					"prompt": prompt, "max_tokens": 96, "temperature": 1.0, "seed": game*100 + turn,
					"logprobs": 0, "return_token_ids": true, "skip_special_tokens": false,
				})
				action := resp.Choices[0].TokenIDs
				obs, reward, done, kind := ref.step(tok.Decode(action))
				kinds[kind]++
				total += reward
				prompt = append(append(prompt, action...), tok.Encode(chat.Feedback(tok.Decode(action), obs, suffix, done))...)
				if done {
					if kind == stepWin {
						wins++
					}
					break
				}
			}
			rewards[math.Round(total*1000)/1000]++
		}
		rate := float64(wins) / games
		t.Logf("%s: won %d of %d games", cfg.name, wins, games)
		if rate < cfg.minWinRate || rate > cfg.maxRate {
			t.Errorf("%s: win rate %.2f, want between %.2f and %.2f", cfg.name, rate, cfg.minWinRate, cfg.maxRate)
		}
	}
	t.Logf("steps: %d ok, %d wins, %d format errors, %d out of range, %d repeats; episode rewards %v",
		kinds[stepOK], kinds[stepWin], kinds[stepFormatError], kinds[stepOutOfRange], kinds[stepRepeat], rewards)
	for k, name := range map[outcome]string{stepFormatError: "format error", stepOutOfRange: "out-of-range guess", stepRepeat: "repeated guess"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in %d games", name, games*len(configs))
		}
	}
	if len(rewards) < 3 {
		t.Errorf("episode rewards %v: want a spread", rewards)
	}
}

// TestPolicyGreedyWins checks that greedy decoding bisects perfectly.
func TestPolicyGreedyWins(t *testing.T) {
	_, url := newTestServer(t, Options{})
	client := newClient(t, url)
	var tok Tokenizer
	for target := 1; target <= 20; target++ {
		ref := &referee{min: 1, max: 20, maxTurns: 10, target: target, guessed: map[int]bool{}}
		prompt := tok.Encode(chat.Render([]chat.Message{{Role: "user", Content: gtnInstructions(1, 20, 10, 5)}}, true))
		for {
			resp := client.complete(map[string]any{"prompt": prompt, "max_tokens": 96, "temperature": 0, "return_token_ids": true})
			action := resp.Choices[0].TokenIDs
			if !strings.HasPrefix(resp.Choices[0].Text, "It is between ") {
				t.Fatalf("greedy reply %q", resp.Choices[0].Text)
			}
			obs, _, done, kind := ref.step(tok.Decode(action))
			if done {
				if kind != stepWin || ref.turn > 5 {
					t.Errorf("target %d: ended with %q after %d turns", target, obs, ref.turn)
				}
				break
			}
			prompt = append(append(prompt, action...), tok.Encode(chat.Feedback(tok.Decode(action), obs, "", false))...)
		}
	}
}
