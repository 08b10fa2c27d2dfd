#!/usr/bin/env bash
# A one-node Kubernetes cluster on this machine (kubelet + containerd), for
# `make e2e`. Needs root.
#
#   hack/e2e/cluster.sh up     start it; prints the kubeconfig's path on stdout
#   hack/e2e/cluster.sh down   stop it and undo every change it made to the host
#
# The container runtime is containerd 2.x built from Go module sources
# (hack/e2e/build.sh): spec.runtimes are image volumes, which need
# containerd 2.1 or later, and Debian ships 1.6.
#
# What `up` touches (and `down` undoes): Debian packages runc, iptables,
# conntrack and busybox-static (installed when missing, left installed);
# processes it starts (by PID, from $run/pids); $state and $run;
# the bridge goose-e2e0; KUBE-* and CNI-* iptables chains; the cgroup
# /goose-e2e in every hierarchy; mounts under $state and $run (pod network
# namespaces included: netns_mounts_under_state_dir);
# /run/containerd/s (containerd puts its shim sockets there) when it did
# not exist; /var/log/containers links into $state; net.ipv4.ip_forward and
# net.bridge.bridge-nf-call-iptables (restored).
#
# Addresses: pods 198.18.0.0/16, Services 198.19.0.0/16 (198.18.0.0/15 is
# reserved for benchmarking and never routed). Pods get routes to those and
# to the node's own address only, no default route; no masquerade rule is
# added; servers bind to loopback or the node's address.
set -eEuo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
state=/var/lib/goose-e2e
run=/run/goose-e2e
pod_cidr=198.18.0.0/16
svc_cidr=198.19.0.0/16
route_cidr=198.18.0.0/15
dns_ip=198.19.0.10
bridge=goose-e2e0
node=e2e-node
etcd_port=12379
cgroup=goose-e2e
k8s_version=1.37.1

log() { echo "[$(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }

node_ip() {
  local dev
  dev=$(ip -4 route show default | awk '{print $5; exit}')
  if [[ -n "$dev" ]]; then
    ip -4 -o addr show dev "$dev" scope global | awk '{split($4, a, "/"); print a[1]; exit}'
  else
    ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}'
  fi
}

# ---------------------------------------------------------------- teardown

# stop_pid sends TERM to a process we started, then KILL after 10 s.
stop_pid() {
  local f=$1 pid name
  pid=$(cat "$f" 2>/dev/null) || return 0
  name=$(basename "$f" .pid)
  rm -f "$f"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { log "stopped $name ($pid)"; return 0; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  log "killed $name ($pid)"
}

# cgroup_dirs lists our cgroup in every hierarchy, deepest first.
cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d "$h$cgroup" ]] && find "$h$cgroup" -depth -type d
  done
  return 0
}

# shim_pids lists containerd shims of our containerd (identified by its socket).
shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "containerd-shim.*$run/containerd/containerd.sock" && basename "$p"
  done
  return 0
}

