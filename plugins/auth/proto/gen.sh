#!/usr/bin/env bash
# gen.sh regenerates the Go code for auth.proto. It needs protoc (Debian:
# protobuf-compiler) and installs the Go generators at the versions that
# match go.mod (google.golang.org/protobuf v1.36.12, grpc v1.85.0).
set -euo pipefail
cd "$(dirname "$0")"

PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2

command -v protoc >/dev/null 2>&1 || { echo "protoc is missing: apt-get install protobuf-compiler" >&2; exit 1; }
bin="$(go env GOPATH)/bin"
GOFLAGS= go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO}"
GOFLAGS= go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC}"
PATH="$bin:$PATH" protoc \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	auth.proto
gofmt -l . | (! grep .) || { echo "generated code is not gofmt-clean" >&2; exit 1; }
