#!/usr/bin/env bash
# Prints a directory holding kube-apiserver and etcd for envtest.
#
# The usual envtest download host is unreachable here, so both binaries are
# built from Go module sources (helper modules under hack/envtest/) and cached
# in bin/k8s/<version>-<os>-<arch>. A KUBEBUILDER_ASSETS set by the user wins.
# Build progress goes to stderr; stdout is only the directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=1.37.1

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if [[ -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" && -x "$KUBEBUILDER_ASSETS/kubectl" ]]; then
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver, etcd or kubectl" >&2
  exit 1
fi

dir="$root/bin/k8s/${k8s_version}-$(go env GOOS)-$(go env GOARCH)"
mkdir -p "$dir"

build() { # name, helper module dir, package
  local name=$1 mod=$2 pkg=$3
  [[ -x "$dir/$name" ]] && return 0
  echo "building $name from Go module sources (first run only; kube-apiserver takes several minutes)..." >&2
  # Build to a temporary name so an interrupted build never leaves a broken binary behind.
  (cd "$root/hack/envtest/$mod" && go build -trimpath -o "$dir/$name.tmp" "$pkg") >&2
  mv "$dir/$name.tmp" "$dir/$name"
}

build etcd etcd .
build kube-apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
# kubectl of the same version, for tests that drive `kubectl get` against envtest.
build kubectl kube-apiserver k8s.io/kubernetes/cmd/kubectl
echo "$dir"
