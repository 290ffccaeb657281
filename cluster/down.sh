#!/usr/bin/env bash
# Tears down what cluster/up.sh started and leaves nothing behind: the
# processes (the daemons, the containers, the shims), the mounts under the
# state dir, the network (bridges, veths, namespaces), the cgroups, the
# iptables rules and chains added since up.sh; then checks that the kernel
# settings are as up.sh found them, and removes the state dir.
#   cluster/down.sh            (STOCKADE_CLUSTER_DIR as for up.sh)
#   cluster/down.sh --keep-logs   leaves STATE/logs (everything else goes)
# Exits non-zero if something could not be taken away, saying what.
set -euo pipefail
# shellcheck source=env.sh
. "$(dirname "$0")/env.sh"

keep_logs=false
[ "${1:-}" = --keep-logs ] && keep_logs=true
[ -d "$STATE" ] || { say "no cluster in $STATE"; exit 0; }
problems=0
problem() { say "left behind: $*"; problems=1; }

# stop NAME...: SIGTERM, up to 10 s, then SIGKILL.
stop() {
  local t
  t=$(now)
  stop_now "$@"
  say "stopped $* in $(elapsed "$t" "$(now)")s"
}
stop_now() {
  local name pid pids=()
  for name in "$@"; do
    if pid=$(pid_of "$name"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  local i
  for i in $(seq 50); do
    local alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [ ${#alive[@]} -eq 0 ] && return
    if [ "$i" = 50 ]; then kill -KILL "${alive[@]}" 2>/dev/null || true; fi
    sleep 0.2
  done
}
# The processes in a cgroup tree (one hierarchy is enough: all are joined).
procs_under() {
  local h
  h=$(cgroup_hierarchies | grep -m1 -E '/(pids|memory|freezer)$' || cgroup_hierarchies | head -1)
  [ -d "$h$1" ] || return 0
  find "$h$1" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}
nodes=()
for d in "$STATE"/nodes/*/; do [ -d "$d" ] && nodes+=("$(basename "$d")"); done

# 1. Kubelets first (they would restart what is killed), then the containers
#    in the nodes' cgroups, then everything else in the cluster's tree.
for n in "${nodes[@]}"; do stop "kubelet-$n"; done
stop kube-scheduler kube-controller-manager
cg_root=$(cat "$STATE/host/cgroup-root" 2>/dev/null || true)
if [ -n "$cg_root" ]; then
  for n in "${nodes[@]}"; do
    for i in 1 2 3; do
      stray=$(procs_under "$cg_root/$n")
      [ -z "$stray" ] && break
      # shellcheck disable=SC2086
      kill -KILL $stray 2>/dev/null || true
      sleep 0.5
    done
  done
fi
# Tasks deleted through containerd, so that each shim exits and cleans up.
for n in "${nodes[@]}"; do
  sock=$STATE/nodes/$n/containerd/containerd.sock
  pid_of "containerd-$n" >/dev/null || continue
  for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks delete --force "$id" >/dev/null 2>&1 || true
  done
done
for n in "${nodes[@]}"; do stop "containerd-$n"; done
stop kube-apiserver etcd
if [ -n "$cg_root" ]; then
  for i in $(seq 20); do
    stray=$(procs_under "$cg_root")
    [ -z "$stray" ] && break
    # shellcheck disable=SC2086
    kill -KILL $stray 2>/dev/null || true
    sleep 0.25
  done
  [ -z "$(procs_under "$cg_root")" ] || problem "processes in cgroup $cg_root: $(procs_under "$cg_root" | tr '\n' ' ')"
fi

# 2. Mounts under the state dir (pod volumes, network namespaces, rootfs
#    overlays, the state dir's own bind), deepest first.
umount_all() {
  local m
  findmnt -rn -o TARGET | awk -v s="$STATE" '$0 == s || index($0, s "/") == 1' | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}
umount_all
umount_all
if findmnt -rn -o TARGET | grep -q -F "$STATE"; then problem "mounts under $STATE"; fi

# 3. Network: the bridges up.sh made and any veth still on them.
if [ -f "$STATE/host/links" ]; then
  while read -r link; do
    for v in $(ip -o link show master "$link" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
      ip link del "$v" 2>/dev/null || true
    done
    ip link del "$link" 2>/dev/null || true
    if ip link show "$link" >/dev/null 2>&1; then problem "link $link"; fi
  done <"$STATE/host/links"
fi
if [ -f "$STATE/host/netns" ]; then
  while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done <"$STATE/host/netns"
fi

# CNI's result cache and the shims' sockets that came during the run; a
# socket something still listens on (another containerd's shim) is kept.
new_entries() { # new_entries DIR BEFORE_LIST
  [ -d "$1" ] || return 0
  local f
  for f in "$1"/*; do
    [ -e "$f" ] || continue
    grep -q -x -F "${f##*/}" "$2" || echo "${f##*/}"
  done
}
if [ -f "$STATE/host/cni-results.before" ]; then
  for f in $(new_entries /var/lib/cni/results "$STATE/host/cni-results.before"); do
    case $f in stockade-* | cni-loopback-*) rm -f "/var/lib/cni/results/$f" ;; esac
  done
fi
if [ -f "$STATE/host/shim-sockets.before" ]; then
  listening=$(ss -Hxl 2>/dev/null | awk '{ print $5 }')
  for f in $(new_entries /run/containerd/s "$STATE/host/shim-sockets.before"); do
    grep -qxF "/run/containerd/s/$f" <<<"$listening" || rm -f "/run/containerd/s/$f"
  done
fi
if [ -f "$STATE/host/dirs-made" ]; then
  tac "$STATE/host/dirs-made" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
fi

# 4. cgroups: the kubelets' trees below the cluster's root, then the dirs
#    up.sh made, deepest first.
if [ -n "$cg_root" ]; then
  while read -r h; do
    if [ -d "$h$cg_root" ]; then find "$h$cg_root" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done < <(cgroup_mounts)
  if [ -f "$STATE/host/cgroups-made" ]; then
    tac "$STATE/host/cgroups-made" | while read -r d; do [ ! -d "$d" ] || rmdir "$d" 2>/dev/null || true; done
  fi
  while read -r h; do
    [ ! -d "$h$cg_root" ] || problem "cgroup $h$cg_root"
  done < <(cgroup_mounts)
fi

# 5. iptables: rules and chains that are there now and were not before up.sh
#    (the kubelet's KUBE-IPTABLES-HINT and KUBE-FIREWALL, anything CNI added).
restore_firewall() { # restore_firewall iptables|ip6tables
  local before=$STATE/host/$1.before now table line chain
  [ -f "$before" ] || return 0
  now=$("$1-save" 2>/dev/null) || return 0
  table=
  while IFS= read -r line; do
    case $line in
      \**) table=${line#\*} ;;
      -A\ *)
        if ! awk -v t="*$table" -v l="$line" '$0 == t { in_t = 1; next } /^\*/ { in_t = 0 } in_t && $0 == l { f = 1 } END { exit !f }' "$before"; then
          # shellcheck disable=SC2086
          eval "$1 -w -t $table -D ${line#-A }" 2>/dev/null || problem "$1 rule in $table: $line"
        fi ;;
    esac
  done <<<"$now"
  table=
  while IFS= read -r line; do
    case $line in
      \**) table=${line#\*} ;;
      :*)
        chain=${line#:}
        chain=${chain%% *}
        if ! awk -v t="*$table" -v c=":$chain " '$0 == t { in_t = 1; next } /^\*/ { in_t = 0 } in_t && index($0, c) == 1 { f = 1 } END { exit !f }' "$before"; then
          "$1" -w -t "$table" -F "$chain" 2>/dev/null || true
          "$1" -w -t "$table" -X "$chain" 2>/dev/null || problem "$1 chain $chain in $table"
        fi ;;
    esac
  done <<<"$("$1-save" 2>/dev/null)"
}
restore_firewall iptables
restore_firewall ip6tables

# 6. Kernel settings: the same as before up.sh, or said loudly.
if [ -f "$STATE/host/sysctl.before" ]; then
  if ! diff <(sysctl_snapshot) "$STATE/host/sysctl.before" >"$STATE/host/sysctl.diff"; then
    problem "kernel settings changed during the run (now < > before): $(tr '\n' ' ' <"$STATE/host/sysctl.diff")"
  else
    say "kernel settings unchanged: $(grep -v ip_forward "$STATE/host/sysctl.before" | tr '\n' ' ')"
  fi
fi

# 7. Processes anywhere that still name the state dir (none expected).
for p in /proc/[0-9]*; do
  cmd=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue # gone meanwhile
  case $cmd in *"$STATE/"*) problem "process ${p#/proc/}: ${cmd:0:120}" ;; esac
done

# 8. The state dir.
if $keep_logs; then
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
else
  rm -rf "$STATE"
fi
[ "$problems" = 0 ] && say "down: nothing left behind"
exit "$problems"
