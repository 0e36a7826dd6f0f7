package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/internal/tokenizertest"
	"github.com/rollfleet/rollfleet/toyllm"
)

// parseServer parses a rollout server command line as main does.
func parseServer(t *testing.T, args ...string) *serverCmd {
	t.Helper()
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"server"}, args...)); err != nil {
		t.Fatal(err)
	}
	return &c.Server
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServerListensWhereTheConfigSays starts the server from a
// configuration file with a listen address: without --listen the file's
// address wins, with --listen the flag does.
func TestServerListensWhereTheConfigSays(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "server.conf")
	body := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n", port, filepath.Join(dir, "store"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	opts, err := parseServer(t, "--config", conf).options()
	if err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Addr().(*net.TCPAddr)
	bus.Shutdown(s)
	if got.Port != port || !got.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("listening on %v, the file says 127.0.0.1:%d", got, port)
	}

	opts, err = parseServer(t, "--config", conf, "--listen", "127.0.0.1:0").options()
	if err != nil {
		t.Fatal(err)
	}
	s, err = bus.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	got = s.Addr().(*net.TCPAddr)
	bus.Shutdown(s)
	if got.Port == port {
		t.Errorf("--listen 127.0.0.1:0 did not override the file's port %d", port)
	}
}

// TestServerListenDefault checks the address without --listen and without a
// configuration file.
func TestServerListenDefault(t *testing.T) {
	opts, err := parseServer(t, "--data-dir", t.TempDir()).options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.1" || opts.Port != 4222 {
		t.Errorf("default listen %s:%d, want 127.0.0.1:4222", opts.Host, opts.Port)
	}
}

// TestServerClusterFlags maps the cluster flags onto the server options,
// --name included as the old spelling of --server-name.
func TestServerClusterFlags(t *testing.T) {
	routes := []string{"nats-route://10.0.0.1:6222", "nats-route://10.0.0.2:6222", "nats-route://10.0.0.3:6222"}
	for _, nameFlag := range []string{"--server-name", "--name"} {
		opts, err := parseServer(t, "--data-dir", "d", nameFlag, "n2", "--cluster", "0.0.0.0:6222",
			"--routes", routes[0]+","+routes[1]+","+routes[2]).options()
		if err != nil {
			t.Fatal(err)
		}
		if opts.Name != "n2" || opts.ClusterHost != "0.0.0.0" || opts.ClusterPort != 6222 || !slices.Equal(opts.Routes, routes) || opts.ClusterName != "" {
			t.Errorf("%s: options %+v", nameFlag, opts)
		}
	}
	opts, err := parseServer(t, "--server-name", "n1", "--cluster", "127.0.0.1:0", "--cluster-name", "c1", "--routes", routes[0]).options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.ClusterPort != -1 || opts.ClusterName != "c1" {
		t.Errorf("options %+v", opts)
	}
	if _, err := parseServer(t, "--cluster", "nohost").options(); err == nil {
		t.Error("--cluster without a port accepted")
	}
	// Routes without --cluster: the server refuses to start.
	opts, err = parseServer(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--server-name", "n1", "--routes", routes[0]).options()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := bus.StartServer(opts); !errors.Is(err, bus.ErrClusterOptions) {
		if err == nil {
			bus.Shutdown(s)
		}
		t.Errorf("routes without --cluster: %v, want ErrClusterOptions", err)
	}
}

// parseToyllm parses a rollout toyllm command line as main does.
func parseToyllm(t *testing.T, args ...string) *toyllmCmd {
	t.Helper()
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"toyllm"}, args...)); err != nil {
		t.Fatal(err)
	}
	return &c.Toyllm
}

