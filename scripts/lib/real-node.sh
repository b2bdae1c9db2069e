# The local cluster's real node (sourced by scripts/local-cluster, `up --nodes real`):
# a kubelet and kube-proxy built from the control plane's own Kubernetes module, and
# Debian's containerd, runc and CNI plugins, with a registry of images made here
# (scripts/oci-image: the sandbox image and a workload that serves HTTP). Root only.
#
# One real node per machine (its bridge, its iptables rules and its cgroups are the
# machine's): `up` refuses while another control plane's node runs, and clears what a
# killed one left. Everything lives under STATE_DIR/node (containerd's root and state,
# the network namespaces, the kubelet's directory, the registry's storage), so that
# `down` finds all it must undo there: the pods' processes, mounts and namespaces, the
# bridge, kube-proxy's and the kubelet's iptables chains, the pods' cgroups, and
# net.ipv4.ip_forward as it was.
#
# Uses from scripts/local-cluster: ROOT, CACHE_DIR, STATE_DIR, BIN_DIR, KUBERNETES,
# STAMP, say, die, start, free_port, alive.

NODE_NAME=tether-node
NODE_BRIDGE=tether0
NODE_SUBNET=10.245.0.0/24
NODE_IP=10.245.0.1
# The first address of the API server's --service-cluster-ip-range (the `kubernetes`
# Service's ClusterIP, which pods dial): its certificate names it.
SERVICE_IP=10.96.0.1
# Pods pull the node's images by this name; containerd maps it to the cluster's own
# registry on loopback (no DNS, no TLS).
NODE_REGISTRY=registry.tether.test
# The image docs/book/src/getting-started/your-cluster.md runs, served here by a
# stand-in (this machine reaches no public registry).
PODINFO_VERSION=6.7.1
NODE_OWNER_FILE=/run/tether-real-node
NODE_PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables conntrack docker-registry skopeo)
NODE_COMMANDS=(kubelet kube-proxy)

node_bin_dir() {
  local packages=() package
  for package in "${NODE_COMMANDS[@]}"; do packages+=("k8s.io/kubernetes/cmd/$package"); done
  "$ROOT/scripts/go-build" "$@" "kubernetes-$KUBERNETES" --ldflags "$STAMP" "${packages[@]}"
}

node_present() {
  local dir command
  dir=$(node_bin_dir --dir)
  for command in "${NODE_COMMANDS[@]}"; do [[ -x "$dir/$command" ]] || return 1; done
  for command in containerd containerd-shim-runc-v2 runc ctr iptables conntrack docker-registry skopeo; do
    command -v "$command" >/dev/null || return 1
  done
  [[ -x /usr/lib/cni/bridge && -x /bin/busybox ]]
}

node_install() {
  [[ $(id -u) -eq 0 ]] || die "a real node needs root (containers, a bridge, iptables)"
  node_present && return
  say "installing ${NODE_PACKAGES[*]} (apt-get)"
  apt-get update -qq || die "apt-get update failed: is the Debian archive reachable?"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${NODE_PACKAGES[@]}" >/dev/null \
    || die "apt-get install ${NODE_PACKAGES[*]} failed"
  # Debian's package starts a containerd of the machine's own where it can: the real
  # node runs one of its own, and wants no other.
  pkill -x containerd 2>/dev/null || true
  say "Kubernetes $KUBERNETES: building ${NODE_COMMANDS[*]} (about a minute once the control plane is built)"
  node_bin_dir >/dev/null
}

# The control plane that owns the machine's real node, if its kubelet still runs.
node_owner() {
  local owner pid name
  owner=$(cat "$NODE_OWNER_FILE" 2>/dev/null) || return 1
  [[ -f "$owner/pids" ]] || return 1
  while read -r pid name; do
    [[ "$name" == kubelet ]] && alive "$pid" kubelet && { echo "$owner"; return 0; }
  done <"$owner/pids"
  return 1
}

