package bus_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/rollfleet/rollfleet/bus/bustest"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/service"
)

// TestAuthConfServiceDiscovery registers env workers, LLM workers and a
// collector with the NATS service API (package service) under their roles'
// users, and finds every instance as the admin, as "nats micro ls" does:
// one request on "$SRV.PING", "$SRV.INFO" or "$SRV.STATS" answered by every
// service of both accounts, the LLM workers' through the LLM account's
// exports, and the requests that name a service or an instance, and the
// status endpoints. No role is refused anything.
func TestAuthConfServiceDiscovery(t *testing.T) {
	_, url := startAuthServer(t)
	subj := messages.NewSubjects("")
	admin, _, adminLog := connectAs(t, url, "admin")

	type instance struct{ role, kind, id string }
	instances := []instance{
		{"envworker", service.KindEnv, "env-1"},
		{"envworker", service.KindEnv, "env-2"},
		{"llmworker", service.KindLLM, "llm-1"},
		{"llmworker", service.KindLLM, "llm-2"},
		{"collector", service.KindCollector, "collector-1"},
	}
	logs := map[string]*bustest.LogRecorder{"admin": adminLog}
	svcIDs := map[string]string{} // worker id -> service instance id
	for _, in := range instances {
		nc, _, connLog := connectAs(t, url, in.role)
		svcLog := &bustest.LogRecorder{Min: slog.LevelWarn}
		svc, err := service.Register(nc, service.Config{
			Kind: in.kind, ID: in.id, Subjects: subj, Logger: slog.New(svcLog),
			Status: func() any { return service.Status{Kind: in.kind, ID: in.id, Stats: map[string]int{}} },
		})
		if err != nil {
			t.Fatalf("%s: register %s: %v", in.id, in.kind, err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		if err := nc.Flush(); err != nil { // the server has the subscriptions
			t.Fatal(err)
		}
		logs[in.id+" connection"], logs[in.id+" service"] = connLog, svcLog
		svcIDs[in.id] = svc.Info().ID
	}

	all := []string{"collector/collector-1", "envworker/env-1", "envworker/env-2", "llmworker/llm-1", "llmworker/llm-2"}
	llms := []string{"llmworker/llm-1", "llmworker/llm-2"}
	// What micro answers on its own subjects carries the service's name
	// and metadata.
	fromInfo := func(data []byte) (string, error) {
		var info micro.ServiceIdentity
		if err := json.Unmarshal(data, &info); err != nil {
			return "", err
		}
		kind, ok := strings.CutPrefix(info.Name, service.NamePrefix)
		if !ok || svcIDs[info.Metadata["worker_id"]] != info.ID {
			return "", fmt.Errorf("answer of no instance registered: %s", data)
		}
		return kind + "/" + info.Metadata["worker_id"], nil
	}
	fromStatus := func(data []byte) (string, error) {
		var st service.Status
		if err := json.Unmarshal(data, &st); err != nil {
			return "", err
		}
		return st.Kind + "/" + st.ID, nil
	}
	for _, c := range []struct {
		subject string
		decode  func([]byte) (string, error)
		want    []string
	}{
		{"$SRV.PING", fromInfo, all},
		{"$SRV.INFO", fromInfo, all},
		{"$SRV.STATS", fromInfo, all},
		{"$SRV.PING." + service.NamePrefix + service.KindLLM, fromInfo, llms},
		{"$SRV.INFO." + service.NamePrefix + service.KindLLM, fromInfo, llms},
		{"$SRV.STATS." + service.NamePrefix + service.KindLLM, fromInfo, llms},
		{"$SRV.INFO." + service.NamePrefix + service.KindLLM + "." + svcIDs["llm-2"], fromInfo, llms[1:]},
		{"$SRV.STATS." + service.NamePrefix + service.KindLLM + "." + svcIDs["llm-1"], fromInfo, llms[:1]},
		{"$SRV.PING." + service.NamePrefix + service.KindEnv, fromInfo, all[1:3]},
		{"$SRV.INFO." + service.NamePrefix + service.KindCollector + "." + svcIDs["collector-1"], fromInfo, all[:1]},
		{service.StatusSubject(subj, service.KindLLM), fromStatus, llms},
		{service.StatusSubject(subj, service.KindEnv), fromStatus, all[1:3]},
		{service.StatusSubject(subj, service.KindCollector), fromStatus, all[:1]},
	} {
		got, err := scatter(admin, c.subject, len(c.want), c.decode)
		if err != nil {
			t.Errorf("admin: %s: %v", c.subject, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("admin: %s answered by %q, want %q", c.subject, got, c.want)
		}
	}
	for name, log := range logs {
		if lines := log.Lines(); len(lines) > 0 {
			t.Errorf("%s: logged %q", name, lines)
		}
	}
}

// TestAuthConfServiceDiscoveryRefused checks that the service API's
// permissions give no role another's service: a role cannot register as
// another kind, nor subscribe to the requests that name another kind, and
// the trainer cannot send service API requests.
func TestAuthConfServiceDiscoveryRefused(t *testing.T) {
	_, url := startAuthServer(t)
	subj := messages.NewSubjects("")
	for _, c := range []struct{ role, kind string }{
		{"envworker", service.KindCollector},
		{"envworker", service.KindLLM},
		{"collector", service.KindEnv},
		{"llmworker", service.KindEnv},
		{"trainer", service.KindEnv},
		{"gateway", service.KindLLM},
	} {
		nc, _, connLog := connectAs(t, url, c.role)
		svc, err := service.Register(nc, service.Config{
			Kind: c.kind, ID: "forged", Subjects: subj, Logger: slog.New(slog.DiscardHandler),
			Status: func() any { return service.Status{Kind: c.kind, ID: "forged"} },
		})
		if err != nil {
			t.Fatalf("%s as %s: %v", c.role, c.kind, err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		// Each subscription on the other kind's own subjects is refused.
		id := svc.Info().ID
		refused := []string{service.StatusSubject(subj, c.kind)}
		for _, verb := range []string{"PING", "INFO", "STATS"} {
			name := service.NamePrefix + c.kind
			refused = append(refused, "$SRV."+verb+"."+name, "$SRV."+verb+"."+name+"."+id)
		}
		bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
			lines := strings.ToLower(strings.Join(connLog.Lines(), "\n"))
			for _, s := range refused {
				if !strings.Contains(lines, strings.ToLower(`permissions violation for subscription to "`+s+`"`)) {
					return fmt.Errorf("%s registering as %s: subscription to %s not refused: %s", c.role, c.kind, s, lines)
				}
			}
			return nil
		})
	}
	trainer, _, trainerLog := connectAs(t, url, "trainer")
	if err := trainer.PublishRequest("$SRV.PING", trainer.NewInbox(), nil); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if lines := strings.ToLower(strings.Join(trainerLog.Lines(), "\n")); !strings.Contains(lines, `permissions violation for publish to "$srv.ping"`) {
			return fmt.Errorf("trainer: $SRV.PING not refused: %s", lines)
		}
		return nil
	})
}

// scatter sends one request on subject from nc and collects its answers
// until want of them arrived and none follows for a moment (or a timeout),
// decoded and sorted.
func scatter(nc *nats.Conn, subject string, want int, decode func([]byte) (string, error)) ([]string, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		wait := time.Until(deadline)
		if len(got) >= want {
			wait = 200 * time.Millisecond // any answer beyond those wanted
		}
		msg, err := sub.NextMsg(wait)
		if err != nil {
			if len(got) >= want {
				break
			}
			return nil, fmt.Errorf("%d answers of %d: %w", len(got), want, err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
			return nil, fmt.Errorf("error answer %s: %s", code, msg.Header.Get(micro.ErrorHeader))
		}
		s, err := decode(msg.Data)
		if err != nil {
			return nil, err
		}
		got = append(got, s)
	}
	slices.Sort(got)
	return got, nil
}
