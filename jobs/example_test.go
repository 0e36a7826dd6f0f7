package jobs_test

import (
	"fmt"

	"github.com/rollfleet/rollfleet/jobs"
)

// A job of four GuessTheNumber episodes, two samples per prompt: a group
// of two samples of the same game instance per prompt.
func ExampleNew() {
	seed := uint64(7)
	plan, err := jobs.New(jobs.Options{RunID: "demo", Env: "game:GuessTheNumber-v0", Episodes: 4, NSamples: 2, Seed: &seed}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range plan.Len() {
		r, _ := plan.Request(i)
		fmt.Println(r.EpisodeID, r.GroupID, r.SampleIndex, r.GroupSize)
	}
	// Output:
	// demo-000000 demo-g000000 0 2
	// demo-000001 demo-g000000 1 2
	// demo-000002 demo-g000001 0 2
	// demo-000003 demo-g000001 1 2
}
