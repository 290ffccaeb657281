#!/bin/sh
# What the stockade-cli tests need beyond the build: `man` (man-db) to render the
# generated man page with `man -l`, and bash for the completion script. Idempotent.
set -eu
if ! command -v man >/dev/null 2>&1 || ! command -v bash >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q man-db bash
fi
