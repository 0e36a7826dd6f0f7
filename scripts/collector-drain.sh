#!/usr/bin/env bash
# Measures collectors as the bottleneck, as separate processes: for each
# shard count N in SHARDS (default "1 2 4"), a fresh NATS server, the
# stand-in model, one LLM worker and ENV_WORKERS env workers (default 2)
# play one job of EPISODES GuessTheNumber episodes (default 8000, groups of
# 4) with no collector running, so every step waits in the steps stream;
# then N collector processes start, `collector --shard i/N`, and the script
# times how long they take to decide every episode (until `rollout run
# --submit-only` has read every trajectory). Prints episodes/s and the
# collectors' CPU seconds per count.
#
#   SHARDS="1 2 4" EPISODES=8000 scripts/collector-drain.sh
set -euo pipefail
cd "$(dirname "$0")/.."

episodes=${EPISODES:-8000}
nats_addr=${NATS_ADDR:-127.0.0.1:4334}
py=/usr/bin/python3
bin=$(mktemp -d)
work=$(mktemp -d)
go build -o "$bin/" ./cmd/...

pids=()
stop_all() {
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
}
trap 'stop_all; rm -rf "$bin" "$work"' EXIT
trap 'exit 130' INT TERM

# stream_msgs STREAM prints how many messages the stream holds, -1 when
# the status cannot be read.
stream_msgs() {
  { "$bin/rollout" status --nats "nats://$nats_addr" --json 2>/dev/null |
    "$py" -c 'import json,sys; d=json.load(sys.stdin); print(next((s["messages"] for s in d["streams"] if s["name"]==sys.argv[1]), -1))' "$1" 2>/dev/null; } ||
    echo -1
}

cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/t}' "/proc/$1/stat"; }

for n in ${SHARDS:-1 2 4}; do
  data="$work/data-$n"
  "$bin/rollout" server --listen "$nats_addr" --data-dir "$data" >/dev/null 2>&1 & pids+=($!)
  "$bin/rollout" toyllm --listen 127.0.0.1:8010 >/dev/null 2>&1 & pids+=($!)
  for _ in $(seq 100); do "$bin/collector" --nats "nats://$nats_addr" --init-streams --log-level warn 2>/dev/null && break; sleep 0.1; done
  "$bin/llmworker" --nats "nats://$nats_addr" --vllm http://127.0.0.1:8010 --log-level warn 2>/dev/null & pids+=($!)
  for _ in $(seq "${ENV_WORKERS:-2}"); do
    "$bin/envworker" --nats "nats://$nats_addr" --concurrency 512 --log-level warn 2>/dev/null & pids+=($!)
  done
  "$bin/rollout" run --nats "nats://$nats_addr" --submit-only --env game:GuessTheNumber-v0 \
    --episodes "$episodes" --n-samples 4 --concurrency "$episodes" --seed 1 \
    --out "$work/out-$n.jsonl" --log-level warn 2>/dev/null & run=$!
  # Played: every episode request acknowledged (the work queue is empty)
  # and the steps stream holding still.
  last=-1
  while :; do
    sleep 1
    queued=$(stream_msgs RF_EPISODES)
    steps=$(stream_msgs RF_STEPS)
    [ "$queued" = 0 ] && [ "$steps" = "$last" ] && [ "$steps" -gt 0 ] && break
    last=$steps
  done
  start=$(date +%s.%N)
  cpids=()
  for i in $(seq 0 $((n - 1))); do
    "$bin/collector" --nats "nats://$nats_addr" --shard "$i/$n" --log-level warn 2>/dev/null & cpids+=($!)
  done
  wait "$run"
  end=$(date +%s.%N)
  cpu=0
  for p in "${cpids[@]}"; do cpu=$(awk -v a="$cpu" -v b="$(cpu_seconds "$p")" 'BEGIN{print a+b}'); done
  lines=$(wc -l < "$work/out-$n.jsonl")
  printf 'collectors %d: %d steps, %d trajectories in %.2f s: %.0f episodes/s, collectors %.1f CPU s\n' "$n" "$steps" "$lines" \
    "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" \
    "$(awk -v a="$start" -v b="$end" -v e="$lines" 'BEGIN{print e/(b-a)}')" "$cpu"
  kill -TERM "${cpids[@]}" 2>/dev/null || true
  wait "${cpids[@]}" 2>/dev/null || true
  stop_all
done
