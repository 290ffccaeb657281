#!/bin/sh
# What CI needs for the docker provider's tests. Idempotent: safe to run on every build.
#   - Debian's docker.io (dockerd 20.10, Engine API 1.41), installed when missing
#   - dockerd answering on /var/run/docker.sock with userns-remap (set in
#     /etc/docker/daemon.json): started in the background when it does not answer
#     (log: /var/log/stockade-dockerd.log)
#   - the stockade agent, statically linked (scripts/build-agent.sh), that the provider
#     bind-mounts as PID 1 of every container: $CARGO_TARGET_DIR/debug/stockade-agent
#   - the test image, imported into dockerd from the Debian rootfs tar that
#     crates/stockade-image/ci-setup.sh builds (key: the first 16 hex of the sha256 of
#     this script followed by that one):
#       stockade-test/debian-python:<key>  bookworm essential + python3-minimal
set -eu
cd "$(dirname "$0")"
DOCKER=/usr/bin/docker

if [ ! -x /usr/sbin/dockerd ] || [ ! -x "$DOCKER" ] || ! command -v mmdebstrap >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io mmdebstrap
fi

# dockerd with a user namespace (userns-remap: its own "dockremap" ids, made at its
# first start), so that no container's uid is an account of the host. A dockerd
# already running without it is restarted with it.
conf=/etc/docker/daemon.json
if ! grep -q '"userns-remap"' "$conf" 2>/dev/null; then
    mkdir -p /etc/docker
    python3 - "$conf" <<'PY'
import json, os, sys
p = sys.argv[1]
c = json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else {}
c["userns-remap"] = "default"
with open(p, "w") as f:
    json.dump(c, f, indent=2)
PY
fi
if "$DOCKER" version >/dev/null 2>&1 &&
    ! "$DOCKER" info --format '{{.SecurityOptions}}' 2>/dev/null | grep -q 'name=userns'; then
    pid=$(pgrep -x dockerd | head -1)
    if [ -n "$pid" ]; then
        kill -TERM "$pid"
        i=0
        while [ -e "/proc/$pid" ]; do
            i=$((i + 1))
            if [ $i -gt 300 ]; then
                echo "ci-setup: dockerd (pid $pid) did not stop within 60 s" >&2
                exit 1
            fi
            sleep 0.2
        done
    fi
fi

if ! "$DOCKER" version >/dev/null 2>&1; then
    # No systemd here: start the daemon ourselves, detached, and wait for its socket.
    # It outlives this script, so it must not keep any of our descriptors open (a
    # caller's lock or output pipe would stay held until dockerd exits).
    close=""
    for fd in /proc/$$/fd/*; do
        fd=${fd##*/}
        if [ "$fd" -gt 2 ]; then close="$close $fd>&-"; fi
    done
    eval "setsid /usr/sbin/dockerd >>/var/log/stockade-dockerd.log 2>&1 < /dev/null $close &"
    i=0
    until "$DOCKER" version >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 150 ]; then
            echo "ci-setup: dockerd did not answer within 30 s; see /var/log/stockade-dockerd.log" >&2
            tail -20 /var/log/stockade-dockerd.log >&2 || true
            exit 1
        fi
        sleep 0.2
    done
fi
if ! "$DOCKER" info --format '{{.SecurityOptions}}' | grep -q 'name=userns'; then
    echo "ci-setup: dockerd runs without a user namespace although $conf asks for" \
        "\"userns-remap\": see /var/log/stockade-dockerd.log" >&2
    exit 1
fi

# The agent every container runs as PID 1: the one static agent (scripts/setup.sh
# builds it; this makes sure when the script runs alone). Fresh builds cost nothing.
# (test.sh runs this beside its own build, which builds the agent, and says so.)
[ -n "${STOCKADE_SETUP_NO_BUILD:-}" ] || ../../scripts/build-agent.sh debug >/dev/null

# The rootfs tar is the image tests' own (crates/stockade-image/ci-setup.sh builds it
# with mmdebstrap): one download for both. The tag's key covers both scripts.
key=$(cat ci-setup.sh ../stockade-image/ci-setup.sh | sha256sum | cut -c1-16)
image=stockade-test/debian-python:$key
if ! "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    sh ../stockade-image/ci-setup.sh
    ikey=$(sha256sum ../stockade-image/ci-setup.sh | cut -c1-16)
    "$DOCKER" import --change 'CMD ["/bin/sh"]' \
        "/var/cache/stockade/test-images/$ikey/debian-python.tar" "$image" >/dev/null
fi
