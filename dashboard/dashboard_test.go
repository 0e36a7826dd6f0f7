package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/fleetstatus"
	"github.com/rollfleet/rollfleet/messages"
)

// eventReader reads Server-Sent Events from an HTTP response body.
type eventReader struct{ r *bufio.Reader }

// next returns the next event's name and data.
func (e *eventReader) next() (name, data string, err error) {
	for {
		line, err := e.r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && data != "":
			return name, data, nil
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// TestWatchAndEvents runs the dashboard against a real NATS server: outcomes
// published into the work-queue streams are counted without being consumed
// (the streams still hold them), a worker answering status requests and
// the streams' backlog show up, the /events stream (over real HTTP) carries
// the snapshots as they change and ends when the dashboard closes, and
// /api/snapshot agrees.
func TestWatchAndEvents(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s, "dashboard")
	js := bustest.JetStream(t, s, "publisher")
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	worker := bustest.Connect(t, s, "worker")
	if _, err := control.ServeStatus(worker, subj, func() messages.WorkerStatus {
		return messages.WorkerStatus{V: messages.Version, Kind: messages.WorkerLLM, ID: "llm-1", Version: 3, InFlight: 7}
	}); err != nil {
		t.Fatal(err)
	}

	d := New(Options{Poll: 50 * time.Millisecond, Push: 50 * time.Millisecond})
	stop, err := d.Watch(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := &eventReader{r: bufio.NewReader(resp.Body)}
	name, data, err := events.next()
	if err != nil || name != "snapshot" {
		t.Fatalf("first event %q, %v", name, err)
	}
	var first Snapshot
	if err := json.Unmarshal([]byte(data), &first); err != nil || first.Totals.Episodes != 0 {
		t.Fatalf("first snapshot %+v, %v", first.Totals, err)
	}

	const trajectories, failures = 12, 3
	for i := range trajectories {
		b, err := messages.Marshal(traj("run-1", fmt.Sprintf("ep-%d", i), "env-a", 2, i < 9, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subj.Trajectories("run-1", "env-a"), b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range failures {
		b, err := messages.Marshal(&messages.Failure{V: messages.Version, RunID: "run-1", EpisodeID: fmt.Sprintf("f-%d", i),
			Env: "env-a", Kind: messages.FailureEpisode, Reason: fmt.Sprintf("env error %d", i), Time: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subj.Failures("run-1", messages.FailureEpisode), b); err != nil {
			t.Fatal(err)
		}
	}

	// Read snapshots until everything shows: the counts, the worker and the
	// backlog of the streams that hold the records.
	var last Snapshot
	check := func(s Snapshot) error {
		switch {
		case s.Totals.Trajectories != trajectories || s.Totals.Failures != failures || s.Totals.Successes != 9:
			return fmt.Errorf("totals %+v", s.Totals)
		case len(s.Fleet.Workers) != 1 || s.Fleet.Workers[0].ID != "llm-1" || s.Fleet.Workers[0].InFlight != 7 || s.Fleet.Workers[0].Health != fleetstatus.HealthOK:
			return fmt.Errorf("workers %+v", s.Fleet.Workers)
		case s.Fleet.Policy == nil:
			return fmt.Errorf("no policy state (%s)", s.Fleet.PolicyError)
		}
		backlog := map[string]uint64{}
		for _, st := range s.Fleet.Streams {
			backlog[st.Name] = st.Messages
		}
		if backlog[subj.StreamTrajectories()] != trajectories || backlog[subj.StreamFailures()] != failures {
			return fmt.Errorf("backlog %v (%s)", backlog, s.Fleet.StreamsError)
		}
		return nil
	}
	for {
		_, data, err := events.next()
		if err != nil {
			t.Fatalf("event stream: %v; last snapshot did not show everything: %v", err, check(last))
		}
		last = Snapshot{}
		if err := json.Unmarshal([]byte(data), &last); err != nil {
			t.Fatal(err)
		}
		if check(last) == nil {
			break
		}
	}
	if len(last.FailureKinds) != 1 || last.FailureKinds[0] != (KindCount{Kind: messages.FailureEpisode, Count: failures}) ||
		len(last.LatestFailures) != failures || last.LatestFailures[0].Reason != "env error 2" {
		t.Fatalf("failures %+v, latest %+v", last.FailureKinds, last.LatestFailures)
	}

	// The snapshot endpoint says the same.
	var snap Snapshot
	getJSON(t, srv.URL+"/api/snapshot?range=long", &snap)
	if snap.Totals.Trajectories != trajectories || snap.Series.Range != RangeLong || snap.Series.StepSeconds != 60 {
		t.Fatalf("api snapshot %+v %+v", snap.Totals, snap.Series)
	}

	// Closing the dashboard ends the stream.
	d.Close()
	for {
		if _, _, err := events.next(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v, want EOF", err)
			}
			break
		}
	}

	// Watching took nothing: the streams still hold every record.
	stop()
	for name, want := range map[string]uint64{subj.StreamTrajectories(): trajectories, subj.StreamFailures(): failures} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got != want {
			t.Fatalf("%s holds %d messages, want %d", name, got, want)
		}
	}
}

// TestWatchRun: with Options.Run, only that run's outcomes count.
func TestWatchRun(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s, "dashboard")
	pub := bustest.Connect(t, s, "publisher")
	subj := messages.NewSubjects("")
	d := New(Options{Run: "mine", Poll: time.Hour})
	stop, err := d.Watch(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, run := range []string{"mine", "theirs", "mine"} {
		b, err := messages.Marshal(traj(run, "ep-"+run+fmt.Sprint(time.Now().UnixNano()), "e", 1, true, 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(subj.Trajectories(run, "e"), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(subj.Trajectories("mine", "e"), []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if tot := d.Snapshot(RangeRecent).Totals; tot.Trajectories != 2 || tot.Malformed != 1 {
			return fmt.Errorf("totals %+v", tot)
		}
		return nil
	})
}

// TestPage: the page and its files are served from the binary with a
// policy that lets it load nothing from elsewhere, and refer only to
// files of its own.
func TestPage(t *testing.T) {
	d := New(Options{})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	page := get(t, srv.URL+"/")
	for _, ref := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		switch u := ref[1]; {
		case u == "data:,":
		case strings.Contains(u, ":") || strings.HasPrefix(u, "/"):
			t.Fatalf("the page refers to %q, not a file of its own", u)
		default:
			get(t, srv.URL+"/"+u)
		}
	}
	for _, id := range []string{"episodes", "trajectories", "failures", "success-rate", "mean-reward", "turns", "tokens", "workers", "streams"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Fatalf("no element #%s", id)
		}
	}
	resp, err := http.Get(srv.URL + "/app.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, url)), v); err != nil {
		t.Fatal(err)
	}
}
