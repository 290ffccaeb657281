#!/usr/bin/env bash
# Image benchmarks: pull throughput from a loopback registry, and a cold
# `stockade run --image` (empty store: pull + unpack + run) against host-rootfs mode.
#   sudo bench/images.sh
# Needs crates/stockade-image/ci-setup.sh (registry, skopeo, the Debian test image).
set -euo pipefail
cd "$(dirname "$0")/.."
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
key=$(sha256sum crates/stockade-image/ci-setup.sh | cut -c1-16)
base=/var/cache/stockade/test-images/$key/debian-python.tar
[ -f "$base" ] || { echo "run crates/stockade-image/ci-setup.sh first" >&2; exit 1; }
# --workspace: the same feature set as every other build, so nothing is rebuilt twice.
cargo build -q --release --workspace --bins
bin=$CARGO_TARGET_DIR/release
work=$(mktemp -d)
trap 'kill $reg_pid 2>/dev/null; rm -rf "$work"' EXIT

# An OCI layout of the Debian rootfs (one plain layer), pushed gzip-compressed.
python3 - "$base" "$work/layout" <<'PY'
import hashlib, json, os, shutil, sys
base, out = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/blobs/sha256")
def put(path=None, data=None):
    h = hashlib.sha256()
    if data is None:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""): h.update(chunk)
        shutil.copy(path, f"{out}/blobs/sha256/{h.hexdigest()}")
        size = os.path.getsize(path)
    else:
        h.update(data); open(f"{out}/blobs/sha256/{h.hexdigest()}", "wb").write(data); size = len(data)
    return "sha256:" + h.hexdigest(), size
layer = put(base)
config = json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/usr/bin:/bin"]},
    "rootfs": {"type": "layers", "diff_ids": [layer[0]]}}).encode()
c = put(data=config)
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c[0], "size": c[1]},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer[0], "size": layer[1]}]}).encode()
m = put(data=manifest)
open(f"{out}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": m[0], "size": m[1], "annotations": {"org.opencontainers.image.ref.name": "v1"}}]},
    open(f"{out}/index.json", "w"))
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/registry.yml" <<YML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $work/data}}
http: {addr: 127.0.0.1:$port}
YML
docker-registry serve "$work/registry.yml" >/dev/null 2>&1 &
reg_pid=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
ref=127.0.0.1:$port/bench/debian:1
skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$work/layout:v1" "docker://$ref"

echo "## pull (gzip layer over loopback HTTP) and flatten"
"$bin/images" pull "$ref" 3

echo "## cold run from the image (empty store each time) vs host rootfs"
export STOCKADE_AGENT=$bin/stockade-agent
hyperfine -N --warmup 1 --runs 5 \
  --prepare "rm -rf $work/home" --prepare true --prepare true \
  -n "run --image (cold: pull+unpack+run)" \
  "env STOCKADE_HOME=$work/home $bin/stockade run --image $ref -- /usr/bin/python3 -c pass" \
  -n "run --image (warm store)" \
  "env STOCKADE_HOME=$work/warm $bin/stockade run --image $ref -- /usr/bin/python3 -c pass" \
  -n "run (host rootfs)" \
  "$bin/stockade run -- /usr/bin/python3 -c pass"
