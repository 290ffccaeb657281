# Sourced by build.sh, up.sh, down.sh and test.sh: where the cluster's
# binaries live and how Go is set up to build them.
# shellcheck shell=bash

cluster_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The one Kubernetes version, read from go.mod's require line.
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" || ($1 == "require" && $2 == "k8s.io/kubernetes") { print $NF; exit }' "$cluster_dir/go.mod")
K8S_CACHE=${STOCKADE_K8S_CACHE:-/var/cache/stockade/k8s}
K8S_BIN=$K8S_CACHE/$K8S_VERSION/bin
# The binaries build.sh makes, in build order (kubectl at the same version).
K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# Debian's packages the cluster runs on (the machine's containerd 1.6, runc
# and CNI plugins), and the static busybox its local images are built from.
APT_PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables openssl iproute2 util-linux procps curl)
CNI_BIN_DIR=/usr/lib/cni

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

# How a missing piece is reported: under CI it fails, elsewhere it says so.
die() { echo "cluster: $*" >&2; exit 1; }
say() { echo "cluster: $*" >&2; }
