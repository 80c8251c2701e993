#!/usr/bin/env bash
# Builds the Python module's wheel with pip from the tree (`pip wheel adapter/python`: maturin,
# its build backend, compiles the crate and the adapter) into a cache outside the clone, keyed by
# the package version, the cargo profile and a hash of every source that goes into it and of the
# PMIx prefix it is built against; prints the wheel's path. A cached wheel is reused while
# nothing changed. pip runs from the venv prrte-config/setup.sh makes with maturin pinned
# (`make setup`), without build isolation: nothing is fetched while building.
#   PRRTE_K8S_WHEEL_CACHE    the cache (default /var/cache/prrte-k8s/wheels)
#   PRRTE_K8S_WHEEL_PROFILE  the cargo profile (default release, as `pip install adapter/python`
#                            builds it; the tests take dev, whose dependencies the test build
#                            has already compiled)
#   PRRTE_K8S_ROOT           where setup.sh's venvs are (default /opt/prrte-k8s)
# The wheel is abi3: one for every Python >= 3.9.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${PRRTE_K8S_WHEEL_CACHE:-/var/cache/prrte-k8s/wheels}
PROFILE=${PRRTE_K8S_WHEEL_PROFILE:-release}
# the version prrte-config/setup.sh installs
MATURIN=1.16.0
VENV=${PRRTE_K8S_ROOT:-/opt/prrte-k8s}/venv-maturin-${MATURIN}
[[ -x "$VENV/bin/maturin" ]] || {
    echo "build-wheel: no maturin ${MATURIN} in $VENV: run prrte-config/setup.sh (make setup)" >&2
    exit 1
}
cd "$ROOT"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
key=$( {
    echo "${PRRTE_K8S_PREFIX:-} $PROFILE $MATURIN"
    find Cargo.toml Cargo.lock adapter/Cargo.toml adapter/build.rs adapter/src adapter/python \
        cabi/pmix-tool -type f \( -name '*.rs' -o -name '*.toml' -o -name 'Cargo.lock' \) \
        -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)
dir=$CACHE/$version-$PROFILE-$key
if ! compgen -G "$dir/prrte_k8s-*.whl" >/dev/null; then
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "building the prrte_k8s wheel ($PROFILE) into $dir" >&2
    # the backend runs `maturin` from PATH
    PATH="$VENV/bin:$PATH" MATURIN_PEP517_ARGS="--profile $PROFILE" "$VENV/bin/pip" wheel --no-deps --no-build-isolation \
        --no-index --disable-pip-version-check --quiet -w "$tmp" "$ROOT/adapter/python" >&2
    # another build of the same key may have finished first: keep one
    mv -T "$tmp" "$dir" 2>/dev/null || true
fi
compgen -G "$dir/prrte_k8s-*.whl" | head -n 1
