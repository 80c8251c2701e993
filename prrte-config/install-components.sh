#!/usr/bin/env bash
# Build the k8s components and install them where PRRTE looks for components:
#   $PRRTE_K8S_PREFIX/lib/prte/prte_mca_ras_k8s.so   (the library)
#   $PRRTE_K8S_PREFIX/lib/prte/prte_mca_plm_k8s.so   (a link to it: one library, both components)
# and the site parameter file prrte-config/prte-mca-params.conf as
#   $PRRTE_K8S_PREFIX/etc/prte-mca-params.conf        (ras/plm k8s, odls_base_max_threads = 0...)
# keeping a file the site has edited: it is then left as it is, ours is put beside it as
# prte-mca-params.conf.prrte-k8s-new, and the script says what to merge. PRRTE's own stock file
# (comments only) is replaced (kept as prte-mca-params.conf.orig); a file we installed earlier
# and nobody changed is updated.
# Options:
#   --dest DIR     install the components into DIR instead (then run PRRTE with
#                  PRTE_PKGLIBDIR=DIR); the parameter file is then not installed
#   --no-params    do not install the parameter file
#   --debug        install the debug build (default: release)
#   --no-build     install what is already built
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
PREFIX=${PRRTE_K8S_PREFIX:-/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3}
dest="$PREFIX/lib/prte"
profile=release
build=1
params=1
while (($#)); do
    case "$1" in
        --dest) dest=$2; params=0; shift 2 ;;
        --no-params) params=0; shift ;;
        --debug) profile=debug; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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

# --- the site parameter file ---------------------------------------------------------------
((params)) || exit 0
src="$here/prte-mca-params.conf"
etc="$PREFIX/etc"
conf="$etc/prte-mca-params.conf"
mine="$etc/.prte-mca-params.conf.prrte-k8s"   # what we installed last, to tell a site's edits
# The lines of a parameter file that set something (no comments, no blank lines).
settings() { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$1" || true; }
put() { install -m 0644 "$src" "$conf.new" && mv -f "$conf.new" "$conf" && install -m 0644 "$src" "$mine"; }
mkdir -p "$etc"
if [[ ! -e "$conf" ]]; then
    put
    echo "installed the site parameter file $conf"
elif cmp -s "$conf" "$src"; then
    install -m 0644 "$src" "$mine"
    echo "the site parameter file $conf is already current"
elif [[ -f "$mine" ]] && cmp -s "$conf" "$mine"; then
    put
    echo "updated the site parameter file $conf (the copy installed before was unchanged)"
elif [[ -z "$(settings "$conf")" ]]; then
    [[ -e "$conf.orig" ]] || cp -p "$conf" "$conf.orig"
    put
    echo "installed the site parameter file $conf (PRRTE's stock file, which sets nothing, kept as $conf.orig)"
else
    install -m 0644 "$src" "$conf.prrte-k8s-new"
    echo "kept $conf: it holds the site's own settings. prrte-k8s's file is in $conf.prrte-k8s-new;" \
         "merge what you need from it (ras = k8s, plm = k8s; the k8s components set odls_base_max_threads = 0 themselves unless a file sets it)"
fi
