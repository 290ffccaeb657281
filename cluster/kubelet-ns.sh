#!/usr/bin/env bash
# Runs a command (the kubelet) in the mount namespace that `unshare -m
# --propagation unchanged` gave it, so that it cannot change the machine:
#  - the kernel settings the kubelet insists on (vm.overcommit_memory,
#    vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.*) read
#    as the values it wants from read-only files bound over them in this
#    namespace only, and with protectKernelDefaults the kubelet only checks
#    them, never writes: the host's values stay as they are;
#  - /var/log is a tmpfs here, for the kubelet's /var/log/containers links
#    (a path it does not let one configure).
# The state dir is a shared mount (up.sh binds it so), so the volumes the
# kubelet mounts under it are seen by containerd and runc outside.
#   kubelet-ns.sh STATE_DIR COMMAND...
set -euo pipefail
state=$1
shift
# Make the mounts holding /proc and /var/log private in this namespace only,
# so that nothing mounted on them below goes back to the host's namespace.
for t in /proc /var/log; do
  mount --make-private "$(findmnt -n -o TARGET -T "$t")"
done
mount -t tmpfs -o mode=0755,size=16m stockade-kubelet-log /var/log
shadow=$state/sysctl
mkdir -p "$shadow"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  key=${kv%%=*}
  file=$shadow/${key//\//.}
  echo "${kv#*=}" >"$file"
  mount --bind "$file" "/proc/sys/$key"
  mount -o remount,bind,ro "/proc/sys/$key"
done
exec "$@"
