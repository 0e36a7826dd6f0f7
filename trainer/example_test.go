package trainer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/trainer"
)

// A trainer submits a batch of 8 GuessTheNumber episodes, 4 samples per
// prompt, and reads its groups, acknowledging each once it has used it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "trainer-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// A fleet in this process; a trainer would connect to its fleet's NATS.
	f, err := fleet.StartStanding(ctx, fleet.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	nc, err := f.Connect("trainer")
	if err != nil {
		panic(err)
	}
	c, err := trainer.New(nc, trainer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	seed := uint64(1)
	id, err := c.Submit(ctx, trainer.Batch{Spec: &trainer.Spec{Env: "game:GuessTheNumber-v0-easy", Episodes: 8, N: 4, Seed: &seed}})
	if err != nil {
		panic(err)
	}
	groups, samples := 0, 0
	for res, err := range c.Groups(ctx, id) {
		if err != nil {
			panic(err)
		}
		groups++
		samples += len(res.Value.Trajectories) // train on them here
		if err := res.Ack(ctx); err != nil {
			panic(err)
		}
	}
	if err := c.Close(ctx, id); err != nil {
		panic(err)
	}
	fmt.Println("groups:", groups, "samples:", samples)
	// Output: groups: 2 samples: 8
}