# Before the API server starts (it listens on the bridge's address, which pods reach):
# the machine's node taken, what an earlier one left cleared, the bridge made.
node_network_up() {
  [[ $(id -u) -eq 0 ]] || die "a real node needs root (containers, a bridge, iptables)"
  local owner
  if owner=$(node_owner) && [[ "$owner" != "$STATE_DIR" ]]; then
    die "this machine's real node belongs to the control plane in $owner (scripts/local-cluster down --state-dir $owner): one at a time"
  fi
  if [[ -n "${owner:-}" || -f "$NODE_OWNER_FILE" ]]; then
    local previous
    previous=$(cat "$NODE_OWNER_FILE" 2>/dev/null || true)
    say "clearing what the real node of ${previous:-an earlier run} left"
    node_clear "$previous"
    node_clear_network "$previous"
  fi
  echo "$STATE_DIR" >"$NODE_OWNER_FILE"
  mkdir -p "$STATE_DIR/node"
  cat /proc/sys/net/ipv4/ip_forward >"$STATE_DIR/node/ip_forward"
  echo 1 >/proc/sys/net/ipv4/ip_forward
  ip link add "$NODE_BRIDGE" type bridge 2>/dev/null || true
  ip addr replace "$NODE_IP/${NODE_SUBNET#*/}" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
}

node_write_config() {
  local node="$STATE_DIR/node"
  mkdir -p "$node/cni" "$node/registry" "$node/kubelet"
  cat >"$node/cni/10-tether.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tether",
  "plugins": [
    {
      "type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "subnet": "$NODE_SUBNET", "gateway": "$NODE_IP",
               "dataDir": "$node/cni-ipam", "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
EOF
  cat >"$node/containerd.toml" <<EOF
version = 2
root = "$node/containerd/root"
state = "$node/containerd/state"
[grpc]
  address = "$node/containerd.sock"
[ttrpc]
  address = "$node/containerd-ttrpc.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_REGISTRY/pause:1"
  # This machine may not lower oom_score_adj: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state directory, where down finds them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = "$node/runc"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$NODE_REGISTRY"]
    endpoint = ["http://127.0.0.1:$REGISTRY_PORT"]
  # This machine reaches no public registry: ghcr.io's name serves the stand-in of
  # the book's getting-started image (scripts/oci-image --workload … 9898).
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."ghcr.io"]
    endpoint = ["http://127.0.0.1:$REGISTRY_PORT"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."127.0.0.1:$REGISTRY_PORT"]
    endpoint = ["http://127.0.0.1:$REGISTRY_PORT"]
EOF
  cat >"$node/registry.yaml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $node/registry}
  delete: {enabled: true}
http: {addr: "127.0.0.1:$REGISTRY_PORT"}
EOF
  cat >"$node/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubernetes 1.35 and later refuse cgroup v1 unless told; this machine has v1.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$node/containerd.sock
imageServiceEndpoint: unix://$node/containerd.sock
address: $NODE_IP
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
# A throwaway node: the API server reaches it without a client certificate.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
enforceNodeAllocatable: []
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
shutdownGracePeriod: 0s
clusterDomain: cluster.local
EOF
  cat >"$node/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $STATE_DIR/kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $NODE_SUBNET
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
# Leave the machine's conntrack settings as they are.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
# Every Service's traffic leaves through the host, so that a pod reaching a Service
# whose endpoint sits on the same bridge gets its answer back the way it came.
iptables: {masqueradeAll: true}
EOF
}

# The node's images, made once per busybox (scripts/oci-image) and cached.
node_images() {
  local digest layout
  digest=$( { sha256sum /bin/busybox; cat "$ROOT/scripts/oci-image"; echo "$PODINFO_VERSION"; } | sha256sum | cut -c1-12)
  layout="$CACHE_DIR/node-images/$digest"
  if [[ ! -f "$layout/index.json" ]]; then
    rm -rf "$layout.partial"
    "$ROOT/scripts/oci-image" --pause "$layout.partial" pause-1 \
      && "$ROOT/scripts/oci-image" --workload 1.0.0 "$layout.partial" workload-1.0.0 \
      && "$ROOT/scripts/oci-image" --workload 2.0.0 "$layout.partial" workload-2.0.0 \
      && "$ROOT/scripts/oci-image" --workload "$PODINFO_VERSION" "$layout.partial" podinfo 9898 \
      || die "cannot make the node's images (scripts/oci-image)"
    rm -rf "$layout" && mv "$layout.partial" "$layout"
  fi
  echo "$layout"
}

node_wait_http() {
  local url=$1 what=$2 deadline=$((SECONDS + 30))
  until curl -fsS "$url" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "$what did not answer in 30 s (logs: $STATE_DIR/logs)"
    sleep 0.2
  done
}

# After the control plane: registry (filled), containerd, kubelet, kube-proxy; waits
# until the node is Ready.
node_up() {
  local node="$STATE_DIR/node" bin images tag
  bin=$(node_bin_dir)
  REGISTRY_PORT=$(free_port); KUBELET_PORT=$(free_port); KUBELET_HEALTHZ_PORT=$(free_port)
  PROXY_HEALTHZ_PORT=$(free_port); PROXY_METRICS_PORT=$(free_port)
  node_write_config
  echo "127.0.0.1:$REGISTRY_PORT" >"$node/registry-address"
  start docker-registry docker-registry serve "$node/registry.yaml"
  node_wait_http "http://127.0.0.1:$REGISTRY_PORT/v2/" "the registry"
  images=$(node_images)
  for tag in pause:1 workload:1.0.0 workload:2.0.0; do
    skopeo copy -q --dest-tls-verify=false "oci:$images:${tag/:/-}" "docker://127.0.0.1:$REGISTRY_PORT/$tag" >&2 \
      || die "skopeo could not push $tag to the node's registry"
  done
  # The book's getting-started image, under its public name (ghcr.io is mirrored here).
  skopeo copy -q --dest-tls-verify=false "oci:$images:podinfo" \
    "docker://127.0.0.1:$REGISTRY_PORT/stefanprodan/podinfo:$PODINFO_VERSION" >&2 \
    || die "skopeo could not push the podinfo stand-in to the node's registry"
  start containerd containerd --config "$node/containerd.toml"
  local deadline=$((SECONDS + 30))
  until ctr -a "$node/containerd.sock" version >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "containerd did not start in 30 s (log: $STATE_DIR/logs/containerd.log)"
    sleep 0.2
  done
  start kubelet "$bin/kubelet" --config "$node/kubelet.yaml" --kubeconfig "$STATE_DIR/kubeconfig" \
    --root-dir "$node/kubelet" --cert-dir "$node/kubelet/pki" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --node-labels "tether.dev/node=real"
  start kube-proxy "$bin/kube-proxy" --config "$node/kube-proxy.yaml"
  node_wait_ready
  node_api_endpoints
  # Beside simulated nodes, the simulator's StorageClass is the default already.
  if (( NODES == 0 )); then node_volumes; fi
}

# The `kubernetes` Service's endpoint, which pods dial as 10.96.0.1:443 (kube-proxy
# routes it from this slice); the API server's reconciler is off.
node_api_endpoints() {
  "$BIN_DIR/kubectl" --kubeconfig "$STATE_DIR/kubeconfig" apply -f - >/dev/null <<EOF || die "cannot write the kubernetes Service's endpoints"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-local-cluster
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: local-cluster.tether.dev}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $API_PORT, protocol: TCP}]
EOF
}

