#!/usr/bin/env bash
# Checks the deployment files (Dockerfile, deploy/compose, deploy/kubernetes,
# deploy/systemd) with what this machine has, and says what it skips:
#
#   1. the Go tests of package deploy (YAML, every command line against the
#      binaries' flag parser, nats.conf with nats-server's parser, the three
#      examples against each other, the compose fleet run as local
#      processes); --skip-go-test leaves them to "go test ./..." (CI);
#   2. the YAML parses with a second parser (python3-yaml), if present;
#   3. the Kubernetes example builds with "kubectl kustomize", if present;
#   4. "systemd-analyze verify" on the units and the drop-in, if present,
#      with the binaries where the units expect them;
#   5. hadolint on the Dockerfile and shellcheck on this script, if present;
#   6. only when a container engine answers ("docker info"): the image
#      builds, and "docker compose config" accepts the compose file.
#
# Usage: scripts/lint-deploy.sh [--skip-go-test]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

skip_go_test=false
for arg in "$@"; do
  case "$arg" in
    --skip-go-test) skip_go_test=true ;;
    *) echo "usage: $0 [--skip-go-test]" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
skip() { echo "skip: $*"; }

echo "== deploy: Go tests"
if $skip_go_test; then
  skip "go test ./deploy/ (--skip-go-test: go test ./... runs it)"
else
  go test -count=1 ./deploy/ ./cmd/healthcheck/ || fail "go test ./deploy/"
fi

echo "== deploy: YAML (python3-yaml)"
if /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  /usr/bin/python3 - deploy/compose/compose.yaml deploy/kubernetes/*.yaml <<'EOF' || fail "YAML"
import sys, yaml
bad = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        if not docs:
            raise ValueError("no document")
        print(f"ok   {path} ({len(docs)} document{'s' if len(docs) > 1 else ''})")
    except Exception as e:
        print(f"bad  {path}: {e}")
        bad = 1
sys.exit(bad)
EOF
else
  skip "python3-yaml is not installed (apt-get install python3-yaml); the Go tests parse the YAML too"
fi

echo "== deploy: kubectl kustomize"
if command -v kubectl >/dev/null 2>&1; then
  if kubectl kustomize deploy/kubernetes >"$work/kubernetes.yaml" 2>"$work/kustomize.err"; then
    echo "ok   deploy/kubernetes: $(grep -c '^kind:' "$work/kubernetes.yaml") objects"
  else
    cat "$work/kustomize.err"; fail "kubectl kustomize deploy/kubernetes"
  fi
else
  skip "kubectl is not installed"
fi

echo "== deploy: systemd-analyze verify"
if command -v systemd-analyze >/dev/null 2>&1; then
  bin="$work/bin"
  units="$work/units"
  mkdir -p "$bin" "$units/rollfleet-server@.service.d"
  CGO_ENABLED=0 go build -o "$bin/" ./cmd/rollout ./cmd/envworker ./cmd/llmworker ./cmd/collector ./cmd/healthcheck
  # verify wants the ExecStart binaries to exist: point the copies at the
  # ones just built.
  for unit in deploy/systemd/*.service; do
    sed "s#/usr/local/bin/#$bin/#g" "$unit" >"$units/$(basename "$unit")"
  done
  sed "s#/usr/local/bin/#$bin/#g" deploy/systemd/single-node.conf >"$units/rollfleet-server@.service.d/single-node.conf"
  # Any message is a finding: verify exits 0 on unknown keys and bad values.
  out=$(cd "$units" && systemd-analyze verify --man=no ./*.service 2>&1) || fail "systemd-analyze verify"
  # The drop-in, through the unit search path.
  out2=$(SYSTEMD_UNIT_PATH="$units:" systemd-analyze verify --man=no rollfleet-server@nats-1.service 2>&1) || fail "systemd-analyze verify (single-node drop-in)"
  if [ -n "$out$out2" ]; then
    printf '%s\n%s\n' "$out" "$out2"; fail "systemd-analyze verify reported problems"
  else
    units_checked=(deploy/systemd/*.service)
    echo "ok   deploy/systemd: ${#units_checked[@]} units and the single-node drop-in"
  fi
else
  skip "systemd-analyze is not installed"
fi

echo "== deploy: hadolint, shellcheck"
if command -v hadolint >/dev/null 2>&1; then
  hadolint Dockerfile || fail "hadolint Dockerfile"
else
  skip "hadolint is not installed (not packaged by Debian)"
fi
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck scripts/lint-deploy.sh || fail "shellcheck scripts/lint-deploy.sh"
else
  skip "shellcheck is not installed (apt-get install shellcheck)"
fi

echo "== deploy: container engine"
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  docker build -t rollfleet:lint . || fail "docker build"
  docker run --rm rollfleet:lint rollout --help >/dev/null || fail "the image does not run rollout"
  if docker compose version >/dev/null 2>&1; then
    cp deploy/compose/.env.example "$work/.env"
    docker compose --env-file "$work/.env" -f deploy/compose/compose.yaml config -q || fail "docker compose config"
  else
    skip "docker compose is not installed"
  fi
else
  skip "no container engine answers (docker info): the image build and docker compose config are not checked"
fi

if [ "$failed" -ne 0 ]; then
  echo "lint-deploy: FAILED"
  exit 1
fi
echo "lint-deploy: ok"
