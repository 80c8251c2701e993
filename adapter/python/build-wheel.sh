#!/usr/bin/env bash
# Builds the Python module's wheel (`pip wheel adapter/python`: maturin, fetched by pip as the
# build backend, compiles the crate and the adapter) into a cache outside the clone, keyed by the
# package version and a hash of every source that goes into it and of the PMIx prefix it is
# built against; prints the wheel's path. A cached wheel is reused while nothing changed.
#   PRRTE_K8S_WHEEL_CACHE  the cache (default /var/cache/prrte-k8s/wheels)
#   PYTHON                 the Python whose pip builds it (default python3; the wheel is abi3,
#                          for every Python >= 3.9)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${PRRTE_K8S_WHEEL_CACHE:-/var/cache/prrte-k8s/wheels}
PYTHON=${PYTHON:-python3}
cd "$ROOT"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
key=$( {
    echo "${PRRTE_K8S_PREFIX:-}"
    find Cargo.toml Cargo.lock adapter/Cargo.toml adapter/build.rs adapter/src adapter/python \
        cabi/pmix-tool -type f \( -name '*.rs' -o -name '*.toml' -o -name 'Cargo.lock' \) \
        -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)
dir=$CACHE/$version-$key
if ! compgen -G "$dir/prrte_k8s-*.whl" >/dev/null; then
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "building the prrte_k8s wheel into $dir" >&2
    "$PYTHON" -m pip wheel --no-deps --disable-pip-version-check --quiet -w "$tmp" \
        "$ROOT/adapter/python" >&2
    # another build of the same key may have finished first: keep one
    mv -T "$tmp" "$dir" 2>/dev/null || true
fi
compgen -G "$dir/prrte_k8s-*.whl" | head -n 1
