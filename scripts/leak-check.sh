#!/usr/bin/env bash
# Fails when anything of Stockade is left on the host: cgroups, monitor or agent
# processes, sandbox state directories, mounts.
set -uo pipefail
# Sandboxes owned by test processes that just exited are torn down by their monitors
# within milliseconds; give that a few seconds before judging.
for _ in $(seq 50); do
  pgrep -f 'stockade-agent monitor|stockade-monitor' >/dev/null || break
  sleep 0.1
done
leaks=0
report() { echo "leak-check: $*" >&2; leaks=1; }

cgs=$(find /sys/fs/cgroup -maxdepth 3 -path '*/stockade/sb-*' -type d 2>/dev/null)
[ -z "$cgs" ] || report "cgroups left: $cgs"
# Live processes only (zombies wait for their parent and hold nothing).
live() { ps -eo stat=,pid=,args= | awk '$1 !~ /^Z/' | grep -E "$1" | grep -v grep; }
procs=$(live 'stockade-agent (monitor|shim)|stockade-monitor|stockade-shim')
[ -z "$procs" ] || report "processes left: $procs"
for root in /run/stockade /tmp/stockade-it-* /tmp/stockade-cli-it-*; do
  [ -d "$root" ] || continue
  left=$(find "$root" -mindepth 1 -maxdepth 1 -name 'sb-*' 2>/dev/null)
  [ -z "$left" ] || report "state left in $root: $left"
done
mnts=$(grep -E 'stockade/sb-' /proc/self/mountinfo)
[ -z "$mnts" ] || report "mounts left: $mnts"
# The staged mounts (`STATE_DIR/mounts/TOKEN/N`) of test daemons, whose state
# directories are `/tmp/.tmpXXXX/daemon`.
staged=$(awk '$5 ~ /^\/tmp\/\.tmp[^\/]+\/daemon\/mounts\/[0-9a-f]+\/[0-9]+$/ {print $5}' /proc/self/mountinfo)
[ -z "$staged" ] || report "staged mounts of a daemon left: $staged"
slirps=$(live 'slirp4netns')
[ -z "$slirps" ] || report "network helpers left: $slirps"
# Docker sandboxes: containers labelled by stockade, their host dirs and watchers.
if [ -x /usr/bin/docker ] && /usr/bin/docker version >/dev/null 2>&1; then
  for _ in $(seq 50); do
    [ -z "$(/usr/bin/docker ps -aq --filter label=io.stockade.provider)" ] && break
    sleep 0.1
  done
  ctrs=$(/usr/bin/docker ps -a --filter label=io.stockade.provider --format '{{.Names}} {{.Status}}')
  [ -z "$ctrs" ] || report "docker containers left: $ctrs"
fi
dirs=$(find /run/stockade-docker -mindepth 1 -maxdepth 1 -name 'sb-*' 2>/dev/null)
[ -z "$dirs" ] || report "docker sandbox dirs left: $dirs"
watchers=$(live 'stockade-agent docker-watch')
[ -z "$watchers" ] || report "docker watchers left: $watchers"
# gVisor sandboxes: their state dirs, runsc's sandbox and gofer processes, watchers.
for _ in $(seq 50); do
  live 'runsc-sandbox|runsc-gofer|gvisor-watch' >/dev/null || break
  sleep 0.1
done
dirs=$(find /run/stockade-gvisor /run/stockade-gvisor-it -mindepth 1 -maxdepth 1 -name 'sb-*' 2>/dev/null)
[ -z "$dirs" ] || report "gvisor sandbox dirs left: $dirs"
runsc_files=$(find /run/stockade-gvisor/runsc /run/stockade-gvisor-it/runsc -mindepth 1 -maxdepth 1 -name 'sb-*' 2>/dev/null)
[ -z "$runsc_files" ] || report "gvisor runsc state left: $runsc_files"
gv=$(live 'runsc-sandbox|runsc-gofer|stockade-agent gvisor-watch')
[ -z "$gv" ] || report "gvisor processes left: $gv"
# Remove the (empty) per-run state roots of the test binaries.
rmdir /tmp/stockade-it-* /tmp/stockade-cli-it-* 2>/dev/null || true
[ $leaks = 0 ] && echo "leak-check: nothing left"
exit $leaks
