#!/usr/bin/env bash
# Build PMIx 5.0.5 and PRRTE 3.0.8 (the versions inside Open MPI 5.0.7) with dlopen support,
# from Debian's openmpi 5.0.7 source package, into a prefix. Keeps the configured PRRTE tree,
# whose generated headers out-of-tree components need. Applies our PRRTE patches
# (prrte-config/patches/, each verified by sha256 first): they fix the short-job hang of
# PRRTE 3.0.8 (docs/prrte-short-job-hang.md).
#
#   PRRTE_K8S_PREFIX   install prefix (default /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s1, the
#                      patch level is part of the name; with PRRTE_K8S_PATCHES=none
#                      /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5)
#   PRRTE_K8S_PATCHES  "none" builds upstream PRRTE 3.0.8 unpatched (to reproduce the hang)
#   PRRTE_K8S_JOBS     parallel make jobs (default: nproc)
#
# Idempotent: a second run with the same versions and patch set does nothing and says so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

OMPI_VERSION=5.0.7
DEB_SUITE=trixie
TARBALL=openmpi_${OMPI_VERSION}.orig.tar.xz
TARBALL_SHA256=97f10c04e9b9a1771db3fd005009e4c07afa3ce739f940e41eb0fc7397cb9473
PMIX_VERSION=5.0.5
PRRTE_VERSION=3.0.8
# Our PRRTE patches, in order, with their sha256. Changing the set means a new PATCHLEVEL, and
# so a new default prefix: a build never changes a PRRTE someone is running.
PATCHLEVEL=k8s1
PATCHES=(
    "prrte-3.0.8-0001-odls-gate-child-until-pid-stored.patch a190c2aacabbd91df9801975da51eac0bfae7d9e4bdd1d6a7a09c5ab528ab957"
    "prrte-3.0.8-0002-never-running-after-terminated.patch 3778782bb9ebc4a18f2df14cf79bcfe0b4d40d458c346842e9b905d787ab0938"
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

# --- fetch Debian's source package with a private apt configuration -------------------------
say "fetching Debian's openmpi ${OMPI_VERSION} source package (${DEB_SUITE}) with a private apt configuration"
A="$WORK/apt"
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/etc"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian ${DEB_SUITE} main" >"$A/etc/sources.list"
: >"$A/etc/status"
APT_OPTS=(-o "Dir::Etc::SourceList=$A/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Dir::State::Status=$A/etc/status"
          -o "APT::Sandbox::User=root" -q)
apt-get "${APT_OPTS[@]}" update >"$WORK/apt-update.log" 2>&1 \
  || { cat "$WORK/apt-update.log" >&2; die "apt-get update of the private deb-src list failed (network? keyring for ${DEB_SUITE}?)"; }
( cd "$WORK" && apt-get "${APT_OPTS[@]}" source --download-only "openmpi=${OMPI_VERSION}-1" ) >"$WORK/apt-source.log" 2>&1 \
  || { cat "$WORK/apt-source.log" >&2; die "could not fetch source package openmpi=${OMPI_VERSION}-1 from ${DEB_SUITE}"; }
[[ -f "$WORK/$TARBALL" ]] || die "source download did not produce $TARBALL"
got=$(sha256sum "$WORK/$TARBALL" | cut -d' ' -f1)
[[ "$got" == "$TARBALL_SHA256" ]] || die "checksum mismatch for $TARBALL: got $got, expected $TARBALL_SHA256"
say "sha256 of $TARBALL verified"

# --- unpack only the two runtimes we build ---------------------------------------------------
say "unpacking PMIx and PRRTE"
tar -xJf "$WORK/$TARBALL" -C "$WORK" "openmpi-${OMPI_VERSION}/3rd-party/openpmix" "openmpi-${OMPI_VERSION}/3rd-party/prrte"
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
