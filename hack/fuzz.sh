#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (go test runs one
# target per invocation). Seed corpora also run in plain `go test`.
# FUZZTIME is an execution count by default ("20000x"): with a duration, Go
# 1.26's coordinator can report "context deadline exceeded" for a clean run
# (golang/go#75804, fixed in Go 1.27).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
n=0
while IFS=: read -r file name; do
  pkg=./$(dirname "$file")
  echo "fuzz $pkg $name ($fuzztime)"
  go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime"
  n=$((n + 1))
done < <(git ls-files -co --exclude-standard '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort -u)
echo "fuzzed $n targets"
