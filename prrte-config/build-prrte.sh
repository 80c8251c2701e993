#!/usr/bin/env bash
# Build PMIx 5.0.5 and PRRTE 3.0.8 (the versions inside Open MPI 5.0.7) with dlopen support,
# from Debian's openmpi 5.0.7 source package, into a prefix. Keeps the configured PRRTE tree,
# whose generated headers out-of-tree components need. Applies our PRRTE patches
# (prrte-config/patches/, each verified by sha256 first): they fix the short-job hang of
# PRRTE 3.0.8 (docs/prrte-short-job-hang.md).
#
#   PRRTE_K8S_PREFIX   install prefix (default /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3, the
#                      patch level is part of the name; with PRRTE_K8S_PATCHES=none
#                      /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5)
#   PRRTE_K8S_PATCHES  "none" builds upstream PRRTE 3.0.8 unpatched (to reproduce the hang)
#   PRRTE_K8S_JOBS     parallel make jobs (default: nproc)
#
# Idempotent: a second run with the same versions and patch set does nothing and says so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

PMIX_VERSION=5.0.5
PRRTE_VERSION=3.0.8
# Our PRRTE patches, in order, with their sha256. Changing the set means a new PATCHLEVEL, and
# so a new default prefix: a build never changes a PRRTE someone is running.
PATCHLEVEL=k8s3
PATCHES=(
    "prrte-3.0.8-0001-odls-gate-child-until-pid-stored.patch a190c2aacabbd91df9801975da51eac0bfae7d9e4bdd1d6a7a09c5ab528ab957"
    "prrte-3.0.8-0002-never-running-after-terminated.patch 3778782bb9ebc4a18f2df14cf79bcfe0b4d40d458c346842e9b905d787ab0938"
    "prrte-3.0.8-0003-ras-modify-allocation-requests.patch fe010c09b1d6b90e41ac8314ad2084144c09bc0480b247e7b97e75dede8ef73b"
    "prrte-3.0.8-0004-connect-release-info-bounds.patch e6a281c5ee0000df8001acb5af95534152b218a677034f71da9d2ae3fbed1082"
)
case "${PRRTE_K8S_PATCHES:-all}" in
    all) KEY="prrte-${PRRTE_VERSION}-pmix-${PMIX_VERSION}-${PATCHLEVEL}" ;;
    none) KEY="prrte-${PRRTE_VERSION}-pmix-${PMIX_VERSION}"; PATCHES=() ;;
    *) printf '[build-prrte] ERROR: PRRTE_K8S_PATCHES must be "all" or "none", not %s\n' "$PRRTE_K8S_PATCHES" >&2; exit 2 ;;
esac
PREFIX=${PRRTE_K8S_PREFIX:-/opt/prrte-k8s/${KEY}}
JOBS=${PRRTE_K8S_JOBS:-$(nproc)}
STAMP="$PREFIX/.prrte-k8s-build"
SRC="$PREFIX/src"          # configured trees live here (headers for components)

