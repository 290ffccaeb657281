# Sourced by build.sh, images.sh, up.sh, down.sh and test.sh: where the
# cluster's binaries and state live and how Go is set up to build them.
# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this

cluster_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The one Kubernetes version, read from go.mod's require line.
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" || ($1 == "require" && $2 == "k8s.io/kubernetes") { print $NF; exit }' "$cluster_dir/go.mod")
K8S_CACHE=${STOCKADE_K8S_CACHE:-/var/cache/stockade/k8s}
K8S_BIN=$K8S_CACHE/$K8S_VERSION/bin
# The binaries build.sh makes (kubectl at the same version as the server).
K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# Debian's packages the cluster runs on (the machine's containerd 1.6, runc
# and CNI plugins), and the static busybox its local images are built from.
APT_PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables openssl iproute2 util-linux procps curl)
CNI_BIN_DIR=/usr/lib/cni

# The cluster: one state dir, loopback ports away from the usual ones (so a
# cluster of the machine's own is not in the way), a pod range per node.
STATE=${STOCKADE_CLUSTER_DIR:-/tmp/stockade-cluster}
ETCD_PORT=${STOCKADE_ETCD_PORT:-23791}
ETCD_PEER_PORT=$((ETCD_PORT + 10))
API_PORT=${STOCKADE_API_PORT:-16443}
KCM_PORT=20257
SCHED_PORT=20259
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
SERVICE_CIDR=10.218.0.0/24
SERVICE_IP=10.218.0.1
POD_NET_PREFIX=10.217 # node N's pods get 10.217.N.0/24, the host 10.217.N.1
NODE_NAME=${STOCKADE_NODE_NAME:-stockade-node-1}
BRIDGE=stkbr1
# STOCKADE_CLUSTER_NODES=2: a second node, stockade-node-2, in a network
# namespace of its own (veth pair, node address 10.217.0.2, the host's end
# 10.217.0.1), its pods on 10.217.2.0/24 behind its own bridge.
NODES=${STOCKADE_CLUSTER_NODES:-1}
NODE_LINK_HOST_IP=$POD_NET_PREFIX.0.1
SANDBOX_IMAGE=stockade.local/pause:1
POD_IMAGE=${STOCKADE_POD_IMAGE:-stockade.local/busybox:1} # another name: test.sh's failure path
KUBECONFIG_FILE=$STATE/kubeconfig

# Go as the repository's sdk/go/goenv.sh sets it up: the local toolchain, the
# module proxy, and the shared caches under /var/cache/stockade/go.
export GOTOOLCHAIN=local
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
export GOFLAGS=${GOFLAGS:--mod=readonly}
go_cache=/var/cache/stockade/go
if mkdir -p "$go_cache" 2>/dev/null && [ -w "$go_cache" ]; then
  export GOMODCACHE=${GOMODCACHE:-$go_cache/mod} GOCACHE=${GOCACHE:-$go_cache/build}
fi
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH=/usr/local/go/bin:$PATH
fi

die() { echo "cluster: $*" >&2; exit 1; }
say() { echo "cluster: $*" >&2; }

# The v1 cgroup hierarchies mounted (cgroup2's unified one has no controllers
# on a hybrid machine, and the kubelet's cgroupfs driver uses the v1 ones).
cgroup_hierarchies() { awk '$3 == "cgroup" { print $2 }' /proc/mounts; }
# All cgroup mounts, the unified one too: runc on a hybrid machine mirrors
# each container's cgroup there, so down.sh sweeps it as well.
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts; }
# The cluster's cgroups sit below the memory cgroup this shell is in, so the
# memory they use is counted where this shell's is.
cgroup_base() {
  local base
  base=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
  [ "$base" = / ] && base=
  echo "$base"
}

# The kubelet's kernel settings: up.sh records them, down.sh checks them.
WATCHED_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
sysctl_snapshot() {
  local k
  for k in "${WATCHED_SYSCTLS[@]}"; do echo "$k=$(sysctl -n "$k" 2>/dev/null || echo '?')"; done
}

# The pid recorded for a component, if it is still running.
pid_of() {
  local f=$STATE/run/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Seconds since the epoch with milliseconds, and a difference of two of them.
now() { date +%s.%N | cut -c1-14; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
