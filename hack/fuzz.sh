#!/usr/bin/env bash
# Runs fuzz targets for FUZZTIME each (go test runs one target per
# invocation): every target in the module, or the ones named as arguments
# (hack/fuzz.sh FuzzDecodeFrame FuzzSSE). A failing target does not stop the
# others; the script fails at the end and names them. Seed corpora also run
# in plain `go test`.
#   FUZZTIME      an execution count by default ("20000x"): with a duration, Go
#                 1.26's coordinator can report "context deadline exceeded" for
#                 a clean run (golang/go#75804, fixed in Go 1.27).
#   FUZZPARALLEL  fuzzing workers per target (go test -parallel; default: GOMAXPROCS).
#   FUZZMINIMIZETIME  how long to minimise each new input (go test
#                 -fuzzminimizetime, "10000x"; default: Go's 60s): the fuzzer
#                 runs nothing else meanwhile, and early in a long run that
#                 can be minutes at a time.
#   FUZZCACHEDIR  where the fuzzer keeps the inputs it found (per package, as
#                 Go lays out $GOCACHE/fuzz); default: $GOCACHE/fuzz, shared by
#                 everyone using that cache.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
module=$(go list -m)
n=0
failed=()
while IFS=: read -r file name; do
  if (($#)) && [[ " $* " != *" $name "* ]]; then continue; fi
  dir=$(dirname "$file")
  flags=(-run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime")
  [[ -n "${FUZZPARALLEL:-}" ]] && flags+=(-parallel "$FUZZPARALLEL")
  [[ -n "${FUZZMINIMIZETIME:-}" ]] && flags+=(-fuzzminimizetime "$FUZZMINIMIZETIME")
  [[ -n "${FUZZCACHEDIR:-}" ]] && flags+=(-args "-test.fuzzcachedir=$FUZZCACHEDIR/$module/$dir")
  echo "fuzz ./$dir $name ($fuzztime)"
  if ! go test "./$dir" "${flags[@]}"; then
    failed+=("$name")
  fi
  n=$((n + 1))
done < <(git ls-files -co --exclude-standard '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort -u)
if (($# && n == 0)); then
  echo "no fuzz target named $*" >&2
  exit 1
fi
if ((${#failed[@]})); then
  echo "fuzzed $n targets; failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzed $n targets"
