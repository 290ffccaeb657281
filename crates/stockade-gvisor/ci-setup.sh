#!/bin/sh
# What CI needs for the gvisor provider's tests. Idempotent: safe to run on every build.
#   - gVisor's runsc (Debian's `runsc` package, a 2022-12 build; its ptrace platform
#     needs no KVM), installed when missing
#   - the stockade agent, statically linked (scripts/build-agent.sh), that every gVisor
#     sandbox runs as PID 1: $CARGO_TARGET_DIR/debug/stockade-agent
set -eu
cd "$(dirname "$0")"

if ! command -v runsc >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc
fi

../../scripts/build-agent.sh debug >/dev/null
