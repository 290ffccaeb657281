#!/bin/sh
# What CI needs for the stockade-image tests. Idempotent: safe to run on every build.
#   - mmdebstrap (apt package), to build the test image
#   - docker-registry and skopeo (apt packages): tests/it/registry.rs starts its own
#     registries on loopback and pushes test images with skopeo; openssl signs the
#     bearer tokens of its token server
#   - a Debian bookworm root filesystem with python3-minimal, as a tar, under
#     /var/cache/stockade/test-images/<first 16 hex of this script's sha256>/
#     (tests/it/debian.rs computes the same key; editing this script rebuilds it)
set -eu
cd "$(dirname "$0")"

if ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v docker-registry >/dev/null 2>&1 ||
    ! command -v skopeo >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q mmdebstrap docker-registry skopeo openssl
fi

key=$(sha256sum ci-setup.sh | cut -c1-16)
dir=/var/cache/stockade/test-images/$key
if [ ! -f "$dir/debian-python.tar" ]; then
    mkdir -p "$dir"
    mmdebstrap --quiet --format=tar --variant=essential --include=python3-minimal \
        bookworm "$dir/debian-python.tar.part"
    mv "$dir/debian-python.tar.part" "$dir/debian-python.tar"
fi
