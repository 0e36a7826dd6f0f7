#!/usr/bin/env bash
# Measures rollfleet's speed and memory floor: end-to-end turns/s of
# `rollout run` (stand-in model at zero latency) and the memory an in-flight
# episode costs an env worker. Figures land in docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

episodes=${EPISODES:-16384}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/rollout" ./cmd/rollout

echo "== rollout run, $episodes episodes, 3 runs (summary lines)"
for seed in 1 2 3; do
  "$bin/rollout" run --env game:GuessTheNumber-v0 --episodes "$episodes" --concurrency 1024 \
    --seed "$seed" --out "$bin/out.jsonl" 2>&1 | grep '^episodes='
done

echo "== go benchmarks"
go test -run '^$' -bench BenchmarkRollout -benchtime 3x ./fleet/
go test -run '^$' -bench BenchmarkInFlightEpisodeMemory -benchtime 1x ./actors/env/
