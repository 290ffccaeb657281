# Sourced by up.sh (after its helpers: start, wait_for, mark, leaf,
# kubeconfig, mkcg): node_up brings one node up, its parts under
# STATE/nodes/NAME.
# shellcheck shell=bash disable=SC2154 # cluster_dir, pki: set by env.sh and up.sh

# node_up INDEX NAME BRIDGE [NETNS]
#   a containerd of the node's own (socket, root, state; cgroupfs; OOM score
#   adjustments kept within its own; network namespaces under its state dir),
#   a bridge BRIDGE with 10.217.INDEX.1/24 for the host, a bridge CNI network
#   with 10.217.INDEX.0/24 for the pods (no masquerading, a route to 10.217.0.0/16
#   alone: a pod reaches the host, the nodes and the pods, nothing else), the local images
#   imported, and a kubelet with cgroupRoot CG_ROOT/NAME. The node's address
#   (its InternalIP, where the apiserver reaches the kubelet for exec and logs)
#   is the bridge's 10.217.INDEX.1: the kubelet refuses a loopback one.
#   With NETNS, the node's containerd, kubelet, bridge and pods are in that
#   network namespace, joined to the host by a veth pair (10.217.0.1 on the
#   host, 10.217.0.INDEX the node's address); the node reaches the apiserver
#   at 10.217.0.1, which the host forwards to its 127.0.0.1 (a DNAT rule and
#   route_localnet on that veth alone).
node_up() {
  local index=$1 name=$2 bridge=$3 netns=${4:-}
  local dir=$STATE/nodes/$name
  local node_ip=$POD_NET_PREFIX.$index.1 api_host=127.0.0.1 in_ns=()
  local sock=$dir/containerd/containerd.sock
  local subnet=$POD_NET_PREFIX.$index.0/24 host_ip=$POD_NET_PREFIX.$index.1
  mkdir -p "$dir"/{containerd/root,containerd/state,containerd/runc,containerd/opt,kubelet,pod-logs,cni/net.d,cni/ipam}

  leaf "kubelet-$name" "/O=system:nodes/CN=system:node:$name" clientAuth
  if [ -n "$netns" ]; then
    local veth=stkveth$index
    node_ip=$POD_NET_PREFIX.0.$index
    api_host=$NODE_LINK_HOST_IP
    in_ns=(nsenter "--net=/run/netns/$netns")
    ip netns add "$netns"
    echo "$netns" >>"$STATE/host/netns"
    ip link add "$veth" type veth peer name eth0 netns "$netns"
    echo "$veth" >>"$STATE/host/links"
    ip addr add "$NODE_LINK_HOST_IP" peer "$node_ip" dev "$veth"
    ip link set "$veth" up
    ip route add "$subnet" via "$node_ip" dev "$veth"
    "${in_ns[@]}" ip link set lo up
    "${in_ns[@]}" ip addr add "$node_ip" peer "$NODE_LINK_HOST_IP" dev eth0
    "${in_ns[@]}" ip link set eth0 up
    "${in_ns[@]}" ip route add "$POD_NET_PREFIX.0.0/16" via "$NODE_LINK_HOST_IP" dev eth0
    # Inside the node's namespace only: it routes between its pods and eth0.
    "${in_ns[@]}" sysctl -q -w net.ipv4.ip_forward=1
    # The apiserver listens on 127.0.0.1 only: packets from this veth to
    # 10.217.0.1:API_PORT go to it, and may (route_localnet, this link alone).
    sysctl -q -w "net.ipv4.conf.$veth.route_localnet=1"
    iptables -w -t nat -I PREROUTING -i "$veth" -d "$NODE_LINK_HOST_IP" -p tcp --dport "$API_PORT" \
      -m comment --comment stockade-cluster -j DNAT --to-destination "127.0.0.1:$API_PORT"
  fi
  leaf "kubelet-$name-serving" "/CN=$name" serverAuth "DNS:$name,IP:$node_ip"
  kubeconfig "$dir/kubelet.kubeconfig" "kubelet-$name" "$api_host"

  "${in_ns[@]}" ip link add "$bridge" type bridge
  [ -n "$netns" ] || echo "$bridge" >>"$STATE/host/links"
  "${in_ns[@]}" ip addr add "$host_ip/24" dev "$bridge"
  "${in_ns[@]}" ip link set "$bridge" up
  cat >"$dir/cni/net.d/10-stockade.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "stockade-$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$subnet", "rangeStart": "$POD_NET_PREFIX.$index.10", "gateway": "$host_ip"}]],
        "routes": [{"dst": "$POD_NET_PREFIX.0.0/16"}],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF

  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
EOF
  start "containerd-$name" "${in_ns[@]}" containerd --config "$dir/containerd.toml"
  wait_for "containerd-$name" 60 ctr --address "$sock" version
  mark "containerd_${name}_ready"

  # The images are kept beside the binaries, made anew when their inputs
  # (the busybox binary, images.sh, cmd/pause) change.
  local key images
  key=$(cat /bin/busybox "$cluster_dir/images.sh" "$cluster_dir/cmd/pause/main.go" | sha256sum | cut -c1-16)
  images=$K8S_CACHE/$K8S_VERSION/images/$key
  if [ ! -f "$images/busybox.tar" ] || [ ! -f "$images/pause.tar" ]; then
    rm -rf "$images.new"
    "$cluster_dir/images.sh" "$images.new" 2>>"$STATE/logs/images.log" >&2 ||
      { tail -10 "$STATE/logs/images.log" >&2; die "building the local images failed"; }
    rm -rf "$images" && mv "$images.new" "$images"
  fi
  local image
  for image in pause busybox; do
    ctr --address "$sock" -n k8s.io images import "$images/$image.tar" >>"$STATE/logs/images.log" 2>&1 ||
      { tail -10 "$STATE/logs/images.log" >&2; die "ctr images import $image.tar failed"; }
  done
  mark "images_${name}_imported"

  mkcg "$CG_ROOT/$name"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$sock
tlsCertFile: $pki/kubelet-$name-serving.crt
tlsPrivateKeyFile: $pki/kubelet-$name-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization:
  mode: Webhook
# cgroup v1 (this machine's hybrid layout) is refused from 1.35 on unless said.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CG_ROOT/$name
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
# Check the kernel settings, never write them (kubelet-ns.sh shows it the
# values it checks for); no iptables chains of its own (KUBE-IPTABLES-HINT,
# KUBE-FIREWALL: for kube-proxy, which this cluster does not run); its own
# OOM score left alone (a negative one is refused here).
protectKernelDefaults: true
makeIPTablesUtilChains: false
oomScoreAdj: 0
failSwapOn: false
podLogsDir: $dir/pod-logs
resolvConf: /etc/resolv.conf
maxPods: 50
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
  start "kubelet-$name" "${in_ns[@]}" unshare -m --propagation unchanged \
    "$cluster_dir/kubelet-ns.sh" "$dir" \
    "$K8S_BIN/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" \
    --hostname-override "$name" --node-ip "$node_ip"
}
