#!/usr/bin/env bash
# Build (or reuse) the real kube-apiserver and etcd used by the end-to-end suite, and the
# kustomize that renders deploy/kustomize for tests/e2e/test_deploy_e2e.py.
#
#   bash tests/e2e/build.sh          # what `make e2e-bins` runs
#   E2E_BINS_FORCE=1 bash tests/e2e/build.sh   # rebuild even if up to date
#
# Both binaries come from the pinned Go tools module in tests/e2e/go (go.mod and
# go.sum are the single source of truth for the versions). They are written to
# tests/e2e/.bin/ (gitignored) together with a stamp of everything that affects
# them; when the stamp matches, nothing is built. Builds use the normal Go module
# and build caches, so a rebuild after a version bump only recompiles what changed.
#
# kustomize comes from its own pinned tools module, tests/e2e/kustomize (kept apart so
# its dependencies never move kube-apiserver's), with its own stamp (.kustomize.stamp).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod_dir="$here/go"
kustomize_mod_dir="$here/kustomize"
bin_dir="${E2E_BIN_DIR:-$here/.bin}"
stamp="$bin_dir/.stamp"

start=$SECONDS
log() { printf 'e2e-bins: %s\n' "$*" >&2; }

# --- the Go toolchain: PATH first, then the usual install location ------------------
go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
    go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
    log "no Go toolchain found (need go >= $(sed -n 's/^go //p' "$mod_dir/go.mod"))"
    exit 1
fi

# Never download another toolchain: the installed one must satisfy go.mod's `go` line.
export GOTOOLCHAIN=local
# Static, reproducible, small binaries; readonly so a stale go.sum fails loudly.
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
# One compile job per core (2 on CI's 2-core machines); E2E_BUILD_JOBS overrides.
jobs="${E2E_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

cd "$mod_dir"
go_version="$("$go_bin" env GOVERSION)"
k8s_version="$("$go_bin" list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$("$go_bin" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"

# Version stamping as upstream's hack/lib/version.sh does, so /version reports the tag.
k8s_minor="${k8s_version#v*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_major="${k8s_version#v}"
k8s_major="${k8s_major%%.*}"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$k8s_version"
    version_ldflags+=" -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
    version_ldflags+=" -X $pkg.gitTreeState=clean"
    version_ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
ldflags="-s -w$version_ldflags"

want_stamp="$(
    {
        echo "go=$go_version goos=$("$go_bin" env GOOS) goarch=$("$go_bin" env GOARCH)"
        echo "flags=$GOFLAGS cgo=$CGO_ENABLED ldflags=$ldflags"
        cat go.mod go.sum
    } | sha256sum | cut -d' ' -f1
)"

mkdir -p "$bin_dir"
# Serialize concurrent runs (two `make test` in one checkout) on the same output dir.
exec 9>"$bin_dir/.lock"
if command -v flock >/dev/null; then
    flock 9
fi

# --- kustomize (small: about 20 s cold, nothing when its stamp matches) -------------
kustomize_ldflags="-s -w"
kustomize_want_stamp="$(
    cd "$kustomize_mod_dir"
    {
        echo "go=$go_version goos=$("$go_bin" env GOOS) goarch=$("$go_bin" env GOARCH)"
        echo "flags=$GOFLAGS cgo=$CGO_ENABLED ldflags=$kustomize_ldflags"
        cat go.mod go.sum
    } | sha256sum | cut -d' ' -f1
)"
kustomize_stamp="$bin_dir/.kustomize.stamp"
if [[ -z "${E2E_BINS_FORCE:-}" && -x "$bin_dir/kustomize" && -f "$kustomize_stamp" \
      && "$(cat "$kustomize_stamp")" == "$kustomize_want_stamp" ]]; then
    log "up to date: kustomize in $bin_dir"
else
    t0=$SECONDS
    rm -f "$kustomize_stamp"
    (
        cd "$kustomize_mod_dir"
        "$go_bin" mod download
        "$go_bin" build -p "$jobs" -ldflags="$kustomize_ldflags" -o "$bin_dir/.kustomize.tmp" \
            sigs.k8s.io/kustomize/kustomize/v5
    )
    mv -f "$bin_dir/.kustomize.tmp" "$bin_dir/kustomize"
    echo "$kustomize_want_stamp" > "$kustomize_stamp"
    log "built kustomize $("$bin_dir/kustomize" version) in $((SECONDS - t0))s"
fi

# --- kube-apiserver and etcd ---------------------------------------------------------
if [[ -z "${E2E_BINS_FORCE:-}" && -x "$bin_dir/kube-apiserver" && -x "$bin_dir/etcd" \
      && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]]; then
    log "up to date: kube-apiserver $k8s_version, etcd $etcd_version in $bin_dir ($((SECONDS - start))s)"
    exit 0
fi

log "building kube-apiserver $k8s_version and etcd $etcd_version with $go_version, -p $jobs"
rm -f "$stamp"

log "downloading modules"
"$go_bin" mod download
t=$SECONDS

build() { # build <output name> <package>
    local out="$1" pkg="$2" t0=$SECONDS
    "$go_bin" build -p "$jobs" -ldflags="$ldflags" -o "$bin_dir/.$out.tmp" "$pkg"
    mv -f "$bin_dir/.$out.tmp" "$bin_dir/$out"
    log "built $out in $((SECONDS - t0))s"
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

echo "$want_stamp" > "$stamp"
{
    echo "kube-apiserver $k8s_version"
    echo "etcd $etcd_version"
    echo "$go_version"
} > "$bin_dir/VERSIONS"
log "done in $((SECONDS - start))s (modules $((t - start))s, compile $((SECONDS - t))s)"
