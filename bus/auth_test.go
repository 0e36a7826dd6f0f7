package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/messages"
)

// authConf is the example configuration the tests start the server from.
const authConf = "../examples/nats/auth.conf"

// passwords are the example configuration's placeholder passwords.
var passwords = bustest.ExamplePasswords

// startAuthServer starts a server from the example configuration, on a free
// port and a temporary store, and returns it with its URL.
func startAuthServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	return startConfigServer(t, authConf)
}

func startConfigServer(t *testing.T, conf string) (*server.Server, string) {
	t.Helper()
	s := bustest.RunListeningServer(t, bus.ServerOptions{ConfigFile: conf, Port: -1, DataDir: t.TempDir()})
	return s, s.ClientURL()
}

// startAuthStreams starts a server with the example configuration, as
// startAuthServer does, and makes the fleet's streams as its admin (every
// role only looks them up): the server's URL and the admin's JetStream.
func startAuthStreams(t *testing.T, ctx context.Context, subj messages.Subjects) (string, jetstream.JetStream) {
	t.Helper()
	_, url := startAuthServer(t)
	_, adminJS, _ := connectAs(t, url, "admin")
	if err := bus.EnsureStreams(ctx, adminJS, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return url, adminJS
}

// connectAs connects to url as a user of the example configuration. Error
// records of the connection (permission violations among them) go to the
// returned log.
func connectAs(t *testing.T, url, user string) (*nats.Conn, jetstream.JetStream, *bustest.LogRecorder) {
	t.Helper()
	log := &bustest.LogRecorder{Min: slog.LevelError}
	nc, err := bus.Connect(url, user, slog.New(log), bus.ConnectOptions{User: user, Password: passwords[user]})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	if !nc.IsConnected() {
		t.Fatalf("connect as %s: not connected", user)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, log
}

func TestConnectWrongPasswordFailsFast(t *testing.T) {
	_, url := startAuthServer(t)
	for _, tc := range []struct {
		name string
		url  string
		opts bus.ConnectOptions
		want string
	}{
		{"wrong password", url, bus.ConnectOptions{User: "envworker", Password: "not-the-password"}, `authorization failed for user "envworker"`},
		{"unknown user", url, bus.ConnectOptions{User: "mallory", Password: "x"}, `authorization failed for user "mallory"`},
		{"no credentials", url, bus.ConnectOptions{}, "authorization failed for a client without credentials (the server requires them)"},
		{"wrong token", url, bus.ConnectOptions{Token: "t0ken"}, "authorization failed for the token given"},
		{"password in the URL", strings.Replace(url, "nats://", "nats://trainer:secret-in-url@", 1), bus.ConnectOptions{}, `authorization failed for user "trainer" (from the URL)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := bus.Connect(tc.url, "test", nil, tc.opts)
			if err == nil {
				nc.Close()
				t.Fatal("connected with wrong credentials")
			}
			if !errors.Is(err, bus.ErrAuthFailed) || !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("error %q is not ErrAuthFailed wrapping nats.ErrAuthorization", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret-in-url") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestConnectRightPassword(t *testing.T) {
	_, url := startAuthServer(t)
	for user := range passwords {
		nc, _, _ := connectAs(t, url, user)
		if err := nc.Flush(); err != nil {
			t.Errorf("%s: %v", user, err)
		}
	}
}

func TestConnectUnreachableServerKeepsRetrying(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	nc, err := bus.Connect("nats://"+addr, "test", nil, bus.ConnectOptions{User: "u", Password: "p"})
	if err != nil {
		t.Fatalf("an unreachable server should be retried, got %v", err)
	}
	defer nc.Close()
	if nc.IsClosed() || nc.IsConnected() {
		t.Fatalf("status %v, want reconnecting", nc.Status())
	}
}

func TestConnectOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts bus.ConnectOptions
	}{
		{"user and token", bus.ConnectOptions{User: "u", Password: "p", Token: "t"}},
		{"token and creds", bus.ConnectOptions{Token: "t", CredsFile: "testdata/user.creds"}},
		{"user without password", bus.ConnectOptions{User: "u"}},
		{"password without user", bus.ConnectOptions{Password: "p"}},
		{"certificate without key", bus.ConnectOptions{TLS: bus.TLSOptions{CertFile: "c.pem"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bus.Connect("nats://127.0.0.1:1", "test", nil, tc.opts)
			if !errors.Is(err, bus.ErrConnectOptions) {
				t.Errorf("got %v, want ErrConnectOptions", err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		opts bus.ConnectOptions
	}{
		{"missing nkey file", bus.ConnectOptions{NKeyFile: "testdata/missing.nk"}},
		{"missing creds file", bus.ConnectOptions{CredsFile: "testdata/missing.creds"}},
		{"missing CA file", bus.ConnectOptions{TLS: bus.TLSOptions{CAFile: "testdata/missing.pem"}}},
		{"CA file without certificates", bus.ConnectOptions{TLS: bus.TLSOptions{CAFile: "testdata/user.pub"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := bus.Connect("nats://127.0.0.1:1", "test", nil, tc.opts); err == nil {
				t.Error("want an error")
			}
		})
	}
	if _, err := bus.Connect("nats://127.0.0.1:1", "test", nil, bus.ConnectOptions{}, bus.ConnectOptions{}); !errors.Is(err, bus.ErrConnectOptions) {
		t.Errorf("two ConnectOptions: got %v, want ErrConnectOptions", err)
	}
}

func TestConnectInProcessWithCredentials(t *testing.T) {
	s, _ := startAuthServer(t)
	nc, err := bus.ConnectInProcess(s, "test", bus.ConnectOptions{User: "admin", Password: passwords["admin"]})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := bus.ConnectInProcess(s, "test", bus.ConnectOptions{TLS: bus.TLSOptions{Insecure: true}}); !errors.Is(err, bus.ErrConnectOptions) {
		t.Errorf("TLS in process: got %v, want ErrConnectOptions", err)
	}
}

func TestStartServerConfigFile(t *testing.T) {
	if _, err := bus.StartServer(bus.ServerOptions{ConfigFile: "testdata/missing.conf", DataDir: t.TempDir()}); err == nil {
		t.Error("a missing config file should fail")
	}
	bad := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(bad, []byte("accounts { A { users = [ {user: a, password: "), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.StartServer(bus.ServerOptions{ConfigFile: bad, DataDir: t.TempDir()}); err == nil {
		t.Error("a malformed config file should fail")
	}
	// The example's store_dir and listen address give way to the options.
	s, url := startConfigServer(t, authConf)
	if strings.HasSuffix(url, ":4222") {
		t.Errorf("listening on %s, want a free port", url)
	}
	if got := s.JetStreamConfig().StoreDir; strings.Contains(got, "rollfleet-data") {
		t.Errorf("store dir %s, want the DataDir", got)
	}
}

// TestAuthConfRoles drives each role's operations, as the actors perform
// them, under the role's own user, and checks that none is refused.
func TestAuthConfRoles(t *testing.T) {
	_, url := startAuthServer(t)
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The admin creates the streams; every role only looks them up.
	_, adminJS, _ := connectAs(t, url, "admin")
	if err := bus.EnsureStreams(ctx, adminJS, subj, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := map[string]*bustest.LogRecorder{}
	conns := map[string]*nats.Conn{}
	jss := map[string]jetstream.JetStream{}
	for _, role := range []string{"envworker", "llmworker", "collector", "trainer"} {
		nc, js, log := connectAs(t, url, role)
		if err := bus.EnsureStreams(ctx, js, subj, bus.StreamOptions{}); err != nil {
			t.Fatalf("%s: ensure streams: %v", role, err)
		}
		conns[role], jss[role], logs[role] = nc, js, log
	}

	// LLM worker: answers generate and tokenize in its queue group.
	for _, s := range []string{subj.Generate(), subj.Tokenize(), subj.TokenizeChat(), subj.Detokenize(), subj.ModelInfo()} {
		if _, err := conns["llmworker"].QueueSubscribe(s, "llm", func(m *nats.Msg) { _ = m.Respond([]byte("reply to " + m.Subject)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := conns["llmworker"].Flush(); err != nil {
		t.Fatal(err)
	}

	// Trainer: submits an episode.
	if err := bus.Publish(ctx, jss["trainer"], subj.Episodes("run-1", "game:GuessTheNumber-v0"), []byte("episode"), "e1"); err != nil {
		t.Fatalf("trainer: submit: %v", err)
	}

	// Env worker: pulls it through a durable consumer (one for every env,
	// one per env set as --env makes it, and one per run, of every env or
	// of a set), keeps it alive, asks the model, publishes a step and a
	// malformed-request failure, acks.
	env := jss["envworker"]
	for _, cfg := range []jetstream.ConsumerConfig{
		{Durable: "envworker-sudoku", FilterSubjects: []string{
			subj.EpisodesFilter(messages.AnyRun, "game:Sudoku-v0"), subj.EpisodesFilter(messages.AnyRun, "game:Sudoku-v0-easy"),
		}},
		{Durable: "envworker-run-run-1", FilterSubject: subj.EpisodesOfRun("run-1"), InactiveThreshold: time.Hour},
		{Durable: "envworker-run-run-1-sudoku", InactiveThreshold: time.Hour, FilterSubjects: []string{
			subj.EpisodesFilter("run-1", "game:Sudoku-v0"), subj.EpisodesFilter("run-1", "game:Sudoku-v0-easy"),
		}},
	} {
		cfg.AckPolicy = jetstream.AckExplicitPolicy
		if _, err := env.CreateOrUpdateConsumer(ctx, subj.StreamEpisodes(), cfg); err != nil {
			t.Fatalf("envworker: consumer %s: %v", cfg.Durable, err)
		}
		// A work queue takes no overlapping consumers: the admin removes
		// this one before the next.
		if err := adminJS.DeleteConsumer(ctx, subj.StreamEpisodes(), cfg.Durable); err != nil {
			t.Fatal(err)
		}
	}
	envNC := conns["envworker"]
	cons, err := env.CreateOrUpdateConsumer(ctx, subj.StreamEpisodes(), jetstream.ConsumerConfig{
		Durable: "envworker", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj.EpisodesAll(),
	})
	if err != nil {
		t.Fatalf("envworker: consumer: %v", err)
	}
	if _, err := cons.Info(ctx); err != nil {
		t.Fatalf("envworker: consumer info: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("envworker: pull: %v", err)
	}
	if err := msg.InProgress(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{subj.Generate(), subj.Tokenize()} {
		rep, err := envNC.RequestWithContext(ctx, s, []byte("request"))
		if err != nil {
			t.Fatalf("envworker: request %s: %v", s, err)
		}
		if string(rep.Data) != "reply to "+s {
			t.Errorf("envworker: %s replied %q", s, rep.Data)
		}
	}
	if err := bus.Publish(ctx, env, subj.Steps("run-1", "g", "e1"), []byte("step 0"), messages.StepMsgID("e1", "r1", 0)); err != nil {
		t.Fatalf("envworker: publish step: %v", err)
	}
	// A request it cannot play is a failure of the run its subject names,
	// or of none.
	for _, run := range []string{"run-2", ""} {
		if err := bus.Publish(ctx, env, subj.Failures(run, messages.FailureMalformed), []byte("failure"), ""); err != nil {
			t.Fatalf("envworker: publish failure of run %q: %v", run, err)
		}
	}
	// An episode delivered again resumes from its stored steps.
	envSteps, err := env.Stream(ctx, subj.StreamSteps())
	if err != nil {
		t.Fatalf("envworker: steps stream: %v", err)
	}
	if raw, err := envSteps.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj.Steps("run-1", "g", "e1"))); err != nil || string(raw.Data) != "step 0" {
		t.Fatalf("envworker: read stored steps: %v", err)
	}
	// … unless the collector decided it.
	envDecided, err := env.Stream(ctx, subj.StreamDecided())
	if err != nil {
		t.Fatalf("envworker: decisions stream: %v", err)
	}
	if _, err := envDecided.GetLastMsgForSubject(ctx, subj.Decided("r1", "e1")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("envworker: read decision: %v", err)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("envworker: ack: %v", err)
	}

	// Collector: its pinned durable consumer on the steps stream, a reload
	// of an episode's steps, and its three outputs.
	col := jss["collector"]
	steps, err := col.Stream(ctx, subj.StreamSteps())
	if err != nil {
		t.Fatalf("collector: steps stream: %v", err)
	}
	ccons, err := steps.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "collector", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj.StepsAll(),
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"collector"}, PinnedTTL: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("collector: consumer: %v", err)
	}
	got := make(chan jetstream.Msg, 1)
	cc, err := ccons.Consume(func(m jetstream.Msg) { got <- m }, jetstream.PullPriorityGroup("collector"))
	if err != nil {
		t.Fatalf("collector: consume: %v", err)
	}
	var step jetstream.Msg
	select {
	case step = <-got:
	case <-ctx.Done():
		t.Fatal("collector: no step delivered")
	}
	cc.Stop()
	raw, err := steps.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj.Steps("run-1", "g", "e1")))
	if err != nil || string(raw.Data) != "step 0" {
		t.Fatalf("collector: reload: %v, %q", err, raw.Data)
	}
	for _, s := range []string{subj.Trajectories("run-1", "game:GuessTheNumber-v0"), subj.Groups("run-1", "game:GuessTheNumber-v0"), subj.Failures("run-1", messages.FailureInvariant)} {
		if err := bus.Publish(ctx, col, s, []byte("outcome"), "e1"); err != nil {
			t.Fatalf("collector: publish %s: %v", s, err)
		}
	}
	if err := step.DoubleAck(ctx); err != nil {
		t.Fatalf("collector: ack: %v", err)
	}
	// The decision, stored before the outcome and read back, then the purge
	// of the decided episode's steps.
	if _, err := col.Publish(ctx, subj.Decided("r1", "e1"), nil, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatalf("collector: decision: %v", err)
	}
	decided, err := col.Stream(ctx, subj.StreamDecided())
	if err != nil {
		t.Fatalf("collector: decisions stream: %v", err)
	}
	if _, err := decided.GetLastMsgForSubject(ctx, subj.Decided("r1", "e1")); err != nil {
		t.Fatalf("collector: read decision: %v", err)
	}
	if err := steps.Purge(ctx, jetstream.WithPurgeSubject(subj.Steps("run-1", "g", "e1"))); err != nil {
		t.Fatalf("collector: purge: %v", err)
	}

	// Trainer: the output streams are work queues, read through
	// explicit-ack consumers of its own (one run's records, as rollout run
	// reads them, or every run's), each record gone once acknowledged;
	// stored records can be read by get (the leader's, or direct: the work
	// queues allow both, for "nats stream view"), and live ones by
	// subscription.
	tr := jss["trainer"]
	fs, err := tr.Stream(ctx, subj.StreamFailures())
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := fs.GetMsg(ctx, 1); err != nil || string(raw.Data) != "failure" {
		t.Fatalf("trainer: get failure: %v", err)
	}
	if raw, err := bus.LeaderGetMsg(ctx, tr, subj.StreamFailures(), 1, ""); err != nil || string(raw.Data) != "failure" {
		t.Fatalf("trainer: get failure from the leader: %v", err)
	}
	for _, c := range []struct{ stream, name, filter string }{
		{subj.StreamTrajectories(), "run-run-1-trajectory", subj.TrajectoriesOfRun("run-1")},
		{subj.StreamGroups(), "trainer", ""},
		{subj.StreamFailures(), "run-run-1-failure", subj.FailuresOfRun("run-1")},
	} {
		cons, err := tr.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
			Durable: c.name, FilterSubject: c.filter, AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour,
		})
		if err != nil {
			t.Fatalf("trainer: consumer on %s: %v", c.stream, err)
		}
		if _, err := cons.Info(ctx); err != nil {
			t.Fatalf("trainer: consumer info on %s: %v", c.stream, err)
		}
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil || string(m.Data()) != "outcome" {
			t.Fatalf("trainer: read %s: %v", c.stream, err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("trainer: ack on %s: %v", c.stream, err)
		}
		// The acknowledged record is gone from the work queue.
		st, err := tr.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.filter))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Msgs; c.stream != subj.StreamFailures() && n != 0 || c.stream == subj.StreamFailures() && n != 2 { // the env worker's two stay
			t.Fatalf("trainer: %s holds %d records after the ack", c.stream, n)
		}
		if err := tr.DeleteConsumer(ctx, c.stream, c.name); err != nil {
			t.Fatalf("trainer: delete its consumer on %s: %v", c.stream, err)
		}
	}
	sub, err := conns["trainer"].SubscribeSync(subj.TrajectoriesAll())
	if err != nil {
		t.Fatal(err)
	}
	if err := conns["trainer"].Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, col, subj.Trajectories("run-1", "game:Sudoku-v0"), []byte("live"), "e2"); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil || string(m.Data) != "live" {
		t.Fatalf("trainer: live trajectory: %v", err)
	}

	// Gateway: forwards calls to the LLM workers and records sessions.
	gwNC, gw, gwLog := connectAs(t, url, "gateway")
	if err := bus.EnsureStreams(ctx, gw, subj, bus.StreamOptions{}); err != nil {
		t.Fatalf("gateway: ensure streams: %v", err)
	}
	conns["gateway"], logs["gateway"] = gwNC, gwLog
	for _, s := range []string{subj.Generate(), subj.Tokenize(), subj.TokenizeChat(), subj.Detokenize(), subj.ModelInfo()} {
		if _, err := gwNC.RequestWithContext(ctx, s, []byte("request")); err != nil {
			t.Fatalf("gateway: request %s: %v", s, err)
		}
	}
	for _, s := range []string{subj.Trajectories("gateway", "chat"), subj.Failures("gateway", messages.FailureEpisode)} {
		if err := bus.Publish(ctx, gw, s, []byte("session"), "s1"); err != nil {
			t.Fatalf("gateway: publish %s: %v", s, err)
		}
	}

	// A second env worker and a second LLM worker: every one answers a
	// status request.
	for _, user := range []string{"envworker", "llmworker"} {
		nc, _, log := connectAs(t, url, user)
		conns[user+" 2"], logs[user+" 2"] = nc, log
	}
	testControlRoles(t, ctx, subj, conns)

	for role, nc := range conns {
		if err := nc.Flush(); err != nil {
			t.Errorf("%s: %v", role, err)
		}
		if err := nc.LastError(); err != nil {
			t.Errorf("%s: %v", role, err)
		}
		if errs := logs[role].Lines(); len(errs) > 0 {
			t.Errorf("%s: refused: %q", role, errs)
		}
	}
}

// testControlRoles drives the control plane under the roles' users: the env
// and LLM workers follow the policy state and answer status requests, the
// collector and the trainer follow it too, and the trainer pauses the fleet
// (waiting for the LLM worker), lists the workers and resumes it under a new
// version. The connections are the roles', by user name, and a second env
// and LLM worker's ("envworker 2", "llmworker 2").
func testControlRoles(t *testing.T, ctx context.Context, subj messages.Subjects, conns map[string]*nats.Conn) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	// No resync within the test: each announcement must arrive by
	// subscription (the LLM worker's through the stream import), and each
	// read of the stored state is the one at start.
	watch := func(role string) *control.Watcher {
		t.Helper()
		// A refused read leaves the initial state, after this wait.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w, err := control.Watch(wctx, conns[role], control.WatchOptions{Subjects: subj, Resync: time.Hour, Logger: quiet})
		if err != nil {
			t.Fatalf("%s: watch: %v", role, err)
		}
		t.Cleanup(w.Close)
		return w
	}
	watchers := map[string]*control.Watcher{}
	for _, role := range []string{"envworker", "envworker 2", "llmworker", "llmworker 2", "collector", "trainer"} {
		watchers[role] = watch(role)
	}
	for _, w := range []struct{ role, kind, id string }{
		{"envworker", messages.WorkerEnv, "env-1"},
		{"envworker 2", messages.WorkerEnv, "env-2"},
		{"llmworker", messages.WorkerLLM, "llm-1"},
		{"llmworker 2", messages.WorkerLLM, "llm-2"},
	} {
		ctl := watchers[w.role]
		sub, err := control.ServeStatus(conns[w.role], subj, func() messages.WorkerStatus {
			st := ctl.State()
			return messages.WorkerStatus{Kind: w.kind, ID: w.id, Epoch: st.Epoch, Version: st.Version, Paused: st.Paused}
		})
		if err != nil {
			t.Fatalf("%s: serve status: %v", w.role, err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := conns[w.role].Flush(); err != nil { // the server has the subscription
			t.Fatal(err)
		}
	}

	c, err := control.NewClient(conns["trainer"], subj)
	if err != nil {
		t.Fatal(err)
	}
	// The pause returns once the LLM workers answer that they apply it.
	if _, err := c.Pause(ctx, messages.OnPauseFinish); err != nil {
		t.Fatalf("trainer: pause: %v", err)
	}
	// One request, answered by every worker, in both accounts.
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		workers, err := c.Workers(ctx)
		if err != nil {
			return err
		}
		var got []string
		for _, w := range workers {
			got = append(got, fmt.Sprintf("%s/%s epoch %d paused %v", w.Kind, w.ID, w.Epoch, w.Paused))
		}
		want := []string{
			"llm/llm-1 epoch 1 paused true", "llm/llm-2 epoch 1 paused true",
			"env/env-1 epoch 1 paused true", "env/env-2 epoch 1 paused true",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("trainer: workers %q, want %q", got, want)
		}
		return nil
	})
	if _, err := c.Resume(ctx, 1); err != nil {
		t.Fatalf("trainer: resume: %v", err)
	}
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for role, w := range watchers {
			if st := w.State(); st.Version != 1 || st.Paused || st.Epoch != 2 {
				return fmt.Errorf("%s: state %+v, want epoch 2, version 1, running", role, st)
			}
		}
		return nil
	})
	// A worker that starts now reads the stored state at once.
	for _, role := range []string{"envworker", "llmworker", "collector", "trainer"} {
		if st := watch(role).State(); st.Version != 1 || st.Paused || st.Epoch != 2 {
			t.Errorf("%s: late watcher's state %+v, want epoch 2, version 1, running", role, st)
		}
	}
	if st, err := c.State(ctx); err != nil || st.Version != 1 {
		t.Errorf("trainer: state %+v, %v", st, err)
	}
}

// TestAuthConfRefusesOtherSubjects checks that a role cannot write where its
// role does not, and that nothing it tries reaches a stream.
func TestAuthConfRefusesOtherSubjects(t *testing.T) {
	subj := messages.NewSubjects("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, adminJS := startAuthStreams(t, ctx, subj)

	// denied is the permission violation nc reports for op on subject.
	denied := func(t *testing.T, nc *nats.Conn, op, subject string) {
		t.Helper()
		want := fmt.Sprintf("permissions violation for %s to %q", op, subject)
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			err := nc.LastError()
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
				return nil
			}
			return fmt.Errorf("last error %v, want %s", err, want)
		})
	}

	for _, tc := range []struct {
		role, subject string
	}{
		{"envworker", subj.Trajectories("run-1", "game:GuessTheNumber-v0")},
		{"envworker", subj.Episodes("run-1", "game:GuessTheNumber-v0")},
		{"envworker", subj.Failures("run-1", messages.FailureEpisode)},
		{"envworker", subj.Decided("r1", "e1")},
		{"trainer", subj.Decided("r1", "e1")},
		{"gateway", subj.Decided("r1", "e1")},
		{"llmworker", subj.Steps("run-1", "g", "e1")},
		{"llmworker", subj.Episodes("run-1", "game:GuessTheNumber-v0")},
		{"collector", subj.Episodes("run-1", "game:GuessTheNumber-v0")},
		{"trainer", subj.Steps("run-1", "g", "e1")},
		{"trainer", subj.Trajectories("run-1", "game:GuessTheNumber-v0")},
		{"trainer", subj.Groups("run-1", "game:GuessTheNumber-v0")},
		{"trainer", subj.Failures("run-1", messages.FailureEpisode)},
		{"trainer", subj.Generate()},
		{"gateway", subj.Steps("run-1", "g", "e1")},
		{"gateway", subj.Episodes("run-1", "game:GuessTheNumber-v0")},
		{"gateway", subj.Groups("run-1", "chat")},
		{"gateway", subj.Failures("run-1", messages.FailureMalformed)},
		// The gateway records its own run's sessions only: another run's
		// outcomes are the collector's.
		{"gateway", subj.Trajectories("run-1", "game:GuessTheNumber-v0")},
		{"gateway", subj.Failures("run-1", messages.FailureEpisode)},
		{"gateway", subj.Trajectories("gateway2", "chat")},
		// Only the trainer (and the admin) announce the policy state and
		// ask the workers for their status.
		{"envworker", subj.Control()},
		{"llmworker", subj.Control()},
		{"collector", subj.Control()},
		{"gateway", subj.Control()},
		{"envworker", subj.ControlWorkers()},
		{"llmworker", subj.ControlWorkers()},
		{"collector", subj.ControlWorkers()},
		{"gateway", subj.ControlWorkers()},
	} {
		t.Run(tc.role+" publishes "+tc.subject, func(t *testing.T) {
			nc, _, _ := connectAs(t, url, tc.role)
			if err := nc.Publish(tc.subject, []byte("forged")); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, "publish", tc.subject)
		})
	}

	t.Run("a refused JetStream publish is never acknowledged", func(t *testing.T) {
		for role, subject := range map[string]string{
			"trainer":   subj.Steps("run-1", "g", "e1"),
			"envworker": subj.Control(),
		} {
			_, js, _ := connectAs(t, url, role)
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			if _, err := js.Publish(pctx, subject, []byte("forged")); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: publish %s: got %v, want no acknowledgement (deadline exceeded)", role, subject, err)
			}
			cancel()
			denied(t, js.Conn(), "publish", subject)
		}
	})

	t.Run("roles read the control stream by direct get only", func(t *testing.T) {
		for role, api := range map[string]string{
			"envworker": "$JS.API.STREAM.MSG.GET." + subj.StreamControl(),
			"llmworker": "$JS.API.STREAM.MSG.GET." + subj.StreamControl(),
			"collector": "$JS.API.DIRECT.GET." + subj.StreamControl() + "." + subj.ControlWorkers(),
			"gateway":   "$JS.API.DIRECT.GET." + subj.StreamControl(),
		} {
			nc, _, _ := connectAs(t, url, role)
			if err := nc.PublishRequest(api, nc.NewRespInbox(), []byte(`{"seq":1}`)); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, "publish", api)
		}
	})

	t.Run("roles do not administer streams", func(t *testing.T) {
		for role, api := range map[string]string{
			"envworker": "$JS.API.STREAM.CREATE.EVIL",
			"llmworker": "$JS.API.STREAM.UPDATE." + subj.StreamEpisodes(),
			"collector": "$JS.API.STREAM.PURGE." + subj.StreamEpisodes(),
			"trainer":   "$JS.API.STREAM.DELETE." + subj.StreamEpisodes(),
		} {
			nc, _, _ := connectAs(t, url, role)
			if err := nc.PublishRequest(api, nc.NewRespInbox(), []byte(`{"name":"EVIL","subjects":["rf.llm.>"]}`)); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, "publish", api)
		}
	})

	t.Run("roles do not read what is not theirs", func(t *testing.T) {
		for role, subject := range map[string]string{
			"envworker": subj.TrajectoriesAll(),
			"collector": subj.Generate(),
			"trainer":   subj.StepsAll(),
			// status requests are the workers'
			"gateway": subj.ControlWorkers(),
		} {
			nc, _, _ := connectAs(t, url, role)
			if _, err := nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, "subscription", subject)
		}
		// The LLM worker takes requests only as a member of its queue group.
		nc, _, _ := connectAs(t, url, "llmworker")
		if _, err := nc.SubscribeSync(subj.Generate()); err != nil {
			t.Fatal(err)
		}
		denied(t, nc, "subscription", subj.Generate())
		nc, _, _ = connectAs(t, url, "llmworker")
		if _, err := nc.QueueSubscribeSync(subj.Generate(), "elsewhere"); err != nil {
			t.Fatal(err)
		}
		denied(t, nc, "subscription", subj.Generate())
	})

	t.Run("the workers answer only requests they received", func(t *testing.T) {
		for _, role := range []string{"llmworker", "envworker"} {
			nc, _, _ := connectAs(t, url, role)
			inbox := nats.NewInbox()
			if err := nc.Publish(inbox, []byte("unsolicited")); err != nil {
				t.Fatal(err)
			}
			denied(t, nc, "publish", inbox)
		}
	})

	// Nothing of the above reached a stream, and every stream is there.
	for _, cfg := range bus.StreamConfigs(subj, bus.StreamOptions{}) {
		st, err := adminJS.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			t.Errorf("stream %s holds %d messages, want 0", cfg.Name, n)
		}
	}
	if _, err := adminJS.Stream(ctx, "EVIL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream EVIL: got %v, want not found", err)
	}
}

func TestConnectNKey(t *testing.T) {
	pub, err := os.ReadFile("testdata/user.pub")
	if err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, fmt.Sprintf("authorization { users = [ {nkey: %q} ] }\n", strings.TrimSpace(string(pub))))
	_, url := startConfigServer(t, conf)
	nc, err := bus.Connect(url, "test", nil, bus.ConnectOptions{NKeyFile: "testdata/user.nk"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	_, err = bus.Connect(url, "test", nil, bus.ConnectOptions{User: "u", Password: "p"})
	if !errors.Is(err, bus.ErrAuthFailed) {
		t.Errorf("user instead of nkey: got %v", err)
	}
}

func TestConnectCreds(t *testing.T) {
	_, url := startConfigServer(t, "testdata/operator.conf")
	nc, err := bus.Connect(url, "test", nil, bus.ConnectOptions{CredsFile: "testdata/user.creds"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	_, err = bus.Connect(url, "test", nil, bus.ConnectOptions{NKeyFile: "testdata/user.nk"})
	if !errors.Is(err, bus.ErrAuthFailed) || !strings.Contains(err.Error(), `the nkey in "testdata/user.nk"`) {
		t.Errorf("an nkey the operator does not know: got %v", err)
	}
}

func writeConf(t *testing.T, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pki is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyPEM := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rollfleet test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, "server", x509.ExtKeyUsageServerAuth)
	cliDER, cliKey := leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return pki{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", srvDER), serverKey: keyPEM("server-key.pem", srvKey),
		clientCert: write("client.pem", "CERTIFICATE", cliDER), clientKey: keyPEM("client-key.pem", cliKey),
	}
}

func TestConnectTLS(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	conf := writeConf(t, fmt.Sprintf(`tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
authorization { users = [ {user: trainer, password: pw} ] }
`, p.serverCert, p.serverKey, p.ca))
	_, url := startConfigServer(t, conf)
	creds := bus.ConnectOptions{User: "trainer", Password: "pw"}
	with := func(tls bus.TLSOptions) bus.ConnectOptions { o := creds; o.TLS = tls; return o }

	for _, tc := range []struct {
		name string
		opts bus.ConnectOptions
	}{
		{"CA and client certificate", with(bus.TLSOptions{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey})},
		{"insecure with client certificate", with(bus.TLSOptions{Insecure: true, CertFile: p.clientCert, KeyFile: p.clientKey})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := bus.Connect(url, "test", nil, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.TLSConnectionState(); err != nil || !nc.IsConnected() {
				t.Errorf("connected %v, TLS: %v", nc.IsConnected(), err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		opts bus.ConnectOptions
	}{
		{"no TLS options", creds},
		{"unknown CA", with(bus.TLSOptions{CAFile: other.ca, CertFile: p.clientCert, KeyFile: p.clientKey})},
		{"no client certificate", with(bus.TLSOptions{CAFile: p.ca})},
		{"client certificate of another CA", with(bus.TLSOptions{CAFile: p.ca, CertFile: other.clientCert, KeyFile: other.clientKey})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := bus.Connect(url, "test", nil, tc.opts)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, bus.ErrTLSFailed) {
				t.Errorf("got %v, want ErrTLSFailed", err)
			}
		})
	}
	t.Run("right TLS, wrong password", func(t *testing.T) {
		o := with(bus.TLSOptions{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey})
		o.Password = "wrong"
		if _, err := bus.Connect(url, "test", nil, o); !errors.Is(err, bus.ErrAuthFailed) {
			t.Errorf("got %v, want ErrAuthFailed", err)
		}
	})
}