# A default StorageClass and a few volumes of it on the node's disk, so that what asks
# for a PersistentVolumeClaim (tether's own StatefulSet) gets one, as on kind or
# minikube. Each volume is a directory anyone may write (hostPath gets no fsGroup).
node_volumes() {
  local node="$STATE_DIR/node" i manifest
  manifest="apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain"
  for i in 0 1 2 3; do
    mkdir -p "$node/volumes/pv$i" && chmod 1777 "$node/volumes/pv$i"
    manifest+="
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-pv$i, labels: {tether.dev/node: real}}
spec:
  storageClassName: local
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $node/volumes/pv$i, type: Directory}"
  done
  "$BIN_DIR/kubectl" --kubeconfig "$STATE_DIR/kubeconfig" apply -f - <<<"$manifest" >/dev/null \
    || die "cannot make the node's volumes"
}

node_wait_ready() {
  local deadline=$((SECONDS + 90)) ready
  while :; do
    ready=$(curl -fsS --cacert "$STATE_DIR/certs/ca.crt" -H "Authorization: Bearer $TOKEN" \
      "https://$API_HOST:$API_PORT/api/v1/nodes/$NODE_NAME" 2>/dev/null \
      | python3 -c 'import json, sys
print(next((c["status"] for c in json.load(sys.stdin)["status"].get("conditions", []) if c["type"] == "Ready"), ""))' 2>/dev/null || true)
    if [[ "$ready" == True ]]; then
      # The kubelet registers its node tainted not-ready; the node lifecycle controller,
      # which would lift the taint, is off (it would evict the simulated nodes' pods:
      # they renew no Lease).
      "$BIN_DIR/kubectl" --kubeconfig "$STATE_DIR/kubeconfig" taint nodes "$NODE_NAME" \
        node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
      return
    fi
    if (( SECONDS > deadline )); then
      tail -n 20 "$STATE_DIR/logs/kubelet.log" >&2
      die "the real node was not Ready in 90 s (logs: $STATE_DIR/logs/kubelet.log, containerd.log)"
    fi
    sleep 0.5
  done
}

# Undoes what a real node did, whether its processes still run or not (state: its
# control plane's state directory; empty when unknown): first its pods and processes
# (node_clear), then, after the control plane, the machine's part (node_clear_network).
node_clear() {
  local state=$1 node="${1:+$1/node}"
  local sock="$node/containerd.sock"
  if [[ -n "$node" ]]; then
    # The kubelet first, so that it starts nothing more; then every container.
    node_stop_named "$state" kubelet
    if [[ -S "$sock" ]] && ctr -a "$sock" version >/dev/null 2>&1; then
      local task
      for task in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
        ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
      done
      for task in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
        ctr -a "$sock" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1 || true
      done
    fi
    node_stop_named "$state" kube-proxy
    node_stop_named "$state" containerd
    # The shims of a containerd that is gone, and the containers they kept.
    pkill -KILL -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true
    # Mounts under the node's directory, deepest first: the containers' root
    # filesystems, the pods' volumes and network namespaces.
    local mounts mount
    mounts=$(awk -v dir="$node/" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts | sort -r)
    for mount in $mounts; do umount -l "$mount" 2>/dev/null || true; done
  fi
}

# The machine's part, once the control plane is stopped too (an API server listening on
# the bridge waits out its shutdown when the bridge goes first): kube-proxy's and the
# kubelet's rules, the bridge, the pods' cgroups, ip_forward, the machine's claim.
node_clear_network() {
  local state=$1 node="${1:+$1/node}" bin
  bin=$(node_bin_dir --dir)
  if [[ -x "$bin/kube-proxy" ]]; then "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  node_clear_iptables iptables
  node_clear_iptables ip6tables
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  local dir
  for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/kubepods.slice /sys/fs/cgroup/unified/kubepods; do
    [[ -d "$dir" ]] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  if [[ -n "$node" && -f "$node/ip_forward" ]]; then
    cat "$node/ip_forward" >/proc/sys/net/ipv4/ip_forward
    rm -f "$node/ip_forward"
  fi
  if [[ "$(cat "$NODE_OWNER_FILE" 2>/dev/null)" == "$state" ]]; then rm -f "$NODE_OWNER_FILE"; fi
  return 0
}

# Stops one process `up` recorded in STATE/pids (TERM, then KILL after 15 s).
node_stop_named() {
  local state=$1 wanted=$2 pid name
  [[ -f "$state/pids" ]] || return 0
  while read -r pid name; do
    [[ "$name" == "$wanted" ]] || continue
    alive "$pid" "$name" || continue
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while alive "$pid" "$name"; do
      if (( SECONDS > deadline )); then kill -KILL "$pid" 2>/dev/null || true; fi
      sleep 0.1
    done
  done <"$state/pids"
}

# The chains kube-proxy and the kubelet made (KUBE-*), and every rule that jumps to
# one, from each table that has them; the machine's other rules stay.
node_clear_iptables() {
  local tool=$1 table
  command -v "$tool-save" >/dev/null || return 0
  for table in filter nat mangle; do
    "$tool-save" -t "$table" 2>/dev/null | grep -q 'KUBE-' || continue
    "$tool-save" -t "$table" | grep -v -- 'KUBE-' | "$tool-restore" -T "$table" 2>/dev/null || true
  done
}
