#!/usr/bin/env bash
# Starts a local rollfleet fleet as separate processes: a NATS server, the
# stand-in model (unless VLLM is set), one LLM worker, one env worker and a
# collector. Stop it with Ctrl-C. Then submit work from another shell:
#   go run ./cmd/rollout run --nats nats://127.0.0.1:4222 --submit-only \
#       --env game:GuessTheNumber-v0 --episodes 1000 --out trajectories.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."

nats_addr=${NATS_ADDR:-127.0.0.1:4222}
data=${DATA_DIR:-$(mktemp -d)}
bin=$(mktemp -d)
go build -o "$bin/" ./cmd/...

pids=()
cleanup() {
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait || true
  rm -rf "$bin"
}
trap cleanup EXIT INT TERM

"$bin/rollout" server --listen "$nats_addr" --data-dir "$data" & pids+=($!)
vllm=${VLLM:-}
if [ -z "$vllm" ]; then
  "$bin/rollout" toyllm --listen 127.0.0.1:8000 & pids+=($!)
  vllm=http://127.0.0.1:8000
fi
"$bin/llmworker" --nats "nats://$nats_addr" --vllm "$vllm" & pids+=($!)
"$bin/envworker" --nats "nats://$nats_addr" --concurrency "${CONCURRENCY:-512}" & pids+=($!)
"$bin/collector" --nats "nats://$nats_addr" & pids+=($!)
echo "fleet up: nats://$nats_addr, model $vllm, data in $data"
wait
