package envs_test

import (
	"fmt"
	"strings"

	"github.com/rollfleet/rollfleet/envs"
)

// A binary search through one seeded episode of the easy variant.
func ExampleNew() {
	env, err := envs.New("game:GuessTheNumber-v0-easy", nil)
	if err != nil {
		panic(err)
	}
	obs, info := env.Reset(envs.NewRNG(42))
	fmt.Println(strings.Split(obs, "\n")[1])
	fmt.Println(info["suffix"])
	lo, hi := 1, 10
	for {
		guess := (lo + hi) / 2
		r := env.Step(fmt.Sprintf(`My guess is \boxed{%d}.`, guess))
		fmt.Println(r.Observation, r.Reward, r.Done())
		if r.Done() {
			break
		}
		if strings.Contains(r.Observation, "higher") {
			lo = guess + 1
		} else {
			hi = guess - 1
		}
	}
	// Output:
	// You have to guess the number between 1 and 10 (inclusive) within 4 turns.
	// Enter your next guess.
	// At turn 1, you guessed 5, and the target number is lower than 5. 0 false
	// At turn 2, you guessed 2, and the target number is higher than 2. 0 false
	// At turn 3, you guessed 3, and the target number is higher than 3. 0 false
	// Congratulations! You guessed the correct number 4 in 4 turns. 1 true
}
