#!/usr/bin/env bash
# Measures rollfleet's speed and memory floor: end-to-end turns/s of
# `rollout run` (stand-in model at zero latency), the memory an in-flight
# episode costs an env worker, and the resident memory of `rollout run` at
# 10,000 concurrent episodes and over a long run, with the stand-in model in
# its own process. Figures land in docs/performance.md.
#
# PARTS selects what runs (default "throughput go memory"; "long" adds the
# long run, "collectors" the collector shards' drain rates). Memory knobs: EPISODES_HIGH (20000) episodes at
# CONCURRENCY_HIGH (10000) with the model at TOY_LATENCY (1ms) per generated
# token; EPISODES_MEM (50000) episodes at the default concurrency, RSS
# sampled after 10,000 and at the end. The long run: EPISODES_LONG (200000)
# episodes in one run, reporting each process's peak RSS and the data dir's
# peak and final size.
set -euo pipefail
cd "$(dirname "$0")/.."

episodes=${EPISODES:-16384}
parts=${PARTS:-throughput go memory}
bin=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/" ./cmd/rollout ./cmd/collector

if [[ " $parts " == *" throughput "* ]]; then
  echo "== rollout run, $episodes episodes, 3 runs (summary lines)"
  for seed in 1 2 3; do
    "$bin/rollout" run --env game:GuessTheNumber-v0 --episodes "$episodes" --concurrency 1024 \
      --seed "$seed" --out "$bin/out.jsonl" 2>&1 | grep '^episodes='
  done
fi

if [[ " $parts " == *" go "* ]]; then
  echo "== go benchmarks"
  go test -run '^$' -bench BenchmarkRollout -benchtime 3x ./fleet/
  go test -run '^$' -bench BenchmarkInFlightEpisodeMemory -benchtime 1x ./actors/env/
  go test -run '^$' -bench 'BenchmarkTokenCacheMemory' -benchtime 1x ./actors/llm/
  go test -run '^$' -bench 'BenchmarkStepIDMemory' -benchtime 1x ./bus/
fi

if [[ " $parts " == *" collectors "* ]]; then
  echo "== collector shards draining a backlog"
  go test -run '^$' -bench ShardedDrain -benchtime 3x ./actors/collector/
  SHARDS="1 2 4" scripts/collector-drain.sh
fi

[[ " $parts " == *" memory "* ]] || exit 0

kb() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status" 2>/dev/null || true; }
mb() { echo $(( ${1:-0} / 1024 )); }

# start_toyllm LATENCY: starts the stand-in model in its own process; sets
# toy (its pid) and toy_url.
start_toyllm() {
  "$bin/rollout" toyllm --listen 127.0.0.1:0 --latency "$1" --log-level warn >"$bin/toyllm.out" 2>&1 &
  toy=$!
  pids+=("$toy")
  toy_url=
  for _ in $(seq 100); do
    toy_url=$(grep -o 'http://[0-9.:]*' "$bin/toyllm.out" || true)
    [[ -n $toy_url ]] && break
    sleep 0.1
  done
  [[ -n $toy_url ]] || { echo "stand-in model did not start" >&2; exit 1; }
}

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# sample_dir DIR FILE: keeps the peak size of DIR in FILE, sampled every
# 2 s until killed.
sample_dir() {
  local peak=0 size
  while true; do
    size=$(du -sb "$1" 2>/dev/null | cut -f1 || echo 0)
    if (( ${size:-0} > peak )); then peak=$size; echo "$peak" >"$2"; fi
    sleep 2
  done
}

# sample_run OUT PID: samples the run's RSS every 0.2 s until it exits,
# counting the trajectories written to OUT so far; prints the RSS after
# 10,000 episodes and at the last sample, and the peak.
sample_run() {
  local out=$1 pid=$2 lines=0 size=0 new rss hwm=0 at10k=
  local last_rss=0 last_lines=0
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(kb "$pid" VmRSS)
    new=$(stat -c %s "$out" 2>/dev/null || echo 0)
    if (( new > size )); then
      lines=$(( lines + $({ tail -c +"$((size + 1))" "$out" || true; } | head -c "$((new - size))" | wc -l) ))
      size=$new
    fi
    if [[ -n $rss ]]; then
      last_rss=$rss last_lines=$lines
      hwm=$(kb "$pid" VmHWM)
      if [[ -z $at10k ]] && (( lines >= 10000 )); then at10k="$lines $rss"; fi
    fi
    sleep 0.2
  done
  if [[ -n $at10k ]]; then
    echo "rss after $(cut -d' ' -f1 <<<"$at10k") episodes: $(mb "$(cut -d' ' -f2 <<<"$at10k")") MB"
  fi
  echo "rss at the last sample, after $last_lines episodes: $(mb "$last_rss") MB"
  echo "peak rss: $(mb "$hwm") MB"
}

# mem_run NAME EPISODES CONCURRENCY LATENCY [run flags]: one run of
# GuessTheNumber against the stand-in model in its own process.
mem_run() {
  local name=$1 n=$2 conc=$3 lat=$4
  shift 4
  start_toyllm "$lat"
  local out="$bin/$name.jsonl"
  : >"$out"
  "$bin/rollout" run --env game:GuessTheNumber-v0 --episodes "$n" --concurrency "$conc" --seed 1 \
    --vllm "$toy_url" --out - "$@" >"$out" 2>"$bin/$name.err" &
  local run=$!
  pids+=("$run")
  echo "rollout run:"
  sample_run "$out" "$run"
  wait "$run" || true
  grep '^episodes=' "$bin/$name.err" || tail -3 "$bin/$name.err"
  echo "toyllm peak rss: $(mb "$(kb "$toy" VmHWM)") MB"
  stop "$toy"
}

high=${EPISODES_HIGH:-20000}
conc=${CONCURRENCY_HIGH:-10000}
lat=${TOY_LATENCY:-1ms}
echo "== memory: $high episodes at concurrency $conc, stand-in model at $lat per token in its own process"
mem_run high "$high" "$conc" "$lat"

n=${EPISODES_MEM:-50000}
echo "== memory: one run of $n episodes at the default concurrency (stand-in model at zero latency)"
mem_run mem "$n" 256 0 --data-dir "$bin/data"
rm -rf "$bin/data"

if [[ " $parts " == *" long "* ]]; then
  long=${EPISODES_LONG:-200000}
  echo "== long run: $long episodes in one run at the default concurrency (stand-in model in its own process)"
  mkdir -p "$bin/data"
  sample_dir "$bin/data" "$bin/datapeak" &
  dirpid=$!
  pids+=("$dirpid")
  mem_run long "$long" 256 0 --data-dir "$bin/data"
  kill "$dirpid" 2>/dev/null || true
  wait "$dirpid" 2>/dev/null || true
  echo "trajectories written: $(wc -l <"$bin/long.jsonl")"
  echo "data dir: peak $(cat "$bin/datapeak") bytes, at the end $(du -sb "$bin/data" | cut -f1) bytes"
  rm -rf "$bin/data"
fi
