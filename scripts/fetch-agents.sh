#!/usr/bin/env bash
# Installs real agent frameworks from the npm registry into a cache directory
# git ignores, for scripts/check-agents.sh to drive the gateway with:
#
#   .cache/agents/node_modules/openai            (plain SDK: chat and Responses)
#   .cache/agents/node_modules/@openai/agents    (OpenAI Agents SDK)
#   .cache/agents/node_modules/ai, @ai-sdk/openai (Vercel AI SDK)
#   .cache/agents/node_modules/@langchain/openai, langchain, @langchain/core
#
# Versions are pinned so that a run today and a run in CI drive the same
# code. Set ROLLFLEET_AGENTS to use another directory. Safe to run again:
# nothing is installed when the pinned versions are there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  openai@7.60.0
  @openai/agents@0.20.0
  ai@7.0.185
  @ai-sdk/openai@4.0.126
  @langchain/openai@1.6.0
  @langchain/core@1.4.0
  langchain@1.5.14
  zod@4.6.7
)
dest=${ROLLFLEET_AGENTS:-.cache/agents}

command -v npm >/dev/null || { echo "fetch-agents: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

missing=()
for p in "${packages[@]}"; do
  name=${p%@*} version=${p##*@}
  have=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$dest/node_modules/$name/package.json" 2>/dev/null || true)
  [ "$have" = "$version" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "fetch-agents: ${packages[*]} in $dest"
  exit 0
fi
echo "fetch-agents: installing ${missing[*]}"
# All packages in one install, so that npm resolves their shared
# dependencies (openai, zod, @langchain/core) to one copy each.
(cd "$dest" && { [ -f package.json ] || echo '{"private":true}' > package.json; } &&
  npm install --silent --no-audit --no-fund --save-exact "${packages[@]}")
echo "fetch-agents: ${packages[*]} in $dest"
