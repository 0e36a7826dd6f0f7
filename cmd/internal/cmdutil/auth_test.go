package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	envactor "github.com/rollfleet/rollfleet/actors/env"
	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/toyllm"
)

// authConf is the example server configuration with a user per role.
const authConf = "../../../examples/nats/auth.conf"

// passwords are the example configuration's placeholder passwords.
var passwords = bustest.ExamplePasswords

// fleetAs is the flags of a fleet process logging in as user.
func fleetAs(url, user, password string) Fleet {
	return Fleet{NATS: url, NATSAuth: NATSAuth{NATSUser: user, NATSPassword: password}, Prefix: "rf", Replicas: 1, LogLevel: "info"}
}

// refusals are the logged lines that report a permission refused.
func refusals(l *bustest.LogRecorder) []string {
	var out []string
	for _, m := range l.Lines() {
		if strings.Contains(strings.ToLower(m), "permission") || strings.Contains(m, "refused") {
			out = append(out, m)
		}
	}
	return out
}

type fleetCLI struct {
	Fleet
}

func TestAuthFlags(t *testing.T) {
	parse := func(t *testing.T, args ...string) Fleet {
		t.Helper()
		var c fleetCLI
		p, err := kong.New(&c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c.Fleet
	}
	f := parse(t, "--nats-user", "envworker", "--nats-password", "pw", "--tls-ca", "ca.pem",
		"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-insecure")
	want := bus.ConnectOptions{User: "envworker", Password: "pw", TLS: bus.TLSOptions{Insecure: true}}
	got := f.ConnectOptions()
	if got.User != want.User || got.Password != want.Password || !got.TLS.Insecure ||
		filepath.Base(got.TLS.CAFile) != "ca.pem" || filepath.Base(got.TLS.CertFile) != "c.pem" || filepath.Base(got.TLS.KeyFile) != "k.pem" {
		t.Errorf("flags gave %+v", got)
	}
	f = parse(t, "--nats-token", "tok", "--nats-nkey", "user.nk")
	if got := f.ConnectOptions(); got.Token != "tok" || filepath.Base(got.NKeyFile) != "user.nk" {
		t.Errorf("flags gave %+v", got)
	}
	if got := parse(t, "--nats-creds", "user.creds").ConnectOptions(); filepath.Base(got.CredsFile) != "user.creds" {
		t.Errorf("flags gave %+v", got)
	}

	t.Setenv("RF_NATS_USER", "collector")
	t.Setenv("RF_NATS_PASSWORD", "from-env")
	if got := parse(t).ConnectOptions(); got.User != "collector" || got.Password != "from-env" {
		t.Errorf("environment gave %+v", got)
	}
}

func TestConnectWrongPassword(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{ConfigFile: authConf, Port: -1, DataDir: t.TempDir()})
	f := fleetAs(s.ClientURL(), "envworker", "wrong")
	_, _, _, err := f.Connect(context.Background(), "envworker", slog.New(slog.DiscardHandler))
	if !errors.Is(err, bus.ErrAuthFailed) {
		t.Fatalf("got %v, want ErrAuthFailed", err)
	}
	for _, want := range []string{`authorization failed for user "envworker"`, "check --nats-user/--nats-password"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestRolesRunTheFleet runs the three actors and a trainer, each as its own
// user of the example configuration, after the admin created the streams.
// The env worker serves one run, from a consumer of its own; the trainer
// reads that run's outputs as a trainer does, through explicit-ack
// consumers of its own, and acknowledges each record, which frees it.
func TestRolesRunTheFleet(t *testing.T) {
	s := bustest.RunListeningServer(t, bus.ServerOptions{ConfigFile: authConf, Port: -1, DataDir: t.TempDir()})
	url := s.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Roles may not create the streams.
	f := fleetAs(url, "collector", passwords["collector"])
	if _, _, _, err := f.Connect(ctx, "collector", slog.New(slog.DiscardHandler)); !errors.Is(err, ErrStreamPermission) {
		t.Fatalf("collector before the streams exist: got %v, want ErrStreamPermission", err)
	}
	// The admin creates them.
	admin := fleetAs(url, "admin", passwords["admin"])
	admin.InitStreams = true
	if err := run("admin", admin, slog.New(slog.DiscardHandler), func(Process) error {
		return errors.New("the body runs with --init-streams")
	}); err != nil {
		t.Fatalf("--init-streams: %v", err)
	}

	model := toyllm.New(toyllm.Options{})
	modelURL, stopModel, err := model.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopModel)

	logs := map[string]*bustest.LogRecorder{}
	connect := func(role string) (*nats.Conn, jetstream.JetStream, messages.Subjects, *slog.Logger) {
		t.Helper()
		logs[role] = &bustest.LogRecorder{Min: slog.LevelWarn}
		log := slog.New(logs[role])
		f := fleetAs(url, role, passwords[role])
		nc, js, subj, err := f.Connect(ctx, role, log)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		t.Cleanup(nc.Close)
		return nc, js, subj, log
	}
	var runs []func(context.Context) error
	nc, _, subj, log := connect("llmworker")
	lw, err := llm.New(nc, llm.Options{Endpoints: []string{modelURL}, Subjects: subj, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runs = append(runs, lw.Run)
	nc, js, subj, log := connect("envworker")
	const run = "trainer-run"
	ew, err := envactor.New(nc, js, envactor.Options{Concurrency: 8, Subjects: subj, Logger: log, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	runs = append(runs, ew.Run)
	_, js, subj, log = connect("collector")
	runs = append(runs, collector.New(js, collector.Options{Subjects: subj, Logger: log}).Run)
	actx, stopActors := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stopActors(); wg.Wait() })
	for _, run := range runs {
		wg.Go(func() {
			if err := run(actx); err != nil {
				t.Errorf("actor: %v", err)
			}
		})
	}

	// The trainer reads the run's trajectories, failures and groups, then
	// submits.
	_, tjs, subj, _ := connect("trainer")
	var trajectories, failures, groups atomic.Int64
	for _, c := range []struct {
		kind, stream, filter string
		n                    *atomic.Int64
	}{
		{"trajectory", subj.StreamTrajectories(), subj.TrajectoriesOfRun(run), &trajectories},
		{"failure", subj.StreamFailures(), subj.FailuresOfRun(run), &failures},
		{"group", subj.StreamGroups(), subj.GroupsOfRun(run), &groups},
	} {
		cons, err := tjs.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
			Durable: "run-" + messages.NameToken(run) + "-" + c.kind, FilterSubject: c.filter,
			AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour,
		})
		if err != nil {
			t.Fatalf("trainer: %s: %v", c.stream, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if err := m.DoubleAck(ctx); err != nil {
				t.Errorf("trainer: ack on %s: %v", c.stream, err)
				return
			}
			c.n.Add(1)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
	}
	const episodes = 4
	for i := range episodes {
		seed, envSeed := int64(i), uint64(i)
		id := fmt.Sprintf("ep-%d", i)
		data, err := messages.Marshal(&messages.EpisodeRequest{
			V: messages.Version, RunID: run, EpisodeID: id, GroupID: id, GroupSize: 1,
			Env: "game:GuessTheNumber-v0", EnvSeed: &envSeed,
			Sampling:  messages.SamplingParams{Temperature: 1, MaxTokens: 64, Seed: &seed},
			MaxLength: 4096,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, tjs, subj.Episodes(run, "game:GuessTheNumber-v0"), data, id); err != nil {
			t.Fatalf("trainer: submit: %v", err)
		}
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n, f := trajectories.Load(), failures.Load(); n+f < episodes {
			return fmt.Errorf("%d trajectories and %d failures of %d episodes", n, f, episodes)
		}
		return nil
	})
	if n := trajectories.Load(); n != episodes {
		t.Errorf("%d trajectories of %d episodes (%d failures)", n, episodes, failures.Load())
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := groups.Load(); n != episodes {
			return fmt.Errorf("%d groups of %d", n, episodes)
		}
		return nil
	})
	// Read and acknowledged, the records are gone from the work queues.
	for _, stream := range []string{subj.StreamTrajectories(), subj.StreamFailures(), subj.StreamGroups()} {
		st, err := tjs.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 {
			t.Errorf("%s holds %d records after the trainer acknowledged them", stream, info.State.Msgs)
		}
	}
	for role, l := range logs {
		if r := refusals(l); len(r) > 0 {
			t.Errorf("%s: %q", role, r)
		}
	}
}

// TestRunEndsWhenCredentialsAreRevoked checks that a fleet process exits,
// saying why, when the server stops accepting its credentials on a
// reconnect, whichever actor it runs.
func TestRunEndsWhenCredentialsAreRevoked(t *testing.T) {
	model := toyllm.New(toyllm.Options{})
	modelURL, stopModel, err := model.Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopModel)
	for name, body := range map[string]func(Process) error{
		"waiting": func(p Process) error {
			<-p.Ctx.Done()
			return nil
		},
		"collector": func(p Process) error {
			return collector.New(p.JS, collector.Options{Subjects: p.Subjects, Logger: p.Log}).Run(p.Ctx)
		},
		"envworker": func(p Process) error {
			w, err := envactor.New(p.NC, p.JS, envactor.Options{Subjects: p.Subjects, Logger: p.Log})
			if err != nil {
				return err
			}
			return w.Run(p.Ctx)
		},
		"llmworker": func(p Process) error {
			w, err := llm.New(p.NC, llm.Options{Endpoints: []string{modelURL}, Subjects: p.Subjects, Logger: p.Log})
			if err != nil {
				return err
			}
			return w.Run(p.Ctx)
		},
	} {
		t.Run(name, func(t *testing.T) { testRevoked(t, body) })
	}
}

func testRevoked(t *testing.T, body func(Process) error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	write := func(password string) {
		t.Helper()
		c := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\nauthorization { users = [ {user: worker, password: %q} ] }\n",
			addr, filepath.Join(dir, "data"), password)
		if err := os.WriteFile(conf, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("before")
	s, err := bus.StartServer(bus.ServerOptions{ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run("worker", fleetAs("nats://"+addr, "worker", "before"), slog.New(slog.DiscardHandler), func(p Process) error {
			close(started)
			return body(p)
		})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended before its body: %v", err)
	}
	// The server comes back with another password. (A configuration reload
	// would do as well, but reloading races with JetStream traffic inside
	// the server.)
	bus.Shutdown(s)
	write("after")
	bustest.RunListeningServer(t, bus.ServerOptions{ConfigFile: conf})
	var got error
	bustest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		select {
		case got = <-done:
			return nil
		default:
			return errors.New("run still running")
		}
	})
	if !errors.Is(got, ErrConnectionClosed) || !errors.Is(got, bus.ErrAuthFailed) {
		t.Errorf("got %v, want ErrConnectionClosed with ErrAuthFailed", got)
	}
	if got != nil && !strings.Contains(got.Error(), `user "worker"`) {
		t.Errorf("error %q does not name the user", got)
	}
}
