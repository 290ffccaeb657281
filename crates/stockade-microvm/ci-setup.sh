#!/bin/sh
# What CI needs for the microvm provider's tests. Idempotent: safe to run on every build.
#   - qemu-system-x86 (QEMU's microvm machine; TCG where KVM is unusable)
#   - linux-image-cloud-amd64 (the guest kernel, /boot/vmlinuz-*-cloud-amd64, and its
#     modules under /lib/modules)
#   - erofs-utils (mkfs.erofs: the guest's read-only root image, built on first use
#     and cached under /var/cache/stockade/microvm), xz-utils (newer kernels compress
#     their modules), binutils (strip), util-linux (unshare)
#   - slirp4netns and nftables (a VM with --network: the native provider's NAT helper
#     and firewall around the VMM's network namespace)
# The static agent the guest runs as PID 1 comes from scripts/build-agent.sh, which
# scripts/setup.sh runs.
set -eu
need=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || need="$need linux-image-cloud-amd64"
command -v mkfs.erofs >/dev/null 2>&1 || need="$need erofs-utils"
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
command -v strip >/dev/null 2>&1 || need="$need binutils"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
command -v slirp4netns >/dev/null 2>&1 || need="$need slirp4netns"
[ -x /usr/sbin/nft ] || command -v nft >/dev/null 2>&1 || need="$need nftables"
if [ -n "$need" ]; then
    apt-get update -q
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
fi
mkdir -p /var/cache/stockade/microvm
