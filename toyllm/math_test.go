package toyllm

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/chat"
)

const (
	nemoMathPrompt = `Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \boxed{}.`
	gemMathPrompt  = `Please reason step by step, and put your final answer within \boxed{}.`
	retryNotice    = `Your answer is incorrect. Please try again and put your final answer within \boxed{}.`
)

// nemoMath renders a NeMo Gym math conversation.
func nemoMath(question string) string {
	return chat.Render([]chat.Message{{Role: "system", Content: nemoMathPrompt}, {Role: "user", Content: question}}, true)
}

// solved returns the answer solveMath writes for q, or "" when unsolved.
func solved(q string) string {
	sol, ok := solveMath([]byte(q))
	if !ok {
		return ""
	}
	return string(sol.val.appendTo(nil, sol.decimal))
}

func TestSolveMath(t *testing.T) {
	tests := []struct{ q, want string }{
		{"What is 12 + 7?", "19"},
		{"Compute 3*(4+5).", "27"},
		{"Calculate 100 / 8.", "25/2"},
		{"What is 2 + 3 * 4 - 6 / 3?", "12"},
		{"What is (2 + 3) * 4?", "20"},
		{"What is -3 + 5?", "2"},
		{"What is 5 - -3?", "8"},
		{"What is 3 - 10?", "-7"},
		{"What is 12 plus 7?", "19"},
		{"What is 20 minus 45?", "-25"},
		{"What is 6 times 7?", "42"},
		{"What is 3 x 4?", "12"},
		{"What is 8 Multiplied By 9?", "72"},
		{"What is 9 divided by 6?", "3/2"},
		{"What is 6 × 7 ÷ 4?", "21/2"},
		{"Compute 2 / 3 + 1 / 6.", "5/6"},
		{"Compute -7 / 2.", "-7/2"},
		{"What is 2.5 + 1.25?", "3.75"},
		{"Compute 0.1 + 0.2.", "0.3"},
		{"Calculate 3.6 / 1.2.", "3"},
		{"Calculate 1.5 / 4.", "0.375"},
		{"Calculate 1.0 / 3.", "1/3"},
		{"What is -7.5 + 2.25?", "-5.25"},
		{"Calculate 100 / 8. " + gemMathPrompt, "25/2"},
		// The longest expression wins over a stray one.
		{"Step 1 - ignore this. What is (1 + 2) * (3 + 4)?", "21"},
		{"Tom has 5 apples and buys 3 more. How many apples does Tom have now?", "8"},
		{"Maria has 12 stickers and gets 9 more. How many now?", "21"},
		{"Lily has 24 shells and collects 16 more. How many shells in total?", "40"},
		{"Tom has 10 apples and eats 3. How many apples does Tom have now?", "7"},
		{"Sara has 25 candies and gives away 8. How many are left?", "17"},
		{"Jack has 15 balloons and loses 4. How many now?", "11"},
		{"Noah has 9.5 meters of ribbon and uses 2.25. How many meters are left?", "7.25"},
		{"There are 6 boxes with 8 pencils each. How many pencils are there in total?", "48"},
		{"Each notebook costs 3 dollars. How much do 7 notebooks cost?", "21"},
		{"Each ticket costs 4.5 dollars. How much do 6 tickets cost?", "27"},
		{"A car travels 60 miles per hour for 3 hours. How far does it go?", "180"},
		{"24 cookies are shared equally among 4 friends. How many does each friend get?", "6"},
		{"7 pizzas are shared equally among 2 people. How much does each get?", "7/2"},
		{"12.6 liters are split equally among 3 bottles. How much is in each?", "4.2"},
		// Unknown shapes are not solved: the plan guesses.
		{"What is the capital of France?", ""},
		{"Tom has 5 apples. How many apples does he have?", ""},
		{"Tom has 5 apples, buys 3 and eats 2. How many now?", ""},
		{"What is 1 / 0?", ""},
		{"What is 99999999999 * 99999999999?", ""},
		{"Compute 3*(4+5.", ""},
	}
	for _, tt := range tests {
		if got := solved(tt.q); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.q, got, tt.want)
		}
	}
}

