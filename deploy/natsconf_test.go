package deploy

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated deployment files (compose/nats.conf and its Kubernetes copy) from examples/nats/auth.conf")

// natsConfHeader is nats.conf's own part: what the three examples share and
// examples/nats/auth.conf, written for one local server, does not.
const natsConfHeader = `# rollfleet's NATS configuration for a fleet: the roles' users and
# permissions of examples/nats/auth.conf (see docs/security.md), shared by
# every node of a 3-node cluster. Generated: this header, then auth.conf from
# its permissions on with each password taken from the environment; after a
# change to auth.conf, run
#   go test ./deploy -run TestNATSConfGenerated -update
# (the deploy tests fail while the two differ). The same file serves the compose example,
# the Kubernetes example (deploy/kubernetes/nats-config.yaml holds a copy)
# and the systemd example (/etc/rollfleet/nats.conf). See docs/deployment.md.
#
# What differs per node or per deployment comes from "rollout server" flags:
#   --server-name NAME        unique in the cluster, kept across restarts
#   --listen 0.0.0.0:4222     client address
#   --data-dir DIR            JetStream store (jetstream.store_dir)
#   --cluster 0.0.0.0:6222    route address; --routes nats-route://...,
#   --cluster-name rollfleet  and the cluster's name
# The cluster block below holds only what every node shares: the routes'
# user.
#
# Passwords are not in this file: each "$RF_..._PASSWORD" below is read from
# the server's environment (deploy/compose/.env, the Kubernetes Secret, or
# /etc/rollfleet/server.env). NATS parses such a value as it would a value
# written here, so make each password letters, digits, "-" and "_" only,
# starting with a letter (e.g. "rf" followed by "openssl rand -hex 24").

# A long trajectory or a group can exceed NATS's default of 1 MiB.
max_payload: 8MB

# Read-only monitoring endpoints without authentication (/healthz, /varz,
# /jsz ...): the container healthchecks and Kubernetes probes use /healthz.
# Keep this port reachable from inside the deployment only.
http: 0.0.0.0:8222

# JetStream is on either way; its store is --data-dir. Without limits here,
# JetStream may use 75% of the memory and of the free disk space.
# sync_interval: always writes every message to disk before it is
# acknowledged, so a power loss or an OS crash loses nothing acknowledged
# ("rollout server" does so when the file sets nothing; nats-server's own
# default, 2m, loses what was acknowledged since the last sync: see
# docs/reliability.md, "Power loss"). --sync on the command line overrides
# it.
jetstream {
  sync_interval: always
}

# Routes between the nodes authenticate with this user: a node may join only
# with the password. NATS takes the password of the routes a node opens from
# its --routes URLs, so they carry the same: nats-route://route:PASSWORD@host:6222
# (routes learned from the other nodes use this block's).
cluster {
  authorization {
    user: route
    password: $RF_ROUTE_PASSWORD
  }
}

`

const (
	permissionsMark = "# --- Permissions"
	configMapFile   = "kubernetes/nats-config.yaml"
	configMapKey    = "  nats.conf: |\n"
)

var placeholderPassword = regexp.MustCompile(`\{user: ([a-z]+), password: "[^"]*"`)

// generateNATSConf builds nats.conf from auth.conf: the header, then
// auth.conf from its permissions on, each user's password replaced by the
// environment variable RF_<USER>_PASSWORD.
func generateNATSConf(auth string) (string, error) {
	i := strings.Index(auth, permissionsMark)
	if i < 0 {
		return "", fmt.Errorf("%s: no %q line to start from", authExample, permissionsMark)
	}
	body := auth[i:]
	n := 0
	body = placeholderPassword.ReplaceAllStringFunc(body, func(s string) string {
		n++
		user := placeholderPassword.FindStringSubmatch(s)[1]
		return "{user: " + user + ", password: $RF_" + strings.ToUpper(user) + "_PASSWORD"
	})
	if n == 0 || strings.Contains(body, "CHANGE-ME") {
		return "", fmt.Errorf("%s: users not of the form {user: NAME, password: \"...\"}", authExample)
	}
	return natsConfHeader + body, nil
}

// generateConfigMap puts conf into the Kubernetes ConfigMap file, keeping
// the file's head.
func generateConfigMap(cm, conf string) (string, error) {
	i := strings.Index(cm, configMapKey)
	if i < 0 {
		return "", fmt.Errorf("%s: no %q", configMapFile, strings.TrimSpace(configMapKey))
	}
	var b strings.Builder
	b.WriteString(cm[:i+len(configMapKey)])
	for _, line := range strings.SplitAfter(conf, "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString(strings.TrimLeft(line, " \t"))
			continue
		}
		b.WriteString("    " + line)
	}
	return b.String(), nil
}

// TestNATSConfGenerated checks that compose/nats.conf and the Kubernetes
// ConfigMap are what examples/nats/auth.conf generates; with -update it
// rewrites them.
func TestNATSConfGenerated(t *testing.T) {
	conf, err := generateNATSConf(readFile(t, authExample))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := generateConfigMap(readFile(t, configMapFile), conf)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{natsConf: conf, configMapFile: cm}
	for _, path := range sortedKeys(files) {
		if *update {
			if err := os.WriteFile(path, []byte(files[path]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if readFile(t, path) != files[path] {
			t.Errorf("deploy/%s is not what %s generates: run go test ./deploy -run TestNATSConfGenerated -update", path, authExample)
		}
	}
}
