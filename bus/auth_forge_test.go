package bus_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
)

// waitDenied waits until log holds the permission violation the server
// reported for op ("publish" or "subscription") on subject.
func waitDenied(t *testing.T, log *bustest.LogRecorder, op, subject string) {
	t.Helper()
	want := strings.ToLower(fmt.Sprintf("permissions violation for %s to %q", op, subject))
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, l := range log.Lines() {
			if strings.Contains(strings.ToLower(l), want) {
				return nil
			}
		}
		return fmt.Errorf("no %s", want)
	})
}

// fetchAll pulls n messages from c and leaves them unacknowledged.
func fetchAll(t *testing.T, c jetstream.Consumer, n int) []jetstream.Msg {
	t.Helper()
	var msgs []jetstream.Msg
	for len(msgs) < n {
		b, err := c.Fetch(n-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			msgs = append(msgs, m)
		}
		if err := b.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// ackTokens splits a delivered message's acknowledgement subject,
// "$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>".
func ackTokens(t *testing.T, m jetstream.Msg) []string {
	t.Helper()
	tok := strings.Split(m.Reply(), ".")
	if len(tok) != 9 || tok[0] != "$JS" || tok[1] != "ACK" {
		t.Fatalf("acknowledgement subject %q is not in the 9-token format", m.Reply())
	}
	return tok
}

// accountHash is the nats-server's hash of an account name, as the second
// format of acknowledgement subjects carries it.
func accountHash(name string) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := sha256.Sum256([]byte(name))
	h := make([]byte, 8)
	for i := range h {
		h[i] = digits[int(b[i])%len(digits)]
	}
	return string(h)
}

// TestAuthConfForgedAcks checks that no role can acknowledge a message it
// was not delivered: each crafted acknowledgement subject is refused, and
// the messages in flight stay in flight, while the real acknowledgement
// subjects of each role's own deliveries still work.
func TestAuthConfForgedAcks(t *testing.T) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, adminJS := startAuthStreams(t, ctx, subj)
	const n = 3

	// Episodes in flight at the env worker.
	_, trainerJS, _ := connectAs(t, url, "trainer")
	for i := range n {
		id := fmt.Sprintf("e%d", i)
		if err := bus.Publish(ctx, trainerJS, subj.Episodes("run-1", "game:GuessTheNumber-v0"), []byte("episode"), id); err != nil {
			t.Fatal(err)
		}
	}
	_, envJS, _ := connectAs(t, url, "envworker")
	episodes, err := envJS.CreateOrUpdateConsumer(ctx, subj.StreamEpisodes(), jetstream.ConsumerConfig{
		Durable: "envworker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, FilterSubject: subj.EpisodesAll(),
	})
	if err != nil {
		t.Fatal(err)
	}
	eps := fetchAll(t, episodes, n)

	// Steps in flight at the collector, and at a second consumer of the
	// steps stream (the admin's).
	for i := range n {
		if err := bus.Publish(ctx, envJS, subj.Steps("run-1", "g", "e0"), []byte("step"), fmt.Sprintf("e0/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, colJS, _ := connectAs(t, url, "collector")
	steps, err := colJS.CreateOrUpdateConsumer(ctx, subj.StreamSteps(), jetstream.ConsumerConfig{
		Durable: "collector", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, FilterSubject: subj.StepsAll(),
	})
	if err != nil {
		t.Fatal(err)
	}
	sts := fetchAll(t, steps, n)
	audit, err := adminJS.CreateOrUpdateConsumer(ctx, subj.StreamSteps(), jetstream.ConsumerConfig{
		Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	aud := fetchAll(t, audit, n)

	// A group in flight at the trainer.
	if err := bus.Publish(ctx, colJS, subj.Groups("run-1", "game:GuessTheNumber-v0"), []byte("group"), "g0"); err != nil {
		t.Fatal(err)
	}
	groups, err := trainerJS.CreateOrUpdateConsumer(ctx, subj.StreamGroups(), jetstream.ConsumerConfig{
		Durable: "trainer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	grp := fetchAll(t, groups, 1)

	ep, st := ackTokens(t, eps[0]), ackTokens(t, sts[0])
	// with returns the acknowledgement subject of tok with its stream,
	// consumer and delivery count replaced by head's tokens.
	with := func(tok []string, head ...string) string {
		return strings.Join(append(append([]string{"$JS", "ACK"}, head...), tok[5:]...), ".")
	}
	hash := accountHash("ROLLFLEET")
	for _, tc := range []struct {
		name, role, subject string
	}{
		// The first format, with the role's own stream where the delivery
		// count goes: the server reads the stream and consumer before it.
		{"trainer acks an episode through RF_GROUPS", "trainer", with(ep, "RF_EPISODES", "envworker", "RF_GROUPS")},
		{"trainer acks an episode through RF_FAILURES", "trainer", with(ep, "RF_EPISODES", "envworker", "RF_FAILURES")},
		{"collector acks an episode through RF_STEPS", "collector", with(ep, "RF_EPISODES", "envworker", "RF_STEPS")},
		{"env worker acks a step through RF_EPISODES", "envworker", with(st, "RF_STEPS", "collector", "RF_EPISODES")},
		// Another role's real acknowledgement subject, unchanged.
		{"trainer acks an episode", "trainer", eps[0].Reply()},
		{"gateway acks an episode", "gateway", eps[0].Reply()},
		{"llm worker acks an episode", "llmworker", eps[0].Reply()},
		{"env worker acks a group", "envworker", grp[0].Reply()},
		// Another consumer of the role's own stream.
		{"collector acks the audit consumer's step", "collector", aud[0].Reply()},
		// The second format (domain "_" for none, account hash, stream,
		// consumer, five numbers), which this server does not hand out:
		// neither the role's own consumer nor, with the role's stream in
		// the domain slot, another's.
		{"trainer acks an episode in the second format", "trainer", with(ep, "_", hash, "RF_EPISODES", "envworker", ep[4])},
		{"trainer acks an episode with RF_GROUPS as domain", "trainer", with(ep, "RF_GROUPS", hash, "RF_EPISODES", "envworker", ep[4])},
		{"collector acks its own step in the second format", "collector", with(st, "_", hash, "RF_STEPS", "collector", st[4])},
		{"env worker acks its own episode in the second format", "envworker", with(ep, "_", hash, "RF_EPISODES", "envworker", ep[4])},
		// Too few and too many tokens.
		{"env worker acks with 8 tokens", "envworker", strings.Join(ep[:8], ".")},
		{"env worker acks with 10 tokens", "envworker", eps[0].Reply() + ".1"},
		{"env worker acks with 11 tokens", "envworker", eps[0].Reply() + ".1.1"},
		{"collector acks with 10 tokens", "collector", sts[0].Reply() + ".1"},
		{"trainer acks with 8 tokens", "trainer", strings.Join(ackTokens(t, grp[0])[:8], ".")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, _, log := connectAs(t, url, tc.role)
			for _, body := range []string{"", "+TERM"} {
				if err := nc.Publish(tc.subject, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			waitDenied(t, log, "publish", tc.subject)
		})
	}

	// Everything delivered is still in flight.
	for _, c := range []struct {
		name    string
		cons    jetstream.Consumer
		pending int
	}{
		{"envworker", episodes, n}, {"collector", steps, n}, {"audit", audit, n}, {"trainer", groups, 1},
	} {
		info, err := c.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != c.pending {
			t.Errorf("consumer %s: %d messages pending acknowledgement, want %d", c.name, info.NumAckPending, c.pending)
		}
	}
	st0, err := adminJS.Stream(ctx, subj.StreamEpisodes())
	if err != nil {
		t.Fatal(err)
	}
	if got := st0.CachedInfo().State.Msgs; got != n {
		t.Errorf("the episodes work queue holds %d episodes, want %d", got, n)
	}

	// Each role's real acknowledgements of its own deliveries still work.
	for _, m := range append(append(append(eps, sts...), aud...), grp...) {
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack %s: %v", m.Reply(), err)
		}
	}
	if st0, err = adminJS.Stream(ctx, subj.StreamEpisodes()); err != nil {
		t.Fatal(err)
	}
	if got := st0.CachedInfo().State.Msgs; got != 0 {
		t.Errorf("the episodes work queue holds %d episodes after the acks, want 0", got)
	}
	for _, c := range []jetstream.Consumer{episodes, steps, audit, groups} {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 {
			t.Errorf("consumer %s: %d messages pending acknowledgement after the acks", info.Name, info.NumAckPending)
		}
	}
}

// pushRequest is a consumer create request for a push consumer on stream
// that delivers into deliver, in queue group group.
func pushRequest(stream, name, filter, deliver, group string, direct bool) []byte {
	cfg := map[string]any{
		"deliver_subject": deliver, "deliver_group": group, "ack_policy": "explicit",
		"deliver_policy": "all", "filter_subject": filter,
	}
	if direct {
		// An ephemeral consumer as the server makes for a mirror: the work
		// queue's rules (one consumer per subject) do not apply to it.
		cfg = map[string]any{"deliver_subject": deliver, "deliver_group": group, "ack_policy": "none", "direct": true}
	}
	if name != "" {
		cfg["name"] = name
	}
	b, _ := json.Marshal(map[string]any{"stream_name": stream, "config": cfg})
	return b
}

// TestAuthConfConsumerForgery checks that no role can have the server
// deliver stored messages into subjects it may not publish to: consumer
// creation is refused outside the role's own streams, consumer names and
// filters, and the push consumers a role can still create on its own
// streams never reach the LLM workers, which listen in an account of their
// own. Direct gets and consumer deletions outside the role's streams are
// refused as well.
func TestAuthConfConsumerForgery(t *testing.T) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, adminJS := startAuthStreams(t, ctx, subj)
	// One stored message in every stream.
	for _, s := range []string{
		subj.Episodes("run-1", "game:GuessTheNumber-v0"), subj.Steps("run-1", "g", "e0"), subj.Trajectories("run-1", "game:GuessTheNumber-v0"),
		subj.Groups("run-1", "game:GuessTheNumber-v0"), subj.Failures("run-1", messages.FailureEpisode),
	} {
		if err := bus.Publish(ctx, adminJS, s, []byte("stored"), "m"); err != nil {
			t.Fatal(err)
		}
	}
	// An LLM worker in its queue group, counting what it is sent.
	llmNC, _, _ := connectAs(t, url, "llmworker")
	llmGot := make(chan string, 64)
	for _, s := range []string{subj.Generate(), subj.Tokenize(), subj.TokenizeChat(), subj.Detokenize(), subj.ModelInfo()} {
		if _, err := llmNC.QueueSubscribe(s, "llm", func(m *nats.Msg) {
			select {
			case llmGot <- m.Subject:
			default:
			}
			_ = m.Respond([]byte("reply"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := llmNC.Flush(); err != nil {
		t.Fatal(err)
	}
	// The env worker's consumer, as it makes it.
	_, envJS, _ := connectAs(t, url, "envworker")
	if _, err := envJS.CreateOrUpdateConsumer(ctx, subj.StreamEpisodes(), jetstream.ConsumerConfig{
		Durable: "envworker", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj.EpisodesAll(),
	}); err != nil {
		t.Fatal(err)
	}

	generate := subj.Generate()
	t.Run("refused API requests", func(t *testing.T) {
		for _, tc := range []struct {
			role, subject string
		}{
			// Consumers on the role's stream filtered on another stream's
			// subjects, or under a name the role does not own.
			{"envworker", "$JS.API.CONSUMER.CREATE.RF_EPISODES.evil.rf.steps.>"},
			{"envworker", "$JS.API.CONSUMER.CREATE.RF_EPISODES.evil.rf.llm.generate"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_STEPS.evil"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_STEPS.evil.rf.steps.>"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_STEPS.collector"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_STEPS.collector.rf.episodes.>"},
			{"trainer", "$JS.API.CONSUMER.CREATE.RF_FAILURES.evil.rf.episodes.>"},
			{"trainer", "$JS.API.CONSUMER.CREATE.RF_GROUPS.evil.rf.trajectories.>"},
			// The older request forms: a nameless consumer, and a durable
			// named in the subject.
			{"envworker", "$JS.API.CONSUMER.CREATE.RF_EPISODES"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_STEPS"},
			{"trainer", "$JS.API.CONSUMER.CREATE.RF_FAILURES"},
			{"envworker", "$JS.API.CONSUMER.DURABLE.CREATE.RF_EPISODES.evil"},
			{"collector", "$JS.API.CONSUMER.DURABLE.CREATE.RF_STEPS.collector"},
			{"trainer", "$JS.API.CONSUMER.DURABLE.CREATE.RF_FAILURES.evil"},
			// Consumers on another role's stream.
			{"envworker", "$JS.API.CONSUMER.CREATE.RF_STEPS.evil"},
			{"collector", "$JS.API.CONSUMER.CREATE.RF_EPISODES.evil"},
			{"trainer", "$JS.API.CONSUMER.CREATE.RF_EPISODES.evil"},
			{"trainer", "$JS.API.CONSUMER.CREATE.RF_STEPS.evil.rf.steps.>"},
			{"gateway", "$JS.API.CONSUMER.CREATE.RF_TRAJECTORIES.evil"},
			{"gateway", "$JS.API.CONSUMER.CREATE.RF_FAILURES.evil.rf.failures.>"},
			{"llmworker", "$JS.API.CONSUMER.CREATE.RF_EPISODES.evil"},
			// Deleting or pulling from another role's consumer.
			{"envworker", "$JS.API.CONSUMER.DELETE.RF_EPISODES.envworker"},
			{"collector", "$JS.API.CONSUMER.DELETE.RF_STEPS.collector"},
			{"trainer", "$JS.API.CONSUMER.DELETE.RF_EPISODES.envworker"},
			{"collector", "$JS.API.CONSUMER.MSG.NEXT.RF_STEPS.audit"},
			{"collector", "$JS.API.CONSUMER.INFO.RF_STEPS.audit"},
			{"trainer", "$JS.API.CONSUMER.MSG.NEXT.RF_EPISODES.envworker"},
			// Reading other streams' messages directly.
			{"envworker", "$JS.API.DIRECT.GET.RF_TRAJECTORIES"},
			{"envworker", "$JS.API.STREAM.MSG.GET.RF_GROUPS"},
			{"collector", "$JS.API.STREAM.MSG.GET.RF_EPISODES"},
			{"collector", "$JS.API.DIRECT.GET.RF_EPISODES.rf.episodes.>"},
			{"trainer", "$JS.API.STREAM.MSG.GET.RF_STEPS"},
			{"trainer", "$JS.API.DIRECT.GET.RF_STEPS"},
			{"gateway", "$JS.API.STREAM.MSG.GET.RF_TRAJECTORIES"},
			{"gateway", "$JS.API.DIRECT.GET.RF_FAILURES"},
		} {
			t.Run(tc.role+" "+tc.subject, func(t *testing.T) {
				nc, _, log := connectAs(t, url, tc.role)
				tok := strings.Split(tc.subject, ".")
				stream, name := tok[len(tok)-1], "evil"
				if len(tok) > 5 {
					stream, name = tok[4], tok[5]
					if tok[3] == "DURABLE" {
						stream, name = tok[5], tok[6]
					}
				}
				body := pushRequest(stream, name, "", generate, "llm", false)
				if err := nc.PublishRequest(tc.subject, nc.NewRespInbox(), body); err != nil {
					t.Fatal(err)
				}
				waitDenied(t, log, "publish", tc.subject)
			})
		}
	})

	// The consumers a role may create on its own streams can still be push
	// consumers (nats-server checks no permission on the deliver subject),
	// but one delivers only while a subscription on exactly its deliver
	// subject exists, and in the account of the streams none does on the
	// LLM requests: such a consumer stays unbound and sends nothing.
	t.Run("push consumers into the LLM requests stay unbound", func(t *testing.T) {
		for _, tc := range []struct {
			role, stream, name, filter string
			direct                     bool
		}{
			{"trainer", subj.StreamFailures(), "pushy", "", false},
			{"trainer", subj.StreamTrajectories(), "pushy", subj.TrajectoriesAll(), false},
			{"trainer", subj.StreamGroups(), "pushy", "", true},
			// The work queue takes no second consumer of the same subjects,
			// except a direct (mirror) consumer.
			{"envworker", subj.StreamEpisodes(), "pushy", "", true},
			// The collector's consumer before the collector has made it.
			{"collector", subj.StreamSteps(), "collector", subj.StepsAll(), false},
		} {
			for _, deliver := range []string{subj.Generate(), subj.Tokenize(), subj.TokenizeChat(), subj.Detokenize(), subj.ModelInfo()} {
				name := fmt.Sprintf("%s-%s", tc.name, strings.ReplaceAll(deliver, ".", "-"))
				if tc.role == "collector" {
					name = tc.name
				}
				t.Run(fmt.Sprintf("%s on %s into %s", tc.role, tc.stream, deliver), func(t *testing.T) {
					nc, _, log := connectAs(t, url, tc.role)
					api := fmt.Sprintf("$JS.API.CONSUMER.CREATE.%s.%s", tc.stream, name)
					if tc.filter != "" {
						api += "." + tc.filter
					}
					rep, err := nc.RequestWithContext(ctx, api, pushRequest(tc.stream, name, tc.filter, deliver, "llm", tc.direct))
					if err != nil {
						t.Fatalf("create: %v (%q)", err, log.Lines())
					}
					var resp struct {
						Error *struct {
							Description string `json:"description"`
						} `json:"error"`
						PushBound bool `json:"push_bound"`
						Name      string
					}
					if err := json.Unmarshal(rep.Data, &resp); err != nil {
						t.Fatal(err)
					}
					if resp.Error != nil {
						t.Logf("refused by the server: %s", resp.Error.Description)
						return
					}
					if resp.PushBound {
						t.Errorf("push consumer %s on %s delivers into %s", name, tc.stream, deliver)
					}
					if err := adminJS.DeleteConsumer(ctx, tc.stream, name); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	})

	t.Run("a pull consumer cannot be made a push consumer", func(t *testing.T) {
		_, colJS, _ := connectAs(t, url, "collector")
		if _, err := colJS.CreateOrUpdateConsumer(ctx, subj.StreamSteps(), jetstream.ConsumerConfig{
			Durable: "collector", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj.StepsAll(),
		}); err != nil {
			t.Fatal(err)
		}
		nc, _, _ := connectAs(t, url, "collector")
		api := "$JS.API.CONSUMER.CREATE.RF_STEPS.collector." + subj.StepsAll()
		rep, err := nc.RequestWithContext(ctx, api, pushRequest(subj.StreamSteps(), "collector", subj.StepsAll(), generate, "llm", false))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(rep.Data), "can not update pull consumer to push based") {
			t.Errorf("update to push: %s", rep.Data)
		}
	})

	// The LLM worker got nothing but what it was asked, through its own
	// account's import, by the gateway.
	gwNC, _, _ := connectAs(t, url, "gateway")
	if rep, err := gwNC.RequestWithContext(ctx, generate, []byte("request")); err != nil || string(rep.Data) != "reply" {
		t.Fatalf("gateway: generate: %v", err)
	}
	if got := <-llmGot; got != generate {
		t.Errorf("the LLM worker was first sent %s", got)
	}
	if n := len(llmGot); n != 0 {
		t.Errorf("the LLM worker was sent %d more messages", n)
	}
	// No consumer was left behind but the env worker's and the collector's.
	for _, stream := range []string{subj.StreamEpisodes(), subj.StreamSteps(), subj.StreamTrajectories(), subj.StreamGroups(), subj.StreamFailures()} {
		st, err := adminJS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		names := st.ConsumerNames(ctx)
		for name := range names.Name() {
			if name != "envworker" && name != "collector" {
				t.Errorf("stream %s has consumer %s", stream, name)
			}
		}
		if err := names.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