say() { printf '[build-prrte] %s\n' "$*"; }
die() { printf '[build-prrte] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$KEY" ]] \
   && [[ -x "$PREFIX/bin/prte" ]] && [[ -f "$SRC/prrte/src/include/prte_config.h" ]]; then
    say "PRRTE ${PRRTE_VERSION} + PMIx ${PMIX_VERSION} (${KEY}) already built in $PREFIX; nothing to do."
    exit 0
fi
if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" != "$KEY" ]]; then
    die "$PREFIX holds $(cat "$STAMP"), not $KEY: a build never replaces a PRRTE that may be in use; \
choose another PRRTE_K8S_PREFIX (the default one is named after the patch level) or remove $PREFIX"
fi

need_pkgs=(build-essential patch pkg-config libevent-dev libhwloc-dev zlib1g-dev xz-utils flex perl python3 ca-certificates)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing build dependencies: ${missing[*]}"
    [[ $(id -u) -eq 0 ]] || die "need root to apt-get install ${missing[*]} (or install them yourself)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
      || die "apt-get install ${missing[*]} failed"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prrte-k8s-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- fetch and verify Debian's source package (shared with build-ompi.sh) -------------------
# shellcheck source=ompi-source.sh
source "$(dirname "$0")/ompi-source.sh"
tarball=$(ompi_source_tarball "$WORK") || die "could not get a verified $OMPI_TARBALL"

# --- unpack only the two runtimes we build ---------------------------------------------------
say "unpacking PMIx and PRRTE"
tar -xJf "$tarball" -C "$WORK" "openmpi-${OMPI_VERSION}/3rd-party/openpmix" "openmpi-${OMPI_VERSION}/3rd-party/prrte"
rm -rf "$SRC"; mkdir -p "$SRC"
mv "$WORK/openmpi-${OMPI_VERSION}/3rd-party/openpmix" "$SRC/openpmix"
mv "$WORK/openmpi-${OMPI_VERSION}/3rd-party/prrte" "$SRC/prrte"
grep -q "^major=5" "$SRC/openpmix/VERSION" && grep -q "^minor=0" "$SRC/openpmix/VERSION" && grep -q "^release=5" "$SRC/openpmix/VERSION" \
  || die "unexpected PMIx version in the tarball"
grep -q "^major=3" "$SRC/prrte/VERSION" && grep -q "^release=8" "$SRC/prrte/VERSION" || die "unexpected PRRTE version in the tarball"

# --- our PRRTE patches, each verified by checksum before it is applied -----------------------
for entry in "${PATCHES[@]}"; do
    name=${entry%% *}; want=${entry##* }
    file="$here/patches/$name"
    [[ -f "$file" ]] || die "patch $file is missing"
    got=$(sha256sum "$file" | cut -d' ' -f1)
    [[ "$got" == "$want" ]] || die "checksum mismatch for patch $name: got $got, expected $want"
    ( cd "$SRC/prrte" && patch -p1 --batch --forward --quiet <"$file" ) >"$WORK/patch.log" 2>&1 \
      || { cat "$WORK/patch.log" >&2; die "patch $name does not apply to PRRTE ${PRRTE_VERSION}"; }
    say "applied $name (sha256 verified)"
done
install -d "$PREFIX/share/prrte-k8s"
printf '%s\n' "${PATCHES[@]}" >"$PREFIX/share/prrte-k8s/patches"

# --- PMIx -------------------------------------------------------------------------------------
say "configuring PMIx ${PMIX_VERSION} (dlopen enabled) -> $PREFIX"
( cd "$SRC/openpmix" && ./configure --prefix="$PREFIX" --with-libevent --with-hwloc \
     --disable-man-pages --disable-python-bindings --enable-shared --disable-static ) >"$WORK/pmix-configure.log" 2>&1 \
  || { tail -40 "$WORK/pmix-configure.log" >&2; die "PMIx configure failed"; }
grep -q '#define PMIX_HAVE_PDL_SUPPORT 1' "$SRC/openpmix/src/include/pmix_config.h" \
  || die "PMIx was configured without dlopen (pdl) support; components could not be loaded"
say "building PMIx (make -j$JOBS)"
( cd "$SRC/openpmix" && make -j"$JOBS" && make install ) >"$WORK/pmix-make.log" 2>&1 \
  || { tail -40 "$WORK/pmix-make.log" >&2; die "PMIx build failed"; }

# --- PRRTE ------------------------------------------------------------------------------------
say "configuring PRRTE ${PRRTE_VERSION} -> $PREFIX"
( cd "$SRC/prrte" && ./configure --prefix="$PREFIX" --with-pmix="$PREFIX" --with-libevent --with-hwloc \
     --disable-man-pages --enable-shared --disable-static ) >"$WORK/prrte-configure.log" 2>&1 \
  || { tail -40 "$WORK/prrte-configure.log" >&2; die "PRRTE configure failed"; }
say "building PRRTE (make -j$JOBS)"
( cd "$SRC/prrte" && make -j"$JOBS" && make install ) >"$WORK/prrte-make.log" 2>&1 \
  || { tail -40 "$WORK/prrte-make.log" >&2; die "PRRTE build failed"; }

mkdir -p "$PREFIX/lib/prte"        # the component directory PRRTE searches only if it exists
"$PREFIX/bin/prte_info" --version >/dev/null 2>&1 || die "the installed prte_info does not run"
echo "$KEY" >"$STAMP"
say "done: $PREFIX (prte $("$PREFIX/bin/prte" --version 2>/dev/null | head -1 | awk '{print $NF}')), configured tree in $SRC, components go to $PREFIX/lib/prte"
