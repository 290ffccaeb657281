#!/usr/bin/env bash
# Checks and tests the Go SDK in both of its modules (the SDK, and the langchaingo
# tool beside it): gofmt, go vet, staticcheck, then `go test` against a real daemon
# that the tests start (`stockade serve` from this build; as root: the native
# provider).
#   sudo sdk/go/test.sh            (test.sh at the repository root can call it)
#   sdk/go/test.sh --deps          the modules and staticcheck only
set -euo pipefail
cd "$(dirname "$0")"
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
. ./goenv.sh
STATICCHECK_VERSION=v0.8.2   # honnef.co/go/tools
modules=(. langchaingo)
if ! command -v go >/dev/null; then
  echo "test.sh: go is not installed; install Go 1.26 or later from https://go.dev/dl/ (Debian 12's golang is too old)" >&2
  exit 1
fi
for m in "${modules[@]}"; do (cd "$m" && go mod download); done
staticcheck=$go_tools/staticcheck-$STATICCHECK_VERSION/staticcheck
if [ ! -x "$staticcheck" ]; then
  mkdir -p "$(dirname "$staticcheck")"
  GOBIN=$(realpath "$(dirname "$staticcheck")") GOFLAGS=-mod=mod \
    go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
[ "${1:-}" = --deps ] && exit 0
# The tests start `stockade serve` from this build (its agent beside it).
export STOCKADE_CLI=${STOCKADE_CLI:-$CARGO_TARGET_DIR/debug/stockade}
unformatted=$(gofmt -l . | grep -v '^pb/' || true)
if [ -n "$unformatted" ]; then
  echo "test.sh: not gofmt'ed (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi
for m in "${modules[@]}"; do
  echo "test.sh: module $m: vet, staticcheck, test" >&2
  (
    cd "$m"
    go vet ./...
    "$staticcheck" ./...
    env -u STOCKADE_HOST -u STOCKADE_TOKEN -u STOCKADE_TLS_CA go test -count=1 -timeout 20m ./...
  )
done
