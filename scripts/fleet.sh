#!/usr/bin/env bash
# Starts a local rollfleet fleet as separate processes: a NATS server, the
# stand-in model (unless VLLM is set), one LLM worker, one env worker and a
# collector. Stop it with Ctrl-C. Then submit work from another shell:
#   go run ./cmd/rollout run --nats nats://127.0.0.1:4222 --submit-only \
#       --env game:GuessTheNumber-v0 --episodes 1000 --out trajectories.jsonl
#
# With JOBS=N it is the standing-fleet benchmark instead: a trainer-side
# durable consumer (`rollout consume --kind groups`) reads and acknowledges
# every group, N back-to-back jobs of EPISODES episodes (default 50000) are
# submitted with `rollout run --submit-only`, and each job's wall time and
# the data dir's size after it are printed; then the fleet stops.
#
# ENV_WORKERS and LLM_WORKERS (default 1 each) start that many env worker
# and LLM worker processes, each env worker taking up to CONCURRENCY (512)
# episodes; TOY_FLAGS are extra flags of the stand-in model (for instance
# "--latency 10ms --max-concurrent 1024" for a modelled GPU server).
# COLLECTORS=N (default 1) starts N collectors, each on one shard of N
# (`collector --shard i/N`), which split the steps stream by group.
# SYNC is the NATS server's --sync (default always; 2m is nats-server's
# own default, which a power loss makes lose acknowledged writes).
set -euo pipefail
cd "$(dirname "$0")/.."

nats_addr=${NATS_ADDR:-127.0.0.1:4222}
data=${DATA_DIR:-$(mktemp -d)}
bin=$(mktemp -d)
go build -o "$bin/" ./cmd/...

pids=()
names=()
cleanup() {
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait || true
  rm -rf "$bin"
}
trap cleanup EXIT INT TERM

"$bin/rollout" server --listen "$nats_addr" --data-dir "$data" --sync "${SYNC:-always}" & pids+=($!); names+=(server)
vllm=${VLLM:-}
if [ -z "$vllm" ]; then
  # shellcheck disable=SC2086 # TOY_FLAGS is a list of flags
  "$bin/rollout" toyllm --listen 127.0.0.1:8000 ${TOY_FLAGS:-} & pids+=($!); names+=(toyllm)
  vllm=http://127.0.0.1:8000
fi
for i in $(seq "${LLM_WORKERS:-1}"); do
  "$bin/llmworker" --nats "nats://$nats_addr" --vllm "$vllm" & pids+=($!); names+=("llmworker$i")
done
for i in $(seq "${ENV_WORKERS:-1}"); do
  "$bin/envworker" --nats "nats://$nats_addr" --concurrency "${CONCURRENCY:-512}" & pids+=($!); names+=("envworker$i")
done
collectors=${COLLECTORS:-1}
for i in $(seq 0 $((collectors - 1))); do
  "$bin/collector" --nats "nats://$nats_addr" --shard "$i/$collectors" & pids+=($!); names+=("collector$i")
done
echo "fleet up: nats://$nats_addr, model $vllm, data in $data"

jobs=${JOBS:-0}
if [ "$jobs" -eq 0 ]; then
  wait
  exit
fi

episodes=${EPISODES:-50000}
out=$(mktemp -d)
"$bin/rollout" consume --nats "nats://$nats_addr" --kind groups --durable trainer --every 30s --log-level warn \
  2> >(tee "$out/consume.log" >&2) & pids+=($!); names+=(consumer)
# The trainer's consumer exists before the first job, which then leaves the groups to it.
for _ in $(seq 300); do grep -q 'reading groups' "$out/consume.log" 2>/dev/null && break; sleep 0.1; done
for job in $(seq 1 "$jobs"); do
  start=$(date +%s.%N)
  "$bin/rollout" run --nats "nats://$nats_addr" --submit-only --env game:GuessTheNumber-v0 \
    --episodes "$episodes" --concurrency "$(( ${CONCURRENCY:-512} * ${ENV_WORKERS:-1} ))" --seed "$job" \
    --out "$out/job$job.jsonl" 2>&1 | grep -E '^episodes=|stream full' || true
  end=$(date +%s.%N)
  lines=$(wc -l < "$out/job$job.jsonl")
  # The trainer may still be reading the job's last groups, and the
  # collector reclaims the emptied steps stream's blocks within 5 s: the
  # data dir is measured once its size holds still for 8 s (at most a minute).
  size=$(du -sb "$data" | cut -f1)
  still=0
  for _ in $(seq 30); do
    sleep 2
    now=$(du -sb "$data" | cut -f1)
    if [ "$now" = "$size" ]; then still=$((still + 1)); else still=0; fi
    [ "$still" -ge 4 ] && break
    size=$now
  done
  printf 'job %d: %d trajectories in %.1f s; data dir %s bytes\n' "$job" "$lines" \
    "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" "$size"
  # Where the bytes are, by stream: file store blocks of removed messages
  # are reclaimed lazily, so the split shows which stream holds them.
  (cd "$data"/jetstream/*/streams && du -sb -- * | awk '{printf "  %s %s", $2, $1} END {print ""}')
  rm -f "$out/job$job.jsonl"
  # Each process's CPU seconds so far, resident memory now and at its peak:
  # a process that keeps finished work shows it growing job after job.
  tck=$(getconf CLK_TCK)
  for i in "${!pids[@]}"; do
    p=${pids[$i]}
    [ -r "/proc/$p/stat" ] || continue
    cpu=$(awk -v t="$tck" '{printf "%.1f", ($14+$15)/t}' "/proc/$p/stat")
    rss=$(awk '/VmRSS/{print $2}' "/proc/$p/status")
    hwm=$(awk '/VmHWM/{print $2}' "/proc/$p/status")
    printf '  %-10s cpu %7s s  rss %6d KiB  peak %6d KiB\n' "${names[$i]}" "$cpu" "$rss" "$hwm"
  done
done
rm -rf "$out"
