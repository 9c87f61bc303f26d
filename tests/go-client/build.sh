#!/usr/bin/env bash
# Build (or reuse) the Go example client of the gRPC API, tests/go-client/.bin/kg-client, the
# fan-out benchmark's load client, tests/go-client/.bin/kg-fanout (cmd/kg-fanout), the views
# benchmark's burst client, tests/go-client/.bin/kg-burst (cmd/kg-burst), and grpcurl
# (tests/go-client/.bin/grpcurl, pinned below), the tool the README's gRPC examples use: the
# README test runs every example with it, so the examples are checked by the real tool.
#
#   bash tests/go-client/build.sh            # what `make go-client` (and `make test`) runs
#   GO_CLIENT_FORCE=1 bash tests/go-client/build.sh
#   bash tests/go-client/build.sh load       # only hey, ghz and vegeta, the load clients of bench_rps
#
# `load` builds (or reuses) the Go load generators of tests/bench/bench_rps.py, hey (HTTP),
# ghz (gRPC) and vegeta (HTTP one request at a time, to the nanosecond), pinned below, into the same .bin, the way grpcurl is built; nothing else
# builds them (not `make test`): the bench asks for them when it runs.
#
# Everything is pinned and reproducible: protoc comes from the pinned grpcio-tools of the
# project venv, protoc-gen-go and protoc-gen-go-grpc are `tool` dependencies of go.mod (built
# from modules with the machine's Go), and the Go stubs are generated from ../../protos into
# gen/ (gitignored) on every build that needs one.  A stamp of every input skips the build
# when nothing changed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin_dir="$here/.bin"
stamp="$bin_dir/.stamp"
module="kube-gateway.local/tests/go-client"
gen_pkg="gen/kubegatewayv1"
start=$SECONDS
log() { printf 'go-client: %s\n' "$*" >&2; }

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
    log "no Go toolchain found (need go >= $(sed -n 's/^go //p' "$here/go.mod"))"
    exit 1
fi
python="${PYTHON_BIN:-$repo/.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    log "no project venv at $python (run make first)"
    exit 1
fi

export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

cd "$here"
protos=()
while IFS= read -r p; do protos+=("$p"); done < <(cd "$repo/protos" && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
want_stamp="$(
    {
        "$go_bin" env GOVERSION GOOS GOARCH
        echo "flags=$GOFLAGS cgo=$CGO_ENABLED"
        "$python" -c 'import importlib.metadata as m; print("grpcio-tools", m.version("grpcio-tools"))'
        cat go.mod go.sum build.sh
        while IFS= read -r f; do echo "$f"; cat "$f"; done < <(
            find . -name '*.go' -not -path './gen/*' -not -path './.bin/*' | LC_ALL=C sort)
        for p in "${protos[@]}"; do echo "$p"; cat "$repo/protos/$p"; done
    } | sha256sum | cut -d' ' -f1
)"

mkdir -p "$bin_dir"
exec 9>"$bin_dir/.lock"
if command -v flock >/dev/null; then
    flock 9
fi

# hey and ghz: the request-rate bench's load clients, built only when asked for (`load`),
# with a stamp of their versions and the toolchain, as grpcurl.
if [[ "${1:-}" == "load" ]]; then
    hey_version=v0.1.5
    ghz_version=v0.120.0
    load_stamp="$bin_dir/.load-stamp"
    want_load="hey $hey_version ghz $ghz_version $("$go_bin" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
    if [[ -n "${GO_CLIENT_FORCE:-}" || ! -x "$bin_dir/hey" || ! -x "$bin_dir/ghz" \
          || ! -f "$load_stamp" || "$(cat "$load_stamp")" != "$want_load" ]]; then
        rm -f "$load_stamp"
        log "building hey $hey_version and ghz $ghz_version (go install from the module proxy)"
        GOBIN="$bin_dir" GOFLAGS="-trimpath -buildvcs=false" \
            "$go_bin" install "github.com/rakyll/hey@$hey_version"
        GOBIN="$bin_dir" GOFLAGS="-trimpath -buildvcs=false" \
            "$go_bin" install "github.com/bojand/ghz/cmd/ghz@$ghz_version"
        echo "$want_load" > "$load_stamp"
    fi
    # vegeta: the bench's HTTP client one request at a time (its results carry each
    # request's latency in ns; hey prints times in 0.1 ms steps).  A stamp of its own, so
    # adding it did not rebuild hey and ghz.
    vegeta_version=v12.13.0
    vegeta_stamp="$bin_dir/.vegeta-stamp"
    want_vegeta="vegeta $vegeta_version $("$go_bin" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
    if [[ -n "${GO_CLIENT_FORCE:-}" || ! -x "$bin_dir/vegeta" || ! -f "$vegeta_stamp" \
          || "$(cat "$vegeta_stamp")" != "$want_vegeta" ]]; then
        rm -f "$vegeta_stamp"
        log "building vegeta $vegeta_version (go install from the module proxy)"
        GOBIN="$bin_dir" GOFLAGS="-trimpath -buildvcs=false" \
            "$go_bin" install "github.com/tsenart/vegeta/v12@$vegeta_version"
        echo "$want_vegeta" > "$vegeta_stamp"
    fi
    log "up to date: $bin_dir/hey, $bin_dir/ghz, $bin_dir/vegeta ($((SECONDS - start))s)"
    exit 0
