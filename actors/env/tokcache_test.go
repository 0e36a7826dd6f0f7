package env

import (
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestFeedbackTokenizedOnce plays the same GuessTheNumber episode several
// times, one after another: each feedback text crosses NATS to be tokenized
// once, and its later turns are served from the worker's own cache with the
// same tokens (the trajectories are checked as usual).
func TestFeedbackTokenizedOnce(t *testing.T) {
	const episodes = 4
	s := bustest.RunServer(t)
	model := httptest.NewServer(toyllm.New(toyllm.Options{}).Handler())
	t.Cleanup(model.Close)
	js, coll, _, start := resumeHarness(t, s, model.URL)
	subj := messages.NewSubjects("")
	// resumeHarness's LLM worker is ready: the tap cannot stand in for it.
	var mu sync.Mutex
	asked := map[string]int{} // feedback text → tokenize requests
	tap := bustest.Connect(t, s, "tap")
	if _, err := tap.Subscribe(subj.Tokenize(), func(m *nats.Msg) {
		req, err := messages.Decode[messages.TokenizeRequest](m.Data)
		if err != nil || req.Text == "" {
			return
		}
		mu.Lock()
		asked[req.Text]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, s, "env", Options{Concurrency: 1}, start)
	submitEpisodes(t, js, episodes, messages.ObsChat)
	checkOutcomes(t, js, subj, coll, episodes)

	mu.Lock()
	defer mu.Unlock()
	requests := 0
	for text, n := range asked {
		if n != 1 {
			t.Errorf("feedback %q tokenized %d times through NATS, want once", text, n)
		}
		requests += n
	}
	// Every turn but an episode's last has feedback; the episodes are the
	// same game played alike, so most of it repeats.
	feedback := int(w.Stats().Turns) - episodes
	if requests == 0 || requests >= feedback {
		t.Fatalf("%d feedback tokenizations through NATS for %d feedback turns: the cache served none", requests, feedback)
	}
}
