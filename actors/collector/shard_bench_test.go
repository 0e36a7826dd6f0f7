package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// BenchmarkShardedDrain stores the steps of 4,096 four-turn episodes (1,024
// groups of 4) with no collector running, then starts 1, 2 or 4 collectors,
// each on its shard, and reports how fast they decide them all: the
// collector alone as the bottleneck, the embedded server in the same
// process.
//
//	go test -run '^$' -bench ShardedDrain -benchtime 3x ./actors/collector/
func BenchmarkShardedDrain(b *testing.B) {
	for _, shards := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { benchmarkDrain(b, shards) })
	}
}

func benchmarkDrain(b *testing.B, shards int) {
	const groups, size, turns = 1024, 4, 4
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		f := newFixture(b, bus.ServerOptions{})
		for g := range groups {
			group := fmt.Sprintf("drain-g%04d", g)
			for i := range size {
				req := request(fmt.Sprintf("%s-%d", group, i), group, int32(i), size)
				for tn := range turns {
					ev := &messages.StepEvent{V: messages.Version, EpisodeID: req.EpisodeID, Turn: int32(tn),
						ActionTokens: messages.Tokens{5, 6, 7, 8}, ActionLogprobs: messages.Logprobs{-1, -0.5, -0.25, -2},
						FeedbackTokens: messages.Tokens{9, 10}, FinishReason: "stop"}
					if tn == 0 {
						ev.Episode, ev.PromptTokens = req, messages.Tokens(make([]int32, 64))
					}
					if tn == turns-1 {
						ev.Done, ev.Reward, ev.Score = true, float64(i%2), float64(i%2)
					}
					data, err := messages.Marshal(ev)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := f.js.PublishAsync(f.subj.Steps(req.RunID, group, req.EpisodeID), data); err != nil {
						b.Fatal(err)
					}
				}
			}
			if g%256 == 0 {
				<-f.js.PublishAsyncComplete()
			}
		}
		<-f.js.PublishAsyncComplete()
		b.StartTimer()
		start := time.Now()
		var colls []*running
		for i := range shards {
			colls = append(colls, f.start(b, Options{Shard: Shard{Index: i, Count: shards}}))
		}
		bustest.CheckFor(b, 5*time.Minute, 5*time.Millisecond, func() error {
			var trajs uint64
			for _, c := range colls {
				trajs += c.Stats().Trajectories
			}
			if trajs != groups*size {
				return fmt.Errorf("%d of %d trajectories", trajs, groups*size)
			}
			return nil
		})
		elapsed += time.Since(start)
		b.StopTimer()
		for _, c := range colls {
			c.stop()
		}
	}
	b.ReportMetric(float64(b.N*groups*size)/elapsed.Seconds(), "episodes/s")
	b.ReportMetric(float64(b.N*groups*size*turns)/elapsed.Seconds(), "steps/s")
}
