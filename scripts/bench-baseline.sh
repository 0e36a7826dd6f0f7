#!/usr/bin/env bash
# Measures rollfleet side by side with an OpenRLHF-style Python asyncio agent
# loop (bench/baseline/agent_loop.py: one coroutine per episode, a semaphore,
# one aiohttp session, the same completion requests), both playing GuessTheNumber
# against one stand-in model server (`rollout toyllm`) in its own process.
# The runs alternate rollfleet, Python, rollfleet, Python, ... in one
# invocation; each reports turns/s, CPU per turn of its own process and of
# the model server apart, peak RSS, turns per episode and the server's busy
# fraction, and the medians end with the ratios. Figures land in
# docs/performance.md.
#
# Knobs: EPISODES (2000) per run, CONCURRENCY (512; comma-separated, e.g.
# "512,10000"), MODELS ("0,10ms/256": the stand-in at zero latency, then at
# 10 ms per generated token with 256 sequences at once), ROUNDS (2) A/B
# pairs per setting, RUN_FLAGS (extra `rollout run` flags, e.g.
# "--llm-max-in-flight 64").
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import aiohttp' 2>/dev/null; then
  echo "the Python side needs aiohttp: apt-get install -y python3-aiohttp" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/" ./cmd/rollout
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(go version | cut -d' ' -f3)"
"$python" bench/baseline/bench.py --rollout "$work/rollout" --workdir "$work" --python "$python" \
  --episodes "${EPISODES:-2000}" --concurrency "${CONCURRENCY:-512}" --models "${MODELS:-0,10ms/256}" \
  --rounds "${ROUNDS:-2}" --run-flags "${RUN_FLAGS:-}"
