#!/usr/bin/env bash
# Runs every fuzz target of the module briefly (FUZZTIME per target: a
# duration or an input count such as the default 2000x): the parsers of
# outside input (wire messages, actions, datasets, model server replies,
# HTTP requests) must not panic or hang on anything.
# CI runs it; run it longer locally, e.g. FUZZTIME=2m scripts/fuzz.sh. The
# default is a count, not a duration, and new inputs are not minimized: a
# short timed run that ends while a worker is busy reports "context deadline
# exceeded" as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-2000x}
count=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS=: read -r file name; do
  pkg=./$(dirname "$file")
  echo "== $pkg $name ($fuzztime)"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime=0 "$pkg" > "$log" 2>&1 || { cat "$log"; exit 1; }
  count=$((count + 1))
done < <(git grep -o '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' | sed 's/:func /:/')
echo "fuzz: $count targets ran for $fuzztime each without a failure"