// TestSolveMathExamples checks that the example data set's answers are the
// solver's, so that a demo run's success rate is the planned one.
func TestSolveMathExamples(t *testing.T) {
	f, err := os.Open("../examples/math/arithmetic.jsonl")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	frac := regexp.MustCompile(`^\\frac\{(-?\d+)\}\{(\d+)\}$`)
	sc := bufio.NewScanner(f)
	rows := 0
	for sc.Scan() {
		var row struct {
			Question       string `json:"question"`
			ExpectedAnswer string `json:"expected_answer"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		want := frac.ReplaceAllString(row.ExpectedAnswer, "$1/$2")
		if got := solved(row.Question); got != want {
			t.Errorf("%q: got %q, want %q", row.Question, got, row.ExpectedAnswer)
		}
		rows++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows != 64 {
		t.Errorf("%d rows, want 64", rows)
	}
}

func TestMathMarkers(t *testing.T) {
	var rng rand.PCG
	for _, text := range []string{
		"",
		gtnInstructions(1, 20, 10, 3),
		chat.Render([]chat.Message{{Role: "user", Content: "What is 12 + 7?"}}, true),
		chat.Render([]chat.Message{{Role: "user", Content: "You are playing Mastermind. Put your guess in \\boxed{}."}}, true),
		chat.Qwen3Game(gtnInstructions(1, 20, 10, 3)), // ends with the GEM math request, yet a game
	} {
		if plan, ok := appendMathPlan(nil, []byte(text), &rng); ok {
			t.Errorf("%q: planned %q for a conversation that is not math", text, plan)
		}
	}
	for _, text := range []string{
		nemoMath("What is 12 + 7?"),
		chat.Render([]chat.Message{{Role: "user", Content: "What is 12 + 7?\n" + gemMathPrompt}}, true),
		"What is 12 + 7? " + gemMathPrompt,
	} {
		plan, ok := appendMathPlan(nil, []byte(text), &rng)
		if !ok || !strings.Contains(string(plan), "19") {
			t.Errorf("%q: planned %q, %v", text, plan, ok)
		}
	}
}

func TestMathQuestion(t *testing.T) {
	msgs := func(contents ...string) string {
		m := []chat.Message{{Role: "system", Content: nemoMathPrompt}}
		for i, c := range contents {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			m = append(m, chat.Message{Role: role, Content: c})
		}
		return chat.Render(m, true)
	}
	tests := []struct{ text, want string }{
		{msgs("What is 12 + 7?"), "What is 12 + 7?"},
		{msgs("What is 12 + 7?", `\boxed{18}`, retryNotice), "What is 12 + 7?"},
		{msgs("What is 1 + 1?", `\boxed{2}`, "What is 12 + 7?"), "What is 12 + 7?"},
		{"Solve: What is 12 + 7? " + gemMathPrompt, "Solve: What is 12 + 7? " + gemMathPrompt},
	}
	for _, tt := range tests {
		if got := string(mathQuestion([]byte(tt.text))); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.text, got, tt.want)
		}
	}
}

// mathOutcome classifies a planned reply as right, boxed but wrong, or
// unboxed.
func mathOutcome(plan, want string) int {
	i := strings.LastIndex(plan, `\boxed{`)
	switch {
	case i < 0:
		return 2
	case strings.HasPrefix(plan[i:], `\boxed{`+want+`}`):
		return 0
	}
	return 1
}

// TestMathPlanRates checks the spread of planned replies over many seeds,
// and that the retry turn is answered like the first.
func TestMathPlanRates(t *testing.T) {
	problems := []struct{ text, want string }{
		{nemoMath("Compute 3*(4+5)."), "27"},
		{nemoMath("Calculate 100 / 8."), "25/2"},
		{nemoMath("What is 2.5 + 1.25?"), "3.75"},
		{nemoMath("Tom has 10 apples and eats 3. How many apples does Tom have now?"), "7"},
		{chat.Render([]chat.Message{
			{Role: "user", Content: "24 cookies are shared equally among 4 friends. How many does each friend get?\n" + gemMathPrompt},
			{Role: "assistant", Content: `The answer is \boxed{7}.`},
			{Role: "user", Content: retryNotice},
		}, true), "6"},
	}
	const seeds = 10000
	reply := regexp.MustCompile(`^[^\n]+\nThe answer is (\\boxed\{[-0-9./]+\}|[-0-9./]+)\.$`)
	var counts [3]int
	var plan []byte
	for seed := range uint64(seeds) {
		p := problems[seed%uint64(len(problems))]
		var rng rand.PCG
		rng.Seed(seed, planStream)
		plan, _ = appendMathPlan(plan[:0], []byte(p.text), &rng)
		if !reply.Match(plan) {
			t.Fatalf("seed %d: reply %q", seed, plan)
		}
		counts[mathOutcome(string(plan), p.want)]++
	}
	right, wrong, unboxed := float64(counts[0])/seeds, float64(counts[1])/seeds, float64(counts[2])/seeds
	t.Logf("right %.4f, wrong %.4f, unboxed %.4f", right, wrong, unboxed)
	if right < 0.65 || right > 0.92 || wrong < 0.05 || wrong > 0.2 || unboxed < 0.03 || unboxed > 0.15 {
		t.Errorf("right %.4f, wrong %.4f, unboxed %.4f: want about 0.80, 0.12, 0.08", right, wrong, unboxed)
	}
}

// FuzzMathPlan checks that any question of a math conversation gets an
// answer, without panicking.
func FuzzMathPlan(f *testing.F) {
	for _, q := range []string{"What is 12 + 7?", "Compute ((2+3)*-(4-1))/5.", "Calculate 1.25 / 0.", "x x (", "7 pizzas are shared equally among 2 people.",
		"99999999999999999999.5 - 1", "What is 2147483647 * 2147483647 + 1?"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		var rng rand.PCG
		plan, ok := appendMathPlan(nil, []byte(nemoMath(q)), &rng)
		if !ok || !strings.Contains(string(plan), "\nThe answer is ") {
			t.Errorf("%q: planned %q, %v", q, plan, ok)
		}
	})
}

// TestMathOverHTTP answers the example items through the chat API, as a
// NeMo Gym math run does, and checks that most replies box the expected
// answer.
func TestMathOverHTTP(t *testing.T) {
	f, err := os.Open("../examples/math/items.jsonl")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	_, url := newTestServer(t, Options{})
	c := newClient(t, url)
	frac := regexp.MustCompile(`^\\frac\{(-?\d+)\}\{(\d+)\}$`)
	sc := bufio.NewScanner(f)
	var counts [3]int
	for seed := 0; sc.Scan(); seed++ {
		var item struct {
			Params struct {
				Input []chat.Message `json:"input"`
			} `json:"responses_create_params"`
			ExpectedAnswer string `json:"expected_answer"`
		}
		if err := json.Unmarshal(sc.Bytes(), &item); err != nil {
			t.Fatal(err)
		}
		status, body := c.post("/v1/chat/completions", map[string]any{
			"messages": item.Params.Input, "max_tokens": 200, "temperature": 1.0, "seed": seed,
		})
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		var r chatResponse
		decodeStrict(t, body, &r)
		counts[mathOutcome(r.Choices[0].Message.Content, frac.ReplaceAllString(item.ExpectedAnswer, "$1/$2"))]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("right %d, wrong %d, unboxed %d", counts[0], counts[1], counts[2])
	if n := counts[0] + counts[1] + counts[2]; n != 64 || counts[0] < n/2 {
		t.Errorf("right %d, wrong %d, unboxed %d: want most of 64 right", counts[0], counts[1], counts[2])
	}
}
