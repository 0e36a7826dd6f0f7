#!/usr/bin/env bash
# Measures what metrics cost: `rollout run` at zero model latency (the
# stand-in model) without and with --metrics, alternating A/B for ROUNDS
# (default 4) pairs of EPISODES (default 4096)-episode runs with the same
# seed, while a scraper reads /metrics every second as Prometheus would.
# Prints each run's turns/s, the medians and the cost in percent. The
# figure is in docs/observability.md.
set -euo pipefail
cd "$(dirname "$0")/.."

episodes=${EPISODES:-4096}
rounds=${ROUNDS:-4}
port=${PORT:-19464}
bin=$(mktemp -d)
scraper=
cleanup() {
  [[ -n $scraper ]] && kill "$scraper" 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/" ./cmd/rollout

# turns/s of one run: the summary line's turns/s field.
run() {
  "$bin/rollout" run --env game:GuessTheNumber-v0 --episodes "$episodes" --seed 1 \
    --out "$bin/out.jsonl" "$@" 2>&1 >/dev/null | sed -n 's/.* turns\/s=\([0-9.]*\) .*/\1/p' | tail -1
}

# Scrape every second for as long as the script runs (a refused connection
# between runs is fine).
( while :; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" || true; sleep 1; done ) &
scraper=$!

off=() on=()
for i in $(seq "$rounds"); do
  a=$(run)
  b=$(run --metrics "127.0.0.1:$port")
  off+=("$a") on+=("$b")
  echo "round $i: without ${a} turns/s, with --metrics ${b} turns/s"
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
m_off=$(median "${off[@]}")
m_on=$(median "${on[@]}")
awk -v a="$m_off" -v b="$m_on" 'BEGIN {printf "median: without %.0f turns/s, with --metrics %.0f turns/s: cost %.1f%%\n", a, b, (a-b)/a*100}'
