# Sourced by gen.sh and test.sh: Go's caches (under /var/cache/stockade/go when it is
# writable), the module proxy (no direct fetches from VCS hosts), the local toolchain.
export GOTOOLCHAIN=local
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
export GOFLAGS=${GOFLAGS:--mod=readonly}
go_cache=/var/cache/stockade/go
if mkdir -p "$go_cache" 2>/dev/null && [ -w "$go_cache" ]; then
  export GOMODCACHE=${GOMODCACHE:-$go_cache/mod} GOCACHE=${GOCACHE:-$go_cache/build}
fi
# Where pinned Go tools (staticcheck, the protoc plugins) are installed.
go_tools=${STOCKADE_GO_TOOLS:-/var/cache/stockade/tools/go}