// TestToyllmSkillFlags checks that --skill and --weight-version reach the
// stand-in's options, and that a skill out of range is refused.
func TestToyllmSkillFlags(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		skill       float64
		version     string
		wantVersion string
		bad         bool
	}{
		{args: nil, wantVersion: "default"},
		{args: []string{"--skill", "8.5", "--weight-version", "step-3"}, skill: 8.5, version: "step-3", wantVersion: "step-3"},
		{args: []string{"--skill", "30"}, skill: 30, wantVersion: "default"},
		{args: []string{"--skill", "31"}, bad: true},
		{args: []string{"--skill=-1"}, bad: true},
	} {
		opts, err := parseToyllm(t, tc.args...).options()
		if tc.bad {
			if err == nil {
				t.Errorf("%v: no error", tc.args)
			}
			continue
		}
		if err != nil || opts.Skill != tc.skill || opts.WeightVersion != tc.version {
			t.Errorf("%v: options %+v, %v", tc.args, opts, err)
			continue
		}
		opts.Logger = slog.New(slog.DiscardHandler)
		ts := httptest.NewServer(toyllm.New(opts).Handler())
		resp, err := http.Get(ts.URL + "/weight_info")
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			WeightVersion string `json:"weight_version"`
		}
		err = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		ts.Close()
		if err != nil || info.WeightVersion != tc.wantVersion {
			t.Errorf("%v: weight_info %+v, %v; want %q", tc.args, info, err, tc.wantVersion)
		}
	}
}

// TestToyllmTokenizerFlag checks that --tokenizer gives the stand-in a real
// model's vocabulary, and that a directory without a tokenizer, or a
// --chat-template without --tokenizer, is refused before serving.
func TestToyllmTokenizerFlag(t *testing.T) {
	qwen := tokenizertest.Dir(t, "qwen3")
	template := filepath.Join(t.TempDir(), "chat.jinja")
	if err := os.WriteFile(template, []byte("{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		want    []int32 // the tokens of "<|im_start|>user" on /tokenize
	}{
		{name: "toy vocabulary", want: toyllm.Tokenizer{}.Encode("<|im_start|>user")},
		{name: "qwen3", args: []string{"--tokenizer", qwen}, want: []int32{151644, 872}},
		{name: "qwen3 with a template", args: []string{"--tokenizer", qwen, "--chat-template", template}, want: []int32{151644, 872}},
		{name: "no tokenizer", args: []string{"--tokenizer", t.TempDir()}, wantErr: "tokenizer.json"},
		{name: "template alone", args: []string{"--chat-template", template}, wantErr: "--chat-template needs --tokenizer"},
	} {
		opts, err := parseToyllm(t, tc.args...).options()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		opts.Logger = slog.New(slog.DiscardHandler)
		ts := httptest.NewServer(toyllm.New(opts).Handler())
		resp, err := http.Post(ts.URL+"/tokenize", "application/json", strings.NewReader(`{"prompt": "<|im_start|>user"}`))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Tokens []int32 `json:"tokens"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		ts.Close()
		if err != nil || !slices.Equal(r.Tokens, tc.want) {
			t.Errorf("%s: tokens %v, %v; want %v", tc.name, r.Tokens, err, tc.want)
		}
	}
}

// TestToyllmReasoningFlag checks that --reasoning reaches the options: with
// Qwen3's tokenizer the stand-in opens a <think> block itself.
func TestToyllmReasoningFlag(t *testing.T) {
	qwen := tokenizertest.Dir(t, "qwen3")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		think   bool // whether the reply opens a reasoning block
	}{
		{name: "qwen3", args: []string{"--tokenizer", qwen}},
		{name: "qwen3 reasoning", args: []string{"--tokenizer", qwen, "--reasoning"}, think: true},
		{name: "toy vocabulary", args: []string{"--reasoning"}, wantErr: "--reasoning needs --tokenizer"},
	} {
		opts, err := parseToyllm(t, tc.args...).options()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		opts.Logger = slog.New(slog.DiscardHandler)
		ts := httptest.NewServer(toyllm.New(opts).Handler())
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages": [{"role": "user", "content": "guess a number between 1 and 9"}], "temperature": 0}`))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		ts.Close()
		if err != nil || len(r.Choices) != 1 || strings.HasPrefix(r.Choices[0].Message.Content, "<think>\n") != tc.think {
			t.Errorf("%s: reply %+v, %v; want one opening a think block: %v", tc.name, r, err, tc.think)
		}
	}
}
