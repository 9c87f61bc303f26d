#!/usr/bin/env bash
# Build (or reuse) the gRPC client recipes and buf, what `make grpc-recipes` (and so
# `make test`) runs before tests/deploy/test_grpc_recipes.py drives them:
#
#   .bin/buf                        buf (pinned below), `go install`ed from the Go module proxy
#   .bin/protoc-gen-go{,-grpc}      the Go plugins, `tool` dependencies of go/go.mod
#   go/client                       `buf generate` (go/buf.gen.yaml) into go/gen, then `go build`
#   python/gen/                     grpcio-tools' protoc (the project venv's, pinned) into gen/
#   java/target/                    `mvn package`: protoc and the grpc-java plugin from Maven
#                                   Central, the client's classes and its dependencies
#
#   bash examples/grpc/build.sh                # everything (each part skipped when up to date)
#   bash examples/grpc/build.sh buf            # buf only
#   GRPC_RECIPES_FORCE=1 bash examples/grpc/build.sh
#
# Each part has a stamp of its inputs (the protos, its sources, the tool versions) and is
# rebuilt only when one changed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin_dir="$here/.bin"
buf_version=v1.75.0
start=$SECONDS
log() { printf 'grpc-recipes: %s\n' "$*" >&2; }

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
fi
[[ -n "$go_bin" ]] || { log "no Go toolchain found"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0
export PATH="$bin_dir:$PATH"

mkdir -p "$bin_dir"
exec 9>"$bin_dir/.lock"
if command -v flock >/dev/null; then
    flock 9
fi

# The protos, as every generated part depends on them.
protos_digest="$(cd "$repo/protos" && find . -name '*.proto' | LC_ALL=C sort | xargs cat | sha256sum)"

# fresh NAME INPUTS...: true when NAME's stamp holds the digest of INPUTS (strings) already.
fresh() {
    local name="$1"
    shift
    want="$(printf '%s\n' "$@" | sha256sum | cut -d' ' -f1)"
    [[ -z "${GRPC_RECIPES_FORCE:-}" && -f "$bin_dir/.$name-stamp" \
        && "$(cat "$bin_dir/.$name-stamp")" == "$want" ]]
}
stamp() { echo "$want" > "$bin_dir/.$1-stamp"; }

go_env="$("$go_bin" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
if ! fresh buf "$buf_version" "$go_env" || [[ ! -x "$bin_dir/buf" ]]; then
    log "building buf $buf_version (go install from the module proxy; a few minutes once)"
    GOBIN="$bin_dir" GOFLAGS="-trimpath -buildvcs=false" \
        "$go_bin" install "github.com/bufbuild/buf/cmd/buf@$buf_version"
    stamp buf
fi
if [[ "${1:-all}" == buf ]]; then
    log "buf ready: $bin_dir/buf ($((SECONDS - start))s)"
    exit 0
fi

cd "$here/go"
go_inputs=("$go_env" "$protos_digest" "$(cat go.mod go.sum buf.gen.yaml gen/go.mod ./*.go)")
if ! fresh go "${go_inputs[@]}" || [[ ! -x client ]]; then
    export GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
    log "go: building protoc-gen-go and protoc-gen-go-grpc (go.mod tools)"
    "$go_bin" build -o "$bin_dir/" google.golang.org/protobuf/cmd/protoc-gen-go \
        google.golang.org/grpc/cmd/protoc-gen-go-grpc
    log "go: buf generate, go build"
    find gen -mindepth 1 -not -name go.mod -delete
    buf generate
    "$go_bin" build -o client .
    unset GOFLAGS
    stamp go
fi

cd "$here/python"
python="${PYTHON_BIN:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || { log "no project venv at $python (run make first)"; exit 1; }
include="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
py_tools="$("$python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')"
if ! fresh python "$py_tools" "$protos_digest" || [[ ! -d gen ]]; then
    log "python: grpc_tools.protoc into python/gen"
    rm -rf gen && mkdir gen
    mapfile -t files < <(cd "$repo/protos" && find kubegateway -name '*.proto' | LC_ALL=C sort)
    "$python" -m grpc_tools.protoc -I "$repo/protos" -I "$include" \
        --python_out=gen --pyi_out=gen --grpc_python_out=gen "${files[@]}"
    stamp python
fi

cd "$here/java"
java_inputs=("$(java -version 2>&1)" "$protos_digest" "$(cat pom.xml)"
    "$(find src -type f | LC_ALL=C sort | xargs cat)")
if ! fresh java "${java_inputs[@]}" || [[ ! -d target/classes ]]; then
    log "java: mvn package (protoc and protoc-gen-grpc-java from Maven Central)"
    mvn -B -q package -DskipTests
    stamp java
fi
log "ready: go/client, python/gen, java/target ($((SECONDS - start))s)"
