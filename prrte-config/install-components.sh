#!/usr/bin/env bash
# Build the k8s components and install them where PRRTE looks for components:
#   $PRRTE_K8S_PREFIX/lib/prte/prte_mca_ras_k8s.so   (the library)
#   $PRRTE_K8S_PREFIX/lib/prte/prte_mca_plm_k8s.so   (a link to it: one library, both components)
# Options:
#   --dest DIR     install into DIR instead (then run PRRTE with PRTE_PKGLIBDIR=DIR)
#   --debug        install the debug build (default: release)
#   --no-build     install what is already built
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
PREFIX=${PRRTE_K8S_PREFIX:-/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s1}
dest="$PREFIX/lib/prte"
profile=release
build=1
while (($#)); do
    case "$1" in
        --dest) dest=$2; shift 2 ;;
        --debug) profile=debug; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "install-components: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -x "$PREFIX/bin/prte" ]] || { echo "install-components: no PRRTE in $PREFIX; run prrte-config/build-prrte.sh first" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-$repo/target}
if ((build)); then
    flags=(); [[ $profile == release ]] && flags=(--release)
    (cd "$repo" && PRRTE_K8S_PREFIX="$PREFIX" cargo build "${flags[@]}" -p prrte-k8s-cabi -p prrte-k8s)
fi
lib="$target/$profile/libprrte_k8s_cabi.so"
[[ -f "$lib" ]] || { echo "install-components: $lib not built" >&2; exit 1; }
mkdir -p "$dest"
install -m 0755 "$lib" "$dest/prte_mca_ras_k8s.so.new" && mv -f "$dest/prte_mca_ras_k8s.so.new" "$dest/prte_mca_ras_k8s.so"
ln -sfn prte_mca_ras_k8s.so "$dest/prte_mca_plm_k8s.so"
echo "installed prte_mca_ras_k8s.so and prte_mca_plm_k8s.so into $dest"
