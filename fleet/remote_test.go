package fleet

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// A GuessTheNumber served over HTTP (the Gymnasium-style protocol) gives
// the same trajectories as the native env: same seeds, same games, same
// samples from the stand-in, token for token.
func TestRemoteEnvMatchesNative(t *testing.T) {
	const native = "game:GuessTheNumber-v0-easy"
	h, err := remoteenv.GymHandler(native)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	run := func(env string, remote []remoteenv.Config) []*messages.Trajectory {
		var out bytes.Buffer
		seed := uint64(21)
		sum, err := Run(context.Background(), Options{
			Env: env, Episodes: 64, ObsStyle: messages.ObsConcat, Seed: &seed, MaxTokens: 64, Remote: remote,
			Out: &out, DataDir: filepath.Join(t.TempDir(), "nats"),
		})
		if err != nil || sum.Trajectories != 64 {
			t.Fatalf("%s: %v (%s)", env, err, sum)
		}
		trajs := readTrajectories(t, out.Bytes())
		// Runs name their episodes differently; the index is the order.
		slices.SortFunc(trajs, func(a, b *messages.Trajectory) int { return strings.Compare(a.EpisodeID, b.EpisodeID) })
		return trajs
	}
	local := run(native, nil)
	remote := run("gym:gtn", []remoteenv.Config{{ID: "gym:gtn", Kind: remoteenv.KindGym, URL: srv.URL}})
	for i := range local {
		a, b := local[i], remote[i]
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.StepRewards, b.StepRewards) || a.Success != b.Success || len(a.Samples) != len(b.Samples) {
			t.Fatalf("episode %d: native rewards %v, remote %v", i, a.StepRewards, b.StepRewards)
		}
		for j := range a.Samples {
			if !slices.Equal(a.Samples[j].ObservationTokens, b.Samples[j].ObservationTokens) ||
				!slices.Equal(a.Samples[j].RolloutLogProbs, b.Samples[j].RolloutLogProbs) {
				t.Fatalf("episode %d turn %d: tokens differ", i, j)
			}
		}
	}
}

// A remote env that fails ends its episodes as failure records naming it;
// nothing is lost.
func TestRemoteEnvFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "env crashed", http.StatusInternalServerError)
	}))
	defer srv.Close()
	var failures bytes.Buffer
	seed := uint64(1)
	sum, err := Run(context.Background(), Options{
		Env: "gym:broken", Episodes: 8, Seed: &seed, FailuresOut: &failures,
		Remote:  []remoteenv.Config{{ID: "gym:broken", Kind: remoteenv.KindGym, URL: srv.URL}},
		DataDir: filepath.Join(t.TempDir(), "nats"),
	})
	if err != nil || sum.Failures != 8 || sum.Trajectories != 0 {
		t.Fatalf("want 8 failures: %v (%s)", err, sum)
	}
	if n := strings.Count(failures.String(), "gym:broken: /reset: HTTP 500: env crashed"); n != 8 {
		t.Fatalf("%d failure records name the remote error:\n%s", n, failures.String())
	}
}
