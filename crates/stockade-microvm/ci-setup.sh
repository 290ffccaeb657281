#!/bin/sh
# What CI needs for the microvm provider's tests. Idempotent: safe to run on every build.
#   - qemu-system-x86 (QEMU's microvm machine; TCG where KVM is unusable)
#   - a Debian cloud kernel of 6.2 or newer (the guest: /boot/vmlinuz-*-cloud-amd64
#     and its modules; the agent needs landlock ABI 3): on Debian 12 (bookworm, 6.1)
#     linux-image-cloud-amd64 from bookworm-backports (6.12), whose apt source this
#     adds (backports are pinned below the release: nothing else changes)
#   - erofs-utils (mkfs.erofs: the guest's read-only root image, built on first use
#     and cached under /var/cache/stockade/microvm), xz-utils (the kernel's modules
#     are xz-compressed), binutils (strip), util-linux (unshare)
# The static agent the guest runs as PID 1 comes from scripts/build-agent.sh, which
# scripts/setup.sh runs.
set -eu
need=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
command -v mkfs.erofs >/dev/null 2>&1 || need="$need erofs-utils"
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
command -v strip >/dev/null 2>&1 || need="$need binutils"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
updated=""
if [ -n "$need" ]; then
    apt-get update -q
    updated=1
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
fi
# A cloud kernel of 6.2 or newer?
kernel_ok() {
    for k in /boot/vmlinuz-*-cloud-amd64; do
        [ -e "$k" ] || continue
        v=${k#/boot/vmlinuz-}
        major=${v%%.*}
        rest=${v#*.}
        minor=${rest%%.*}
        if [ "$major" -gt 6 ] || { [ "$major" -eq 6 ] && [ "$minor" -ge 2 ]; }; then
            return 0
        fi
    done
    return 1
}
if ! kernel_ok; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
        list=/etc/apt/sources.list.d/stockade-microvm-backports.list
        [ -f "$list" ] || echo "deb http://deb.debian.org/debian bookworm-backports main" > "$list"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            -t bookworm-backports linux-image-cloud-amd64
    else
        [ -n "$updated" ] || apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-image-cloud-amd64
    fi
fi
mkdir -p /var/cache/stockade/microvm
