#!/bin/sh
# What CI needs for the microvm provider's tests. Idempotent: safe to run on every build.
#   - qemu-system-x86 (QEMU's microvm machine; TCG where KVM is unusable), from the
#     suite of the QEMU packages already installed: an image that ships qemu-utils
#     from bookworm-backports gets QEMU from there too (apt refuses to mix the two).
#     With none installed, the distribution's.
#   - a virtiofsd for shared directories: QEMU 7.2's (/usr/lib/qemu/virtiofsd) or the
#     distribution's (/usr/libexec/virtiofsd); QEMU 8 and later ship none, and
#     bookworm has no package, so then crates.io's `virtiofsd` (pinned) is built once
#     into the tools cache and installed as /usr/local/libexec/virtiofsd
#   - linux-image-cloud-amd64 (the guest kernel, /boot/vmlinuz-*-cloud-amd64, and its
#     modules under /lib/modules)
#   - erofs-utils (mkfs.erofs: the guest's read-only root image, built on first use
#     and cached under /var/cache/stockade/microvm), xz-utils (newer kernels compress
#     their modules), binutils (strip), util-linux (unshare)
#   - slirp4netns and nftables (a VM with --network: the native provider's NAT helper
#     and firewall around the VMM's network namespace)
# The static agent the guest runs as PID 1 comes from scripts/build-agent.sh, which
# scripts/setup.sh runs. Ends by checking that QEMU and virtiofsd run.
set -eu
cd "$(dirname "$0")"
. ../../scripts/apt-suite.sh
VIRTIOFSD_CRATE=1.14.0
tools=/var/cache/stockade/tools

fail() {
    echo "ci-setup (microvm): $*" >&2
    exit 1
}

# The QEMU packages installed now, as "package version" lines.
qemu_installed() {
    dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' 'qemu-*' 2>/dev/null |
        awk '$1 == "ii" {print $2, $3}'
}

need=""
qemu_from=""
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    need="$need qemu-system-x86"
    if qemu_installed | awk '{print $2}' | grep -q '~bpo'; then
        qemu_from=bookworm-backports
    fi
fi
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || need="$need linux-image-cloud-amd64"
command -v mkfs.erofs >/dev/null 2>&1 || need="$need erofs-utils"
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
command -v strip >/dev/null 2>&1 || need="$need binutils"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
command -v slirp4netns >/dev/null 2>&1 || need="$need slirp4netns"
[ -x /usr/sbin/nft ] || command -v nft >/dev/null 2>&1 || need="$need nftables"
if [ -n "$need" ]; then
    if [ -n "$qemu_from" ]; then
        add_backports
        echo "ci-setup (microvm): QEMU from $qemu_from, as the installed:" $(qemu_installed) >&2
    fi
    apt-get update -q
    # shellcheck disable=SC2086
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        ${qemu_from:+-t "$qemu_from"} $need; then
        fail "apt could not install$need${qemu_from:+ from $qemu_from} (its reason is above).
  QEMU packages installed here: $(qemu_installed | tr '\n' ' ')
  QEMU's packages must all come from one suite: install qemu-system-x86 from the suite
  of those (apt-get install -t bookworm-backports qemu-system-x86 when they are ~bpo12
  builds), or remove them (apt-get purge 'qemu-*') and run this script again."
    fi
fi

# virtiofsd: the one beside QEMU, the distribution's, or crates.io's built here.
vfsd=""
for c in /usr/libexec/virtiofsd /usr/lib/qemu/virtiofsd /usr/local/libexec/virtiofsd; do
    if [ -x "$c" ]; then vfsd=$c; break; fi
done
if [ -z "$vfsd" ]; then
    if [ ! -x "$tools/virtiofsd-$VIRTIOFSD_CRATE/bin/virtiofsd" ]; then
        echo "ci-setup (microvm): this QEMU ships no virtiofsd: building crates.io's virtiofsd $VIRTIOFSD_CRATE" >&2
        missing=""
        for p in libseccomp-dev libcap-ng-dev pkg-config; do
            [ -n "$(installed_version "$p")" ] || missing="$missing $p"
        done
        if [ -n "$missing" ]; then
            apt-get update -q
            # shellcheck disable=SC2086
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
        fi
        command -v cargo >/dev/null 2>&1 ||
            fail "cargo is needed to build virtiofsd: run scripts/setup.sh --packages first"
        # A target directory of its own (a build beside this one holds the workspace's).
        env -u CARGO_TARGET_DIR cargo install --locked --quiet \
            --root "$tools/virtiofsd-$VIRTIOFSD_CRATE" "virtiofsd@$VIRTIOFSD_CRATE" ||
            fail "building virtiofsd $VIRTIOFSD_CRATE from crates.io failed (above); it needs
  libseccomp-dev and libcap-ng-dev (apt-get install libseccomp-dev libcap-ng-dev)"
    fi
    install -D -m 0755 "$tools/virtiofsd-$VIRTIOFSD_CRATE/bin/virtiofsd" /usr/local/libexec/virtiofsd
    vfsd=/usr/local/libexec/virtiofsd
fi
mkdir -p /var/cache/stockade/microvm

# What was installed must run.
qemu_v=$(qemu-system-x86_64 --version 2>&1) ||
    fail "qemu-system-x86_64 does not run: $qemu_v
  Reinstall it: apt-get install --reinstall qemu-system-x86"
vfsd_v=$("$vfsd" --version 2>&1) ||
    fail "$vfsd does not run: $vfsd_v
  Remove it and run this script again (crates.io's is rebuilt into $tools)"
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 ||
    fail "no guest kernel (/boot/vmlinuz-*-cloud-amd64): apt-get install linux-image-cloud-amd64"
echo "ci-setup (microvm): $(echo "$qemu_v" | head -n 1); $vfsd: $(echo "$vfsd_v" | head -n 1)" >&2
