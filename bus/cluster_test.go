package bus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var testRoutes = []string{"nats-route://127.0.0.1:16222", "nats-route://127.0.0.1:16223", "nats-route://127.0.0.1:16224"}

func TestClusterOptions(t *testing.T) {
	sopts, err := ServerOptions{
		Name: "n1", Host: "127.0.0.2", Port: -1, DataDir: t.TempDir(),
		ClusterPort: 16222, Routes: append([]string{" "}, testRoutes...),
	}.serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if sopts.ServerName != "n1" || sopts.Cluster.Name != DefaultClusterName || sopts.Cluster.Host != "127.0.0.2" || sopts.Cluster.Port != 16222 {
		t.Errorf("server name %q, cluster %+v", sopts.ServerName, sopts.Cluster)
	}
	if len(sopts.Routes) != 3 || sopts.Routes[2].Host != "127.0.0.1:16224" || sopts.Routes[0].Scheme != "nats-route" {
		t.Errorf("routes %v", sopts.Routes)
	}

	sopts, err = ServerOptions{DataDir: t.TempDir()}.serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if sopts.Cluster.Port != 0 || len(sopts.Routes) != 0 || sopts.Cluster.Name != "" {
		t.Errorf("a server without cluster options joined one: %+v %v", sopts.Cluster, sopts.Routes)
	}
}

func TestClusterOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ServerOptions
	}{
		{"routes without a cluster port", ServerOptions{Name: "n1", Routes: testRoutes}},
		{"cluster name without a cluster port", ServerOptions{Name: "n1", ClusterName: "c"}},
		{"no server name", ServerOptions{ClusterPort: 16222, Routes: testRoutes}},
		{"no routes", ServerOptions{Name: "n1", ClusterPort: 16222}},
		{"a route without a port", ServerOptions{Name: "n1", ClusterPort: 16222, Routes: []string{"nats-route://127.0.0.1"}}},
		{"a route of another scheme", ServerOptions{Name: "n1", ClusterPort: 16222, Routes: []string{"http://127.0.0.1:16222"}}},
	} {
		tc.opts.DataDir = t.TempDir()
		if _, err := tc.opts.serverOptions(); !errors.Is(err, ErrClusterOptions) {
			t.Errorf("%s: %v, want ErrClusterOptions", tc.name, err)
		}
	}
}

// TestClusterOptionsFromConfigFile keeps a configuration file's cluster
// block where the options set nothing and overrides it where they do.
func TestClusterOptionsFromConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "node.conf")
	body := fmt.Sprintf(`server_name: file-node
jetstream { store_dir: %q }
cluster {
  name: file-cluster
  listen: 127.0.0.1:16230
  routes: [nats-route://127.0.0.1:16230, nats-route://127.0.0.1:16231]
}
`, filepath.Join(dir, "store"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sopts, err := ServerOptions{ConfigFile: conf}.serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if sopts.ServerName != "file-node" || sopts.Cluster.Name != "file-cluster" || sopts.Cluster.Port != 16230 || len(sopts.Routes) != 2 {
		t.Errorf("file's cluster not kept: name %q, cluster %+v, routes %v", sopts.ServerName, sopts.Cluster, sopts.Routes)
	}
	sopts, err = ServerOptions{ConfigFile: conf, Name: "n2", ClusterName: "c", ClusterPort: 16240, Routes: testRoutes}.serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if sopts.ServerName != "n2" || sopts.Cluster.Name != "c" || sopts.Cluster.Port != 16240 || len(sopts.Routes) != 3 {
		t.Errorf("options did not override the file: name %q, cluster %+v, routes %v", sopts.ServerName, sopts.Cluster, sopts.Routes)
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("wrapped: %w", jetstream.ErrNoStreamResponse), true},
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{nats.ErrConnectionReconnecting, true},
		{jetstream.ErrServerShutdown, true},
		{jetstream.ErrConsumerLeadershipChanged, true},
		{jetstream.ErrJetStreamNotEnabledForAccount, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("nats: %w", &jetstream.APIError{Code: 500, ErrorCode: 10009, Description: "JetStream cluster can not handle request"}), true},
		{context.Canceled, false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrPermissionViolation, false},
		{nats.ErrMaxPayload, false},
		{jetstream.ErrStreamNotFound, false},
		{jetstream.ErrMsgNotFound, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, false},
		{errors.New("something else"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := Retry(ctx, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a call without a deadline of its own")
		}
		calls++
		if calls < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("transient twice, then done: err %v after %d calls", err, calls)
	}

	calls = 0
	err = Retry(ctx, func(context.Context) error { calls++; return jetstream.ErrStreamNotFound })
	if !errors.Is(err, jetstream.ErrStreamNotFound) || calls != 1 {
		t.Errorf("a permanent error: %v after %d calls", err, calls)
	}

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = Retry(cctx, func(context.Context) error { return nats.ErrNoResponders })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the caller's deadline: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Retry outlived the caller's deadline by %v", d)
	}
}
