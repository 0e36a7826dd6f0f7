package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/service"
	"github.com/rollfleet/rollfleet/toyllm"
)

// TestFleetIsDiscoverable starts a standing fleet and finds its actors from
// a plain NATS client through the service API: PING and INFO per kind,
// STATS with the actor's status, and the status endpoint.
func TestFleetIsDiscoverable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := fleet.StartStanding(ctx, fleet.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	nc, err := f.Connect("observer")
	if err != nil {
		t.Fatal(err)
	}
	subj := messages.NewSubjects("")
	for _, kind := range []string{service.KindEnv, service.KindLLM, service.KindCollector} {
		name := service.NamePrefix + kind
		t.Run(kind, func(t *testing.T) {
			// A worker registers once it runs, which may be a moment after
			// the fleet is up.
			bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
				_, err := nc.Request("$SRV.PING."+name, nil, time.Second)
				return err
			})
			var ping micro.Ping
			request(t, nc, "$SRV.PING."+name, &ping)
			if ping.Name != name || ping.Type != micro.PingResponseType || ping.ID == "" || ping.Version == "" || ping.Metadata["worker_id"] == "" {
				t.Errorf("PING: %+v", ping)
			}
			var info micro.Info
			request(t, nc, "$SRV.INFO."+name+"."+ping.ID, &info)
			i := slices.IndexFunc(info.Endpoints, func(e micro.EndpointInfo) bool { return e.Name == "status" })
			if info.Name != name || info.Description == "" || i < 0 || info.Endpoints[i].Subject != service.StatusSubject(subj, kind) {
				t.Errorf("INFO: %+v", info)
			}
			// A worker knows the policy state once it runs.
			var status service.Status
			bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
				status = service.Status{}
				request(t, nc, service.StatusSubject(subj, kind), &status)
				if kind != service.KindCollector && status.Policy == nil {
					return fmt.Errorf("status of a %s without the policy state: %+v", kind, status)
				}
				return nil
			})
			if status.Kind != kind || status.ID != ping.Metadata["worker_id"] || status.Stats == nil {
				t.Errorf("status: %+v", status)
			}
			checkSnakeCase(t, nc, service.StatusSubject(subj, kind), map[string]string{
				service.KindEnv: "in_flight", service.KindCollector: "full_streams", service.KindLLM: "detokenize",
			}[kind])
			if kind == service.KindLLM && (len(status.Endpoints) != 1 || !status.Endpoints[0].Healthy) {
				t.Errorf("LLM worker's endpoints: %+v", status.Endpoints)
			}
			// micro counts a request once its handler has returned, which
			// may be just after the requester got the answer.
			var status0 *micro.EndpointStats
			bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				var stats micro.Stats
				request(t, nc, "$SRV.STATS."+name, &stats)
				i := slices.IndexFunc(stats.Endpoints, func(e *micro.EndpointStats) bool { return e.Name == "status" })
				if i < 0 || stats.Endpoints[i].NumRequests < 1 {
					return fmt.Errorf("STATS: %+v", stats)
				}
				status0 = stats.Endpoints[i]
				return nil
			})
			var data service.Status
			if err := json.Unmarshal(status0.Data, &data); err != nil || data.Kind != kind {
				t.Errorf("STATS data %s: %v", status0.Data, err)
			}
		})
	}
	// Every instance answers the bare PING; a fleet has one of each kind.
	var pong micro.Ping
	request(t, nc, "$SRV.PING", &pong)
	if pong.Name == "" {
		t.Errorf("PING: %+v", pong)
	}
}

// checkSnakeCase checks that the status answer on subject names its
// counters in snake_case, want among them, like the rest of the answer.
func checkSnakeCase(t *testing.T, nc *nats.Conn, subject, want string) {
	t.Helper()
	var raw struct {
		Stats map[string]json.RawMessage `json:"stats"`
	}
	request(t, nc, subject, &raw)
	if _, ok := raw.Stats[want]; !ok {
		t.Errorf("status stats have no %q: %v", want, slices.Collect(maps.Keys(raw.Stats)))
	}
	for k := range raw.Stats {
		if strings.ToLower(k) != k || strings.Contains(k, "-") {
			t.Errorf("status stats name %q is not snake_case", k)
		}
	}
}

// request sends a request and decodes its JSON answer into v.
func request(t *testing.T, nc *nats.Conn, subject string, v any) {
	t.Helper()
	m, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("%s: %v in %s", subject, err, m.Data)
	}
}

func TestVersion(t *testing.T) {
	if v := service.Version(); v == "" {
		t.Fatal("no version")
	}
}

// TestLLMRequestsAreServiceEndpoints: an LLM worker's requests are endpoints
// of its service, in its queue group, so STATS ("nats micro stats") counts
// the generate requests it served, not just the status requests.
func TestLLMRequestsAreServiceEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := bustest.RunServer(t)
	url, stopModel, err := toyllm.New(toyllm.Options{}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopModel)
	subj := messages.NewSubjects("")
	log := slog.New(slog.DiscardHandler)
	w, err := llm.New(bustest.Connect(t, s, "llmworker"), llm.Options{Endpoints: []string{url}, Subjects: subj, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.RegisterLLM(bustest.Connect(t, s, "llmworker-svc"), subj, w, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	stop, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nc := bustest.Connect(t, s, "observer")
	const n = 7
	prompt := toyllm.Tokenizer{}.Encode("Guess the number between 1 and 20.")
	for i := range n {
		data, err := messages.Marshal(&messages.GenerateRequest{V: messages.Version, EpisodeID: fmt.Sprintf("e%d", i), Prompt: prompt, MaxTokens: 16})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.RequestWithContext(ctx, subj.Generate(), data)
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := messages.Decode[messages.GenerateReply](m.Data); err != nil || rep.Error != "" {
			t.Fatalf("generate %d: %v %+v", i, err, rep)
		}
	}
	var stats micro.Stats
	request(t, nc, "$SRV.STATS."+service.NamePrefix+service.KindLLM, &stats)
	i := slices.IndexFunc(stats.Endpoints, func(e *micro.EndpointStats) bool { return e.Name == "generate" })
	if i < 0 {
		t.Fatalf("STATS has no generate endpoint: %+v", stats.Endpoints)
	}
	if e := stats.Endpoints[i]; e.NumRequests != n || e.Subject != subj.Generate() || e.QueueGroup != "llm" {
		t.Errorf("generate endpoint: %d requests on %s in queue group %q, want %d on %s in llm", e.NumRequests, e.Subject, e.QueueGroup, n, subj.Generate())
	}
}
