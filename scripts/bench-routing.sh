#!/usr/bin/env bash
# Measures the LLM worker's routing policies (--llm-routing) where prefix
# caching decides throughput: multi-turn games whose prompts grow to
# thousands of tokens, played by `rollout run --vllm` against S stand-in
# model servers (`rollout toyllm`), each its own process with vLLM's
# automatic prefix cache, prefill time per uncached prompt token and
# decode time per generated token. For each servers × concurrency ×
# policy cell, with fresh servers, it prints a markdown row: the prefix
# cache hit rate the servers report (Σ vllm:prefix_cache_hits_total /
# Σ vllm:prefix_cache_queries_total over the run), the achievable hit rate
# (bench/prefixhits: every prompt token computed before on any server, an
# unbounded cache), the mean prompt, turns/s, the servers' mean busy
# fraction (toyllm:running_seconds_total over the run's time and
# --max-concurrent slots), failures and the load average. The policies of
# one servers × concurrency pair run back to back.
#
# The servers split a fixed budget, as a cluster's GPUs would be shared
# out: TOTAL_SLOTS (16) sequences at once and TOTAL_KV_TOKENS (524288) of
# KV cache over all of them, so 4 servers get 4 slots and 131072 tokens
# each, 8 get 2 and 65536. Each request takes PREFILL (200us) per prompt
# token its server's cache does not hold, then LATENCY (4ms) per generated
# token, in its slot (the stand-in does not batch: a slot is a share of a
# GPU).
#
# Knobs: SERVERS ("4 8"), CONCURRENCY ("256 1024"), POLICIES ("sticky
# sticky-wait sticky-wait:10s least-loaded round-robin"; POLICY:WAIT sets
# --llm-routing-wait), EPISODES_PER_SLOT (2: each cell plays that many
# times its concurrency in episodes), GAME (game:Sudoku-v0-hard),
# MAX_LENGTH (4096), TOTAL_SLOTS, TOTAL_KV_TOKENS, PREFILL, LATENCY,
# RUN_FLAGS (extra `rollout run` flags), SEED (1), ROLLOUT (a rollout
# binary to use instead of building one).
set -euo pipefail
cd "$(dirname "$0")/.."

servers_list=${SERVERS:-4 8}
concurrency_list=${CONCURRENCY:-256 1024}
policies=${POLICIES:-sticky sticky-wait sticky-wait:10s least-loaded round-robin}
per_slot=${EPISODES_PER_SLOT:-2}
game=${GAME:-game:Sudoku-v0-hard}
max_length=${MAX_LENGTH:-4096}
total_slots=${TOTAL_SLOTS:-16}
total_kv=${TOTAL_KV_TOKENS:-524288}
prefill=${PREFILL:-200us}
latency=${LATENCY:-4ms}
seed=${SEED:-1}

work=$(mktemp -d)
pids=()
stop_servers() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'stop_servers; rm -rf "$work"' EXIT
go build -o "$work/" ./bench/prefixhits
if [[ -n ${ROLLOUT:-} ]]; then
  cp "$ROLLOUT" "$work/rollout"
else
  go build -o "$work/" ./cmd/rollout
fi

# start_servers S: starts S stand-in servers with their share of the
# budget; sets urls (comma-separated) and max_concurrent.
start_servers() {
  urls=
  max_concurrent=$((total_slots / $1))
  local kv=$((total_kv / $1))
  for i in $(seq "$1"); do
    "$work/rollout" toyllm --listen 127.0.0.1:0 --log-level warn --max-concurrent "$max_concurrent" \
      --latency "$latency" --prefill-latency "$prefill" --kv-cache-tokens "$kv" >"$work/toy$i.out" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$1"); do
    local u=
    for _ in $(seq 100); do
      u=$(grep -o 'http://[0-9.:]*' "$work/toy$i.out" || true)
      [[ -n $u ]] && break
      sleep 0.1
    done
    [[ -n $u ]] || { echo "stand-in model $i did not start" >&2; exit 1; }
    urls+=${urls:+,}$u
  done
}

# scrape: prints the servers' summed prefix cache queries and hits and
# running seconds.
scrape() {
  local u
  for u in ${urls//,/ }; do curl -fsS "$u/metrics"; done | awk '
    /^vllm:prefix_cache_queries_total/ {q += $2}
    /^vllm:prefix_cache_hits_total/ {h += $2}
    /^toyllm:running_seconds_total/ {r += $2}
    END {printf "%d %d %.3f\n", q, h, r}'
}

field() { grep -o "$1=[^ ]*" <<<"$2" | cut -d= -f2; }

echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3); game $game, --max-length $max_length;" \
  "servers share $total_slots slots and $total_kv KV-cache tokens; --prefill-latency $prefill --latency $latency"
echo
echo "| policy | servers | in flight | episodes | hit rate | achievable | mean prompt | turns/s | busy | failures | load |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for c in $concurrency_list; do
  for s in $servers_list; do
    for pw in $policies; do
      p=${pw%%:*} rwait=
      [[ $pw == *:* ]] && rwait=${pw#*:}
      start_servers "$s"
      episodes=$((c * per_slot))
      read -r q0 h0 r0 < <(scrape)
      t0=$(date +%s.%N)
      summary=$("$work/rollout" run --vllm "$urls" --env "$game" --max-length "$max_length" \
        --episodes "$episodes" --concurrency "$c" --seed "$seed" --llm-routing "$p" \
        ${rwait:+--llm-routing-wait "$rwait"} ${RUN_FLAGS:-} \
        --out "$work/out.jsonl" 2>&1 | grep '^episodes=' || true)
      t1=$(date +%s.%N)
      read -r q1 h1 r1 < <(scrape)
      load=$(cut -d' ' -f1 /proc/loadavg)
      stop_servers
      if [[ -z $summary ]]; then
        echo "| $pw | $s | $c | $episodes | run failed | | | | | | $load |"
        continue
      fi
      ach=$("$work/prefixhits" "$work/out.jsonl")
      awk -v p="$pw" -v s="$s" -v c="$c" -v e="$episodes" -v q=$((q1 - q0)) -v h=$((h1 - h0)) \
        -v r="$(awk -v a="$r0" -v b="$r1" 'BEGIN {print b - a}')" -v secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
        -v m="$max_concurrent" -v ach="$(field achievable_hit_rate "$ach")" -v prompt="$(field mean_prompt "$ach")" \
        -v tps="$(field turns/s "$summary")" -v fail="$(field failures "$summary")" -v load="$load" 'BEGIN {
          printf "| %s | %d | %d | %d | %.1f%% | %.1f%% | %d | %s | %.0f%% | %s | %s |\n",
            p, s, c, e, 100 * h / q, 100 * ach, prompt, tps, 100 * r / (secs * s * m), fail, load
        }'
    done
  done
done
