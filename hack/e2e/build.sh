#!/usr/bin/env bash
# Builds what the e2e node runs, from Go module sources, and the images it
# loads; prints nothing on stdout but the directory (bin/e2e).
#
#   bin/e2e/k8s-<version>/   kubelet, kube-proxy, kube-scheduler, kube-controller-manager
#                            (hack/envtest/kube-apiserver pins k8s.io/kubernetes; built once)
#   bin/e2e/cni/             bridge, host-local, loopback (hack/e2e/cni; built once)
#   bin/e2e/containerd/      containerd, containerd-shim-runc-v2, ctr: a link to containerd-<version>/
#                            (hack/e2e/containerd pins the version; built once per version)
#   bin/e2e/addons/          coredns, local-path-provisioner (hack/e2e/coredns, hack/e2e/local-path; built once)
#   bin/e2e/                 goose (stand-in), client, mcp-server, pause: rebuilt on every run (cheap)
#   bin/e2e/images/          OCI archives of every image (hack/e2e/images), rebuilt on every run
#
# kube-apiserver, etcd and kubectl come from hack/setup-envtest.sh. Progress
# goes to stderr. Delete a directory to force its rebuild.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
k8s_version=1.37.1
out=$root/bin/e2e
export CGO_ENABLED=0

build() { # dest, helper module dir, package, extra go build flags...
  local dest=$1 mod=$2 pkg=$3
  shift 3
  [[ -x "$dest" ]] && return 0
  echo "building $(basename "$dest") from Go module sources (first run only)..." >&2
  mkdir -p "$(dirname "$dest")"
  # A temporary name, so that an interrupted build leaves no broken binary.
  (cd "$root/$mod" && go build -trimpath "$@" -o "$dest.tmp" "$pkg") >&2
  mv "$dest.tmp" "$dest"
}

# Without the version stamp the components report v0.0.0-master.
stamp=(-ldflags "-X k8s.io/component-base/version.gitVersion=v$k8s_version")
for c in kubelet kube-proxy kube-scheduler kube-controller-manager; do
  build "$out/k8s-$k8s_version/$c" hack/envtest/kube-apiserver "k8s.io/kubernetes/cmd/$c" "${stamp[@]}"
done
for p in main/bridge ipam/host-local main/loopback; do
  build "$out/cni/$(basename "$p")" hack/e2e/cni "github.com/containernetworking/plugins/plugins/$p"
done
# containerd without the snapshotters that need cgo or host tools; the
# version stamp is what the kubelet and `ctr version` report.
ctrd_version=$(cd "$root/hack/e2e/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
ctrd_flags=(-tags "no_btrfs no_devmapper no_zfs" -ldflags "-X github.com/containerd/containerd/v2/version.Version=$ctrd_version")
for c in containerd containerd-shim-runc-v2 ctr; do
  build "$out/containerd-$ctrd_version/$c" hack/e2e/containerd "github.com/containerd/containerd/v2/cmd/$c" "${ctrd_flags[@]}"
done
ln -sfn "containerd-$ctrd_version" "$out/containerd"
build "$out/addons/coredns" hack/e2e/coredns .
build "$out/addons/local-path-provisioner" hack/e2e/local-path github.com/rancher/local-path-provisioner

# Per run: these follow the repository's code.
(cd "$root" && for c in goose client mcp-server; do go build -trimpath -o "$out/$c" "./test/e2e/cmd/$c" || exit 1; done) >&2
(cd "$root/hack/e2e/images" && go build -trimpath -o "$out/pause" ./pause && go build -trimpath -o "$out/images-tool" .) >&2
echo "$out"
