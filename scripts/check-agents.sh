#!/usr/bin/env bash
# Drives the gateway with real agent frameworks (scripts/fetch-agents.sh
# installs them) and checks what it records: the built-in stand-in speaks
# Qwen3's vocabulary and template (scripts/fetch-tokenizers.sh fetches it)
# and calls the weather tool it is offered, each framework asks the weather
# question through the chat completions and the Responses API, with and
# without streaming, and finishes its session. Every run must be recorded as
# exactly one session of one segment, one turn per model call, ending with
# the tokens the client received (scripts/agents/table.mjs). openai-group
# draws four samples with n = 4 and plays each on: four runs, one group. Prints the
# table of docs/gateway.md ("Agent frameworks") whatever happens; exits 1
# when a run does not work.
#
#   scripts/check-agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tok=${ROLLFLEET_TOKENIZERS:-.cache/tokenizers}/qwen3
runs=(
  "openai chat" "openai responses"
  "openai-agents chat" "openai-agents responses"
  "vercel-ai chat" "vercel-ai responses"
  "langchain chat" "langchain responses"
  "openai-group chat"
)

command -v node >/dev/null || { echo "check-agents: node is needed (Debian: apt-get install nodejs npm)" >&2; exit 1; }
[ -s "$tok/tokenizer.json" ] || { echo "check-agents: $tok missing: run scripts/fetch-tokenizers.sh" >&2; exit 1; }
scripts/fetch-agents.sh >/dev/null

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# wait_up URL LOG: polls a health endpoint for up to 20 s.
wait_up() {
  for _ in $(seq 100); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done
  echo "check-agents: $1 did not come up:" >&2; cat "$2" >&2; return 1
}

go build -o "$work/rollout" ./cmd/rollout
port=$((18300 + RANDOM % 1000))
model=http://127.0.0.1:$port gw=http://127.0.0.1:$((port + 1))
# --skill 30: the stand-in rarely slips a token into the tool call it plans, which would
# end an agent run early (what is recorded is checked the same either way).
"$work/rollout" toyllm --tokenizer "$tok" --skill 30 --listen "127.0.0.1:$port" >"$work/toyllm.log" 2>&1 & pids+=($!)
# A server that does not come up fails every run, each with its row.
wait_up "$model" "$work/toyllm.log" || true
"$work/rollout" gateway --vllm "$model" --listen "127.0.0.1:$((port + 1))" \
  --out "$work/trajectories.jsonl" --failures-out "$work/failures.jsonl" >"$work/gateway.log" 2>&1 & gwpid=$!
pids+=($gwpid)
wait_up "$gw" "$work/gateway.log" || true

# play FRAMEWORK API [--stream]: one run; a script that crashes or hangs
# before its result line still leaves its row.
play() {
  local rc=0 stream=false
  [ $# -gt 2 ] && stream=true
  timeout 120 node "scripts/agents/$1.mjs" --url "$gw" --api "$2" "${@:3}" >"$work/line" 2>"$work/node.log" || rc=$?
  [ -s "$work/line" ] && { cat "$work/line" >>"$work/results.jsonl"; return; }
  local why="exit status $rc: $(tail -1 "$work/node.log" | tr -d '"\\')"
  [ $rc = 124 ] && why="no result within 120 s"
  echo "{\"framework\":\"$1\",\"api\":\"$2\",\"stream\":$stream,\"calls\":0,\"ok\":false,\"error\":\"$why\"}" >>"$work/results.jsonl"
}
start=$SECONDS
for run in "${runs[@]}"; do
  play $run
  play $run --stream
done

# Stopping the gateway flushes --out and publishes the sessions still open
# as failure records, which is how sessions no run named show up.
kill -TERM "$gwpid"
wait "$gwpid" 2>/dev/null || true
touch "$work/results.jsonl" "$work/trajectories.jsonl" "$work/failures.jsonl"
echo "check-agents: ${#runs[@]} framework and API pairs, with and without streaming, in $((SECONDS - start)) s" >&2
node scripts/agents/table.mjs "$work/results.jsonl" "$work/trajectories.jsonl" "$work/failures.jsonl"
