#!/bin/sh
# What the E2B API's tests need beyond the build: openssl makes the CA and the
# wildcard certificate of the domain-mode test, iproute2 brings up loopback in that
# test's own network namespace (unshare, util-linux, is always there); numpy and
# Pillow for the host's python3, which the built-in templates run (E2B's
# code-interpreter template has them, and smolagents' E2B executor imports both in the
# sandbox). Idempotent.
set -eu
if ! command -v openssl >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1 ||
    ! /usr/bin/python3 -c 'import numpy, PIL' >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl iproute2 python3-numpy python3-pil
fi