clean_iptables() {
  local cmd table chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      # Rules in any chain that jump to a KUBE-* or CNI-* chain, then the chains.
      "$cmd" -t "$table" -S 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | grep -vE '^-A (KUBE|CNI)-' | sed 's/^-A/-D/' |
        while read -r rule; do eval "$cmd -t $table $rule" 2>/dev/null || true; done
      for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# down runs in a subshell without errexit: one step failing (a chain already
# gone, a grep matching nothing) must not stop the rest of the cleanup.
down() (
  set +eE +o pipefail
  trap - ERR
  [[ $EUID -eq 0 ]] || die "hack/e2e/cluster.sh needs root"
  [[ -d "$run" || -d "$state" || -d "/sys/fs/cgroup/cpu/$cgroup" ]] || return 0
  log "tearing down the e2e node"
  local f p m d
  # Control plane and node agents first, so nothing restarts pods meanwhile.
  for f in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_pid "$run/pids/$f.pid"
  done
  # Every container process lives in our cgroup: kill them all, then the shims and containerd.
  for _ in 1 2 3; do
    for d in $(cgroup_dirs); do
      [[ -f "$d/cgroup.procs" ]] && for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    done
    sleep 0.2
  done
  for p in $(shim_pids); do kill -KILL "$p" 2>/dev/null || true; done
  stop_pid "$run/pids/containerd.pid"
  for p in $(shim_pids); do kill -KILL "$p" 2>/dev/null || true; done
  # kube-proxy's own cleanup, then whatever chains are left (kubelet's canaries, CNI's).
  if [[ -x "$root/bin/e2e/k8s-$k8s_version/kube-proxy" ]]; then
    "$root/bin/e2e/k8s-$k8s_version/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  clean_iptables
  # Mounts: deepest first (kubelet's bind of its root dir, volumes, rootfs, netns).
  for _ in 1 2 3; do
    for m in $(awk -v s="$state/" -v r="$run/" '{ if (index($5, s) == 1 || index($5, r) == 1 || $5 == substr(s, 1, length(s)-1)) print $5 }' /proc/self/mountinfo | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
  ip link del "$bridge" 2>/dev/null || true
  # A cgroup whose last process just died can stay busy for a moment.
  for _ in $(seq 50); do
    for d in $(cgroup_dirs); do rmdir "$d" 2>/dev/null || true; done
    [[ -z "$(cgroup_dirs)" ]] && break
    sleep 0.1
  done
  for d in $(cgroup_dirs); do log "warning: could not remove cgroup $d"; done
  # Container log links kubelet made in its fixed directory.
  for f in /var/log/containers/*.log; do
    [[ -L "$f" && "$(readlink "$f")" == "$state/"* ]] && rm -f "$f"
  done
  if [[ -f "$run/created-run-containerd" ]]; then rm -rf /run/containerd; fi
  if [[ -f "$run/sysctl.saved" ]]; then
    while read -r key value; do sysctl -qw "$key=$value" >/dev/null || true; done <"$run/sysctl.saved"
  fi
  rm -rf "$state" "$run"
  log "the e2e node is gone"
)

# ---------------------------------------------------------------- bring-up

install_packages() {
  local need=()
  for p in runc iptables conntrack busybox-static; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  ((${#need[@]} == 0)) && return 0
  log "installing Debian packages: ${need[*]}"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
}

# start NAME CMD...: a background process, its PID in $run/pids, its log in $state/logs.
start() {
  local name=$1
  shift
  "$@" >"$state/logs/$name.log" 2>&1 &
  echo $! >"$run/pids/$name.pid"
  log "started $name ($!)"
}

# wait_for WHAT SECONDS CMD...: poll until CMD succeeds.
wait_for() {
  local what=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready after ${secs}s (logs in $state/logs)"
    sleep 0.2
  done
}

pki() {
  local d=$state/pki ip=$1
  mkdir -p "$d"
  cd "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt \
    -days 2 -subj /CN=goose-e2e-ca 2>/dev/null
  cert() { # name, subject, subjectAltName
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 \
      -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3") 2>/dev/null
  }
  cert apiserver /CN=kube-apiserver "IP:$ip,IP:127.0.0.1,IP:${svc_cidr%.0/16}.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # The admin identity also serves the scheduler, controller-manager,
  # kube-proxy and the API server's calls to the kubelet.
  cert admin "/O=system:masters/CN=e2e-admin" "DNS:e2e-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$node" "IP:$ip,DNS:$node"
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cd - >/dev/null
}

kubeconfig() { # file, cert name, server
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "$3", certificate-authority: "$state/pki/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$state/pki/$2.crt", client-key: "$state/pki/$2.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
}

up() {
  [[ $EUID -eq 0 ]] || die "hack/e2e/cluster.sh needs root (it runs containerd and the kubelet)"
  down
  local t0=$SECONDS ip envtest e2e k8s
  install_packages
  ip=$(node_ip)
  [[ -n "$ip" ]] || die "no IPv4 address for the node"
  log "building (first run only) and collecting binaries"
  envtest=$("$root/hack/setup-envtest.sh")
  e2e=$("$root/hack/e2e/build.sh")
  k8s=$e2e/k8s-$k8s_version
  log "binaries ready after $((SECONDS - t0))s"

  mkdir -p "$state"/{logs,cni/net.d,cni/ipam,kubelet,pod-logs,local-path,containerd} "$run/pids"
  [[ -d /run/containerd ]] || touch "$run/created-run-containerd"
  # From here on a failure must not leave anything behind.
  trap 'log "bring-up failed"; down' ERR
  pki "$ip"
  # Host settings, saved for down.
  : >"$run/sysctl.saved"
  for key in net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; do
    echo "$key $(sysctl -n "$key")" >>"$run/sysctl.saved"
    sysctl -qw "$key=1"
  done
  # Our cgroup in every v1 hierarchy; cpuset needs its cpus and mems set before use.
  for h in /sys/fs/cgroup/*/; do
    [[ "$h" == */unified/ ]] && continue
    mkdir -p "$h$cgroup"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.mems"

  # containerd: own paths; restrict_oom_score_adj because root here lacks
  # CAP_SYS_RESOURCE (no negative oom_score_adj); runc with cgroupfs, started
  # by our shim (not Debian's, which may be on PATH); no NRI socket and no CDI
  # directories, which live at fixed host paths.
  local ctrd=$e2e/containerd
  cat >"$state/containerd.toml" <<EOF
version = 4
root = "$state/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri"]
# Version 4 configures each server on its own; ttrpc (the shims' events)
# would otherwise listen at the fixed default address.
[plugins.'io.containerd.server.v1.grpc']
  address = "$run/containerd/containerd.sock"
[plugins.'io.containerd.server.v1.ttrpc']
  address = "$run/containerd/containerd.sock.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "e2e.local/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "$ctrd/containerd-shim-runc-v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$e2e/cni"]
    conf_dir = "$state/cni/net.d"
EOF
  cat >"$state/cni/net.d/10-goose-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "goose-e2e",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$state/cni/ipam",
      "ranges": [[{"subnet": "$pod_cidr", "gateway": "${pod_cidr%.0/16}.1"}]],
      "routes": [{"dst": "$route_cidr"}, {"dst": "$ip/32"}]
    }
  }]
}
EOF
  start containerd "$ctrd/containerd" --config "$state/containerd.toml"
  wait_for containerd 30 "$ctrd/ctr" -a "$run/containerd/containerd.sock" version

  log "building and importing images"
  # Image references as a user's install names them: dist/install.yaml for the
  # manager, its --adk2goose-image and --goose-image; the goosed sample's image.
  local install=$root/dist/install.yaml
  : "${IMG_MANAGER:=$(awk '$1 == "image:" && NF == 2 {print $2; exit}' "$install")}"
  : "${IMG_SIDECAR:=$(sed -n 's/.*--adk2goose-image=//p' "$install" | head -1)}"
  : "${GOOSE_IMAGES:=$(sed -n 's/.*--goose-image=//p' "$install" | head -1)}"
  : "${GOOSED_IMAGES:=$(awk '$1 == "image:" && NF == 2 {print $2; exit}' "$root/config/samples/agents_v1alpha1_gooseagent_goosed.yaml")}"
  "$e2e/images-tool" -dockerfile "$root/Dockerfile" -bin "$root/bin" -e2e-bin "$e2e" -addons "$e2e/addons" \
    -out "$e2e/images" -manager-ref "$IMG_MANAGER" -adk2goose-ref "$IMG_SIDECAR" \
    -goose-refs "$GOOSE_IMAGES" -goosed-refs "$GOOSED_IMAGES" >"$state/logs/images.log"
  for f in "$e2e"/images/*.tar; do
    "$ctrd/ctr" -a "$run/containerd/containerd.sock" -n k8s.io image import "$f" >>"$state/logs/images.log"
  done

  start etcd "$envtest/etcd" --data-dir "$state/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((etcd_port + 1))"
  start kube-apiserver "$envtest/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$ip" --advertise-address "$ip" --secure-port 6443 \
    --service-cluster-ip-range "$svc_cidr" --authorization-mode Node,RBAC \
    --client-ca-file "$state/pki/ca.crt" --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
    --kubelet-client-certificate "$state/pki/admin.crt" --kubelet-client-key "$state/pki/admin.key" \
    --kubelet-preferred-address-types InternalIP --enable-admission-plugins NodeRestriction --profiling=false
  local server=https://$ip:6443 kc=$state/admin.kubeconfig
  kubeconfig "$kc" admin "$server"
  kubeconfig "$state/kubelet.kubeconfig" kubelet "$server"
  wait_for kube-apiserver 90 "$envtest/kubectl" --kubeconfig "$kc" get --raw /readyz

  start kube-controller-manager "$k8s/kube-controller-manager" --kubeconfig "$kc" \
    --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" --secure-port 0 --leader-elect=false \
    --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/ca.crt" \
    --use-service-account-credentials --service-cluster-ip-range "$svc_cidr" --cluster-cidr "$pod_cidr"
  start kube-scheduler "$k8s/kube-scheduler" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
    --authorization-kubeconfig "$kc" --secure-port 0 --leader-elect=false

  cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $state/pki/kubelet.crt
tlsPrivateKeyFile: $state/pki/kubelet.key
containerRuntimeEndpoint: unix://$run/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
failCgroupV1: false
failSwapOn: false
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $state/pod-logs
serializeImagePulls: false
# A small, shared disk: no eviction and no image garbage collection (the images cannot be pulled again).
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start kubelet "$k8s/kubelet" --config "$state/kubelet.yaml" --kubeconfig "$state/kubelet.kubeconfig" \
    --hostname-override "$node" --node-ip "$ip" --root-dir "$state/kubelet" --v 1

  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $kc}
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
bindAddress: $ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$ip/32]
# Leave the host's conntrack and route_localnet sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
  start kube-proxy "$k8s/kube-proxy" --config "$state/kube-proxy.yaml"

  local kubectl=("$envtest/kubectl" --kubeconfig "$kc")
  wait_for "node $node" 120 "${kubectl[@]}" wait --for=condition=Ready "node/$node" --timeout=1s
  log "node Ready after $((SECONDS - t0))s"
  "${kubectl[@]}" apply --server-side -f "$root/hack/e2e/manifests/coredns.yaml" >&2
  sed "s|LOCAL_PATH_DIR|$state/local-path|" "$root/hack/e2e/manifests/local-path.yaml" | "${kubectl[@]}" apply --server-side -f - >&2
  wait_for "cluster DNS" 120 "${kubectl[@]}" -n kube-system rollout status deploy/coredns --timeout=1s
  wait_for "storage provisioner" 120 "${kubectl[@]}" -n local-path-storage rollout status deploy/local-path-provisioner --timeout=1s
  trap - ERR
  log "cluster up after $((SECONDS - t0))s; kubeconfig $kc"
  echo "$kc"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
