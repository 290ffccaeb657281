#!/bin/sh
# What CI needs for the gvisor provider's tests. Idempotent: safe to run on every build.
#   - gVisor's runsc, a 2024 build: on Debian 12 from bookworm-backports (Debian's own
#     package, 0.0~20240729). Debian 12's main runsc (0.0~20221219) has no systrap
#     platform and runs more slowly and less tightly (ARCHITECTURE.md, gvisor), so an
#     older runsc found here is replaced. Elsewhere: the distribution's `runsc`.
#   - the stockade agent, statically linked (scripts/build-agent.sh), that every gVisor
#     sandbox runs as PID 1: $CARGO_TARGET_DIR/debug/stockade-agent
set -eu
cd "$(dirname "$0")"
. ../../scripts/apt-suite.sh

# The 8-digit build date in `runsc --version` (0 when there is no runsc).
runsc_date() {
    { runsc --version 2>/dev/null || true; } | grep -o '[0-9]\{8\}' | head -n 1 | grep . || echo 0
}

if [ "$(runsc_date)" -lt 20240101 ]; then
    . /etc/os-release
    if [ "${VERSION_CODENAME:-}" = bookworm ]; then
        add_backports
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm-backports runsc
    else
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc
    fi
fi
# What was installed must run, and be the 2024 build.
v=$(runsc --version 2>&1) || {
    echo "ci-setup (gvisor): runsc does not run: $v
  Reinstall it: apt-get install --reinstall -t bookworm-backports runsc" >&2
    exit 1
}
if [ "$(runsc_date)" -lt 20240101 ]; then
    echo "ci-setup (gvisor): runsc is older than 2024 ($(echo "$v" | head -n 1)): the provider needs
  the systrap platform. On Debian 12: apt-get install -t bookworm-backports runsc" >&2
    exit 1
fi
echo "ci-setup (gvisor): $(echo "$v" | head -n 1)" >&2

# (test.sh runs this beside its own build, which builds the agent, and says so.)
[ -n "${STOCKADE_SETUP_NO_BUILD:-}" ] || ../../scripts/build-agent.sh debug >/dev/null
