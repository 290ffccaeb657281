#!/usr/bin/env bash
# Regenerates pb/stockade.pb.go and pb/stockade_grpc.pb.go from the daemon's API,
# crates/stockade-client/proto/stockade.proto (the source of truth), and records the
# proto's digest in pb/stockade.proto.sha256 (a test checks it is current).
#   sdk/go/gen.sh        (as root when protoc must be installed)
# protoc is Debian's protobuf-compiler (apt-get); the plugins are pinned and installed
# with `go install` into the tools cache.
set -euo pipefail
cd "$(dirname "$0")"
. ./goenv.sh
PROTOC_GEN_GO=v1.36.12       # google.golang.org/protobuf, as in go.mod
PROTOC_GEN_GO_GRPC=v1.6.2    # google.golang.org/grpc/cmd/protoc-gen-go-grpc
proto_dir=../../crates/stockade-client/proto
pkg=github.com/stockade-dev/stockade/sdk/go/pb
command -v protoc >/dev/null || apt-get install -y -q protobuf-compiler >/dev/null
bin=$go_tools/protoc-plugins-$PROTOC_GEN_GO-$PROTOC_GEN_GO_GRPC
if [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-go-grpc" ]; then
  mkdir -p "$bin"
  for tool in "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO" \
    "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"; do
    GOBIN=$(realpath "$bin") GOFLAGS=-mod=mod go install "$tool"
  done
fi
mkdir -p pb
# The proto names no Go package: M maps the file to this module's pb package.
protoc -I "$proto_dir" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out=pb --go_opt=paths=source_relative,Mstockade.proto="$pkg;pb" \
  --go-grpc_out=pb --go-grpc_opt=paths=source_relative,Mstockade.proto="$pkg;pb" \
  stockade.proto
sha256sum "$proto_dir/stockade.proto" | cut -d' ' -f1 >pb/stockade.proto.sha256
echo "gen.sh: pb/ regenerated from $proto_dir/stockade.proto ($(protoc --version))"
