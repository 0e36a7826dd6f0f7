#!/usr/bin/env bash
# Plays episodes and gateway sessions on the built-in stand-in speaking each
# real tokenizer and chat template (scripts/fetch-tokenizers.sh fetches
# them), and checks every trajectory and call from outside with the
# JavaScript reference (scripts/check-chat-tokens.cjs). Prints the table of
# docs/models.md: trajectories or calls checked, and mismatches. The gateway
# runs with the qwen3 reasoning parser and the stand-in with --reasoning, so
# a thinking template's replies carry reasoning through the Responses API.
# Last, the env runs are played against scripts/reference-server.cjs, a
# model server whose tokenizer and template are the reference's, not
# rollfleet's.
#
#   scripts/check-models.sh [episodes per env, default 32]
set -euo pipefail
cd "$(dirname "$0")/.."
episodes=${1:-32}
models=(qwen3 llama3_1 gemma3 deepseek_v3)
envs=(game:GuessTheNumber-v0 game:Sudoku-v0-easy math)
root=${ROLLFLEET_TOKENIZERS:-.cache/tokenizers}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/rollout" ./cmd/rollout
printf '{"question": "What is 17 + 25?", "expected_answer": "42"}\n{"question": "Compute 6 * 7 - 2.", "expected_answer": "40"}\n' >"$work/math.jsonl"

# field FIELD JSON: one number of the checker's summary.
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$2"; }
# wait_up URL: polls a health endpoint for up to 20 s.
wait_up() { for _ in $(seq 100); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done; echo "check-models: $1 did not come up" >&2; return 1; }

fail=0
echo "| model | env path: trajectories (turns) checked | mismatches | gateway chat with tools: calls checked | mismatches | gateway Responses: calls checked (reasoning items, continued traces, segments) | mismatches | reference server, env path: trajectories (turns) | mismatches |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  dir=$root/$m
  [ -s "$dir/tokenizer.json" ] || { echo "check-models: $dir missing: run scripts/fetch-tokenizers.sh" >&2; exit 1; }
  trajs=0 turns=0 bad=0
  for env in "${envs[@]}"; do
    args=(--env "$env" --episodes "$episodes" --seed 1 --tokenizer "$dir" --out "$work/t.jsonl")
    [ "$env" = math ] && args+=(--dataset "$work/math.jsonl" --episodes 4)
    "$work/rollout" run "${args[@]}" >/dev/null 2>"$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
    out=$(node scripts/check-chat-tokens.cjs trajectories "$work/t.jsonl" --model-dir "$dir" || true)
    trajs=$((trajs + $(field checked "$out"))) turns=$((turns + $(field prompts_checked "$out"))) bad=$((bad + $(field mismatches "$out")))
    [ "$(field mismatches "$out")" = 0 ] || { echo "$out" >&2; fail=1; }
  done
  port=$((18200 + RANDOM % 1000))
  "$work/rollout" toyllm --tokenizer "$dir" --reasoning --listen "127.0.0.1:$port" >/dev/null 2>&1 & pids+=($!)
  wait_up "http://127.0.0.1:$port"
  "$work/rollout" gateway --vllm "http://127.0.0.1:$port" --listen "127.0.0.1:$((port + 1))" --reasoning-parser qwen3 >/dev/null 2>&1 & pids+=($!)
  wait_up "http://127.0.0.1:$((port + 1))"
  gw=$(node scripts/check-chat-tokens.cjs gateway --url "http://127.0.0.1:$((port + 1))" --sessions 8 --model-dir "$dir" || true)
  [ "$(field mismatches "$gw")" = 0 ] || { echo "$gw" >&2; fail=1; }
  rs=$(node scripts/check-chat-tokens.cjs responses --url "http://127.0.0.1:$((port + 1))" --sessions 8 --model-dir "$dir" || true)
  [ "$(field mismatches "$rs")" = 0 ] || { echo "$rs" >&2; fail=1; }
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
  node scripts/reference-server.cjs --model-dir "$dir" --listen "127.0.0.1:$((port + 2))" >/dev/null 2>&1 & pids+=($!)
  wait_up "http://127.0.0.1:$((port + 2))"
  rtrajs=0 rturns=0 rbad=0
  for env in game:GuessTheNumber-v0 math; do
    args=(--env "$env" --episodes "$episodes" --seed 1 --vllm "http://127.0.0.1:$((port + 2))" --out "$work/r.jsonl")
    [ "$env" = math ] && args+=(--dataset "$work/math.jsonl" --episodes 4)
    "$work/rollout" run "${args[@]}" >/dev/null 2>"$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
    out=$(node scripts/check-chat-tokens.cjs trajectories "$work/r.jsonl" --model-dir "$dir" || true)
    rtrajs=$((rtrajs + $(field checked "$out"))) rturns=$((rturns + $(field prompts_checked "$out"))) rbad=$((rbad + $(field mismatches "$out")))
    [ "$(field mismatches "$out")" = 0 ] || { echo "$out" >&2; fail=1; }
  done
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
  echo "| $m | $trajs ($turns) | $bad | $(field calls_checked "$gw") | $(field mismatches "$gw") | $(field calls_checked "$rs") ($(field reasoning_items "$rs"), $(field continued_traces "$rs"), $(field segments "$rs")) | $(field mismatches "$rs") | $rtrajs ($rturns) | $rbad |"
done
exit $fail
