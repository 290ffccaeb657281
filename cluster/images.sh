#!/usr/bin/env bash
# Builds the cluster's two images without any registry, as OCI image layouts
# packed in tar files that `ctr images import` takes:
#   stockade.local/busybox:1  Debian's static busybox with its applets linked
#   stockade.local/pause:1    cmd/pause built statically: the pod sandbox
#   cluster/images.sh OUT_DIR   writes OUT_DIR/busybox.tar and OUT_DIR/pause.tar
# The layers are made reproducibly (sorted, owner 0, mtime 0), so the same
# inputs give the same digests.
set -euo pipefail
# shellcheck source=env.sh
. "$(dirname "$0")/env.sh"

out=${1:?usage: images.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# oci_image NAME ROOTFS_DIR CONFIG_JSON_FRAGMENT OUT_TAR
oci_image() {
  local name=$1 rootfs=$2 config=$3 tarball=$4 layout=$work/layout-$1
  mkdir -p "$layout/blobs/sha256"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$rootfs" -cf "$work/layer.tar" .
  local layer cfg man
  layer=$(sha "$work/layer.tar")
  mv "$work/layer.tar" "$layout/blobs/sha256/$layer"
  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$config" "$layer" >"$work/config.json"
  cfg=$(sha "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' \
    "$cfg" "$(size "$work/config.json")" "$layer" "$(size "$layout/blobs/sha256/$layer")" >"$work/manifest.json"
  man=$(sha "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man" "$(size "$work/manifest.json")" "$name" "${name##*:}" >"$layout/index.json"
  mv "$work/config.json" "$layout/blobs/sha256/$cfg"
  mv "$work/manifest.json" "$layout/blobs/sha256/$man"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$layout" -cf "$tarball" .
}

# busybox: /bin/busybox and a link per applet, a /tmp, a root user.
[ -x /bin/busybox ] || die "no /bin/busybox: apt-get install busybox-static"
if ldd /bin/busybox >/dev/null 2>&1; then
  die "/bin/busybox is dynamically linked: apt-get install busybox-static"
fi
root=$work/busybox
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
oci_image stockade.local/busybox:1 "$root" \
  '{"Env":["PATH=/bin"],"Cmd":["/bin/sh"],"WorkingDir":"/"}' "$out/busybox.tar"

# pause: one static Go binary.
root=$work/pause
mkdir -p "$root"
(cd "$cluster_dir" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags='-s -w' -o "$root/pause" ./cmd/pause) \
  || die "go build ./cmd/pause failed"
oci_image stockade.local/pause:1 "$root" \
  '{"Entrypoint":["/pause"],"WorkingDir":"/"}' "$out/pause.tar"
say "images: $out/busybox.tar $out/pause.tar"
