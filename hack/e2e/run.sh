#!/usr/bin/env bash
# `make e2e`: bring the one-node cluster up (hack/e2e/cluster.sh), run the
# e2e suite (test/e2e) against it and tear everything down, also when a test
# fails or the run is interrupted. Extra arguments go to `go test`
# (e.g. -run 'TestE2E/samples'). Set E2E_KEEP=1 to leave the cluster up for
# debugging (then `hack/e2e/cluster.sh down`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
start=$SECONDS
teardown() {
  local rc=$?
  if [[ "${E2E_KEEP:-}" == 1 ]]; then
    echo "E2E_KEEP=1: the cluster stays up; KUBECONFIG=/var/lib/goose-e2e/admin.kubeconfig; hack/e2e/cluster.sh down removes it" >&2
  else
    hack/e2e/cluster.sh down || rc=1
  fi
  echo "e2e: total $((SECONDS - start))s, exit $rc" >&2
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The images carry `make build`'s binaries; TestHelm needs helm.
make --no-print-directory build "$root/bin/helm" >&2
kubeconfig=$(hack/e2e/cluster.sh up)
echo "e2e: cluster up after $((SECONDS - start))s" >&2
E2E_KUBECONFIG=$kubeconfig E2E_KUBECTL="$(hack/setup-envtest.sh)/kubectl" E2E_HELM="$root/bin/helm" \
  go test ./test/e2e/ -count=1 -v -timeout 40m "$@"
