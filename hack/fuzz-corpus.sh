#!/usr/bin/env bash
# Copies the inputs Go's fuzzer kept because they found new coverage (its
# cache, $GOCACHE/fuzz/<package>/<target>/, or FUZZCACHEDIR's as hack/fuzz.sh
# uses it) into the package's
# testdata/fuzz/<target>/, where plain `go test` runs them as seeds.
# Entries already there are left as they are; the names are content hashes.
# Arguments name the targets to keep (default: every one).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${FUZZCACHEDIR:-$(go env GOCACHE)/fuzz}"
module=$(go list -m)
n=0
while IFS=: read -r file name; do
  if (($#)) && [[ " $* " != *" $name "* ]]; then continue; fi
  dir=$(dirname "$file")
  src="$cache/$module/$dir/$name"
  [[ -d "$src" ]] || continue
  dst="$dir/testdata/fuzz/$name"
  mkdir -p "$dst"
  for f in "$src"/*; do
    [[ -e "$dst/$(basename "$f")" ]] && continue
    cp "$f" "$dst/"
    n=$((n + 1))
  done
done < <(git ls-files -co --exclude-standard '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort -u)
echo "kept $n new corpus entries"