fi

# grpcurl has its own stamp (its version and the toolchain), so a proto change does not
# rebuild it and a new grpcurl version does not rebuild the client.
grpcurl_version=v1.9.3
grpcurl_stamp="$bin_dir/.grpcurl-stamp"
want_grpcurl="grpcurl $grpcurl_version $("$go_bin" env GOVERSION GOOS GOARCH | tr '\n' ' ')"
if [[ -n "${GO_CLIENT_FORCE:-}" || ! -x "$bin_dir/grpcurl" || ! -f "$grpcurl_stamp" \
      || "$(cat "$grpcurl_stamp")" != "$want_grpcurl" ]]; then
    log "building grpcurl $grpcurl_version (go install from the module proxy)"
    rm -f "$grpcurl_stamp"
    GOBIN="$bin_dir" GOFLAGS="-trimpath -buildvcs=false" \
        "$go_bin" install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$grpcurl_version"
    echo "$want_grpcurl" > "$grpcurl_stamp"
fi
if [[ -z "${GO_CLIENT_FORCE:-}" && -x "$bin_dir/kg-client" && -x "$bin_dir/kg-fanout" \
      && -x "$bin_dir/kg-burst" && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]]; then
    log "up to date: $bin_dir/kg-client, $bin_dir/kg-fanout, $bin_dir/grpcurl ($((SECONDS - start))s)"
    exit 0
fi
rm -f "$stamp"

log "downloading modules"
"$go_bin" mod download
log "building protoc-gen-go and protoc-gen-go-grpc (go.mod tools)"
"$go_bin" build -o "$bin_dir/" google.golang.org/protobuf/cmd/protoc-gen-go \
    google.golang.org/grpc/cmd/protoc-gen-go-grpc

log "generating Go stubs from protos/ (${#protos[@]} files)"
include="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
mappings=()
for p in "${protos[@]}"; do
    mappings+=("--go_opt=M$p=$module/$gen_pkg" "--go-grpc_opt=M$p=$module/$gen_pkg")
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" -m grpc_tools.protoc -I "$repo/protos" -I "$include" \
    --plugin=protoc-gen-go="$bin_dir/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$bin_dir/protoc-gen-go-grpc" \
    --go_out="$tmp" --go_opt=module="$module" \
    --go-grpc_out="$tmp" --go-grpc_opt=module="$module" \
    "${mappings[@]}" "${protos[@]}"
rm -rf "$here/gen"
mv "$tmp/gen" "$here/gen"

log "building kg-client, kg-fanout and kg-burst"
"$go_bin" build -o "$bin_dir/.kg-client.tmp" .
"$go_bin" build -o "$bin_dir/.kg-fanout.tmp" ./cmd/kg-fanout
"$go_bin" build -o "$bin_dir/.kg-burst.tmp" ./cmd/kg-burst
mv -f "$bin_dir/.kg-client.tmp" "$bin_dir/kg-client"
mv -f "$bin_dir/.kg-fanout.tmp" "$bin_dir/kg-fanout"
mv -f "$bin_dir/.kg-burst.tmp" "$bin_dir/kg-burst"
echo "$want_stamp" > "$stamp"
log "built $bin_dir/kg-client, kg-fanout and kg-burst in $((SECONDS - start))s"
