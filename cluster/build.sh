#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
# and kubectl from the pinned k8s.io/kubernetes module once, into
# /var/cache/stockade/k8s/<version>/bin, and installs the Debian packages the
# cluster runs on. Skips what is already there; checks each piece at the end.
#   cluster/build.sh            build what is missing, install packages, check
#   cluster/build.sh --check    only check, build nothing
#   cluster/build.sh --packages only the Debian packages
#   cluster/build.sh --binaries only the binaries (no apt: test.sh runs them beside
#                               its own build, and apt beside it one at a time)
set -euo pipefail
# shellcheck source=env.sh
. "$(dirname "$0")/env.sh"

check_only=false
[ "${1:-}" = --check ] && check_only=true
packages_only=false
[ "${1:-}" = --packages ] && packages_only=true
binaries_only=false
[ "${1:-}" = --binaries ] && binaries_only=true

install_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "installing Debian packages: ${missing[*]}"
  [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root (apt-get install ${missing[*]})"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

have_binaries() {
  local b
  for b in "${K8S_BINARIES[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done
  # The go.sum the binaries were built from: another pin means another build.
  cmp -s "$K8S_BIN/.go.sum" "$cluster_dir/go.sum"
}

build_binaries() {
  command -v go >/dev/null || die "no go command: install Go 1.24 or newer (the repository uses /usr/local/go)"
  local tmp log start major minor ldflags
  mkdir -p "$K8S_CACHE/$K8S_VERSION"
  tmp=$(mktemp -d "$K8S_CACHE/$K8S_VERSION/.build.XXXXXX")
  log=$K8S_CACHE/$K8S_VERSION/build.log
  start=$(date +%s)
  say "building ${K8S_BINARIES[*]} $K8S_VERSION into $K8S_BIN (log: $log)"
  say "downloading modules..."
  (cd "$cluster_dir" && nice -n 19 go mod download) >"$log" 2>&1 || { tail -20 "$log" >&2; die "go mod download failed: is the Go module proxy ($GOPROXY) reachable?"; }
  major=${K8S_VERSION#v}; minor=${major#*.}; minor=${minor%%.*}; major=${major%%.*}
  # The version the components report (kubelet's node info, the apiserver's /version).
  ldflags="-s -w"
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor"
    ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  done
  # One go build for all six: shared packages compile once. -v names each
  # package as it is compiled; the count is the progress shown.
  local pkgs=() b
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("./cmd/$b"); done
  (cd "$cluster_dir" && nice -n 19 go build -v -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}") 2>&1 \
    | tee -a "$log" | awk -v start="$start" '
        NR % 250 == 0 { printf "cluster:   %d packages compiled (%ds)\n", NR, systime() - start > "/dev/stderr"; fflush() }' \
    || true
  for b in "${K8S_BINARIES[@]}"; do
    [ -x "$tmp/$b" ] || { tail -30 "$log" >&2; rm -rf "$tmp"; die "go build of $b failed (log above, whole log in $log)"; }
  done
  cp "$cluster_dir/go.sum" "$tmp/.go.sum"
  chmod 755 "$tmp"
  rm -rf "$K8S_BIN" && mv "$tmp" "$K8S_BIN"
  say "built in $(($(date +%s) - start))s"
}

check() {
  local bad=0 b out
  for b in "${K8S_BINARIES[@]}"; do
    if [ ! -x "$K8S_BIN/$b" ]; then
      say "$b not built: run cluster/build.sh"; bad=1; continue
    fi
    local args=(--version)
    [ "$b" = kubectl ] && args=(version --client)
    # The whole output first: head on a pipe could cut the writer off (SIGPIPE).
    if ! out=$("$K8S_BIN/$b" "${args[@]}" 2>&1); then
      say "$b does not run: rebuild with rm -rf $K8S_BIN && cluster/build.sh"; bad=1; continue
    fi
    say "ok $b: ${out%%$'\n'*}"
  done
  for b in containerd ctr runc iptables openssl; do
    command -v "$b" >/dev/null || { say "$b missing: apt-get install $(dpkg -S "*/$b" 2>/dev/null | head -1 | cut -d: -f1 || echo "$b")"; bad=1; continue; }
  done
  if out=$(containerd --version 2>&1); then say "ok $out"; else say "containerd does not run: apt-get install --reinstall containerd"; bad=1; fi
  if out=$(runc --version 2>&1); then say "ok ${out%%$'\n'*}"; else say "runc does not run: apt-get install --reinstall runc"; bad=1; fi
  local cni_ok=true
  for b in bridge host-local loopback; do
    [ -x "$CNI_BIN_DIR/$b" ] || { say "CNI plugin $CNI_BIN_DIR/$b missing: apt-get install containernetworking-plugins"; cni_ok=false; bad=1; }
  done
  if $cni_ok; then say "ok CNI plugins in $CNI_BIN_DIR"; fi
  if [ -x /bin/busybox ] && file_is_static /bin/busybox; then
    say "ok static busybox"
  else
    say "no static /bin/busybox (the pod image): apt-get install busybox-static"; bad=1
  fi
  return "$bad"
}

file_is_static() { ! ldd "$1" >/dev/null 2>&1; }

if ! $check_only; then
  $binaries_only || install_packages
  $packages_only && exit 0
  # One build at a time per cache (a CI run and a shell may both start one).
  mkdir -p "$K8S_CACHE"
  exec 9>"$K8S_CACHE/.build.lock"
  flock -n 9 || { say "another build.sh holds $K8S_CACHE/.build.lock: waiting"; flock 9; }
  if have_binaries; then
    say "binaries $K8S_VERSION present in $K8S_BIN, not rebuilding"
  else
    build_binaries
  fi
fi
if $binaries_only; then
  # The packages are checked where they are installed (cluster/build.sh --packages).
  for b in "${K8S_BINARIES[@]}"; do
    [ -x "$K8S_BIN/$b" ] || die "$b was not built (messages above)"
  done
  exit 0
fi
check || die "some parts are missing or broken (messages above)"
