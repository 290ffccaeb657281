#!/bin/sh
# What the E2B API's tests need beyond the build: openssl makes the CA and the
# wildcard certificate of the domain-mode test, iproute2 brings up loopback in that
# test's own network namespace (unshare, util-linux, is always there). Idempotent.
set -eu
if ! command -v openssl >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl iproute2
fi
