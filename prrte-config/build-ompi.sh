#!/usr/bin/env bash
# Build Open MPI 5.0.7 (mpirun, mpicc, libmpi) on top of our PMIx + PRRTE prefix, and an mpi4py
# wheel against that mpicc. Source: the same Debian openmpi 5.0.7 tarball build-prrte.sh uses
# (fetched and verified by ompi-source.sh). Open MPI is configured with the external PMIx and
# PRRTE of $PRRTE_K8S_PREFIX, so `mpirun` is Open MPI's own front end exec'ing that prefix's
# `prterun`, which loads our k8s components from $PRRTE_K8S_PREFIX/lib/prte.
# Lean: C and C++ bindings only (no Fortran, no OpenSHMEM, no ROMIO: MPI-IO uses ompio, no Java).
#
#   PRRTE_K8S_PREFIX   the PMIx/PRRTE prefix (default /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3)
#   PRRTE_K8S_ROOT     cache root (default /opt/prrte-k8s)
#   PRRTE_K8S_JOBS     parallel make jobs (default: nproc)
#
# Installs into $PRRTE_K8S_ROOT/ompi-5.0.7-<name of the PRRTE prefix> (printed on the last line
# as OMPI_PREFIX=...), the mpi4py wheel into its share/wheels. Idempotent: a second run with the
# same versions and PRRTE prefix does nothing and says so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ompi-source.sh
source "$here/ompi-source.sh"

ROOT=${PRRTE_K8S_ROOT:-/opt/prrte-k8s}
PRRTE_PREFIX=${PRRTE_K8S_PREFIX:-$ROOT/prrte-3.0.8-pmix-5.0.5-k8s3}
MPI4PY_VERSION=4.1.2
JOBS=${PRRTE_K8S_JOBS:-$(nproc)}
KEY="ompi-${OMPI_VERSION}-$(basename "$PRRTE_PREFIX")"
PREFIX="$ROOT/$KEY"
STAMP="$PREFIX/.prrte-k8s-build"
STAMP_VALUE="$KEY mpi4py-${MPI4PY_VERSION} prrte=$PRRTE_PREFIX"

# one build of a prefix at a time (a second caller waits, then finds it built)
mkdir -p "$ROOT" && exec 9>"$ROOT/.$KEY.lock" && flock 9
say() { printf '[build-ompi] %s\n' "$*"; }
die() { printf '[build-ompi] ERROR: %s\n' "$*" >&2; exit 1; }
t0=$SECONDS
elapsed() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$STAMP_VALUE" ]] && [[ -x "$PREFIX/bin/mpicc" ]] \
   && compgen -G "$PREFIX/share/wheels/mpi4py-${MPI4PY_VERSION}-*.whl" >/dev/null; then
    say "Open MPI ${OMPI_VERSION} (on $PRRTE_PREFIX) and mpi4py ${MPI4PY_VERSION} already built in $PREFIX; nothing to do."
    echo "OMPI_PREFIX=$PREFIX"
    exit 0
fi
[[ -x "$PRRTE_PREFIX/bin/prterun" && -f "$PRRTE_PREFIX/include/pmix.h" ]] \
    || die "no PRRTE/PMIx in $PRRTE_PREFIX; run prrte-config/build-prrte.sh first"
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, sysconfig; assert sysconfig.get_config_h_filename()' 2>/dev/null \
    && [[ -f "$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]] \
    || die "Debian's python3, python3-venv and python3-dev are needed to build mpi4py (apt-get install python3-venv python3-dev)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prrte-k8s-ompi.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

tarball=$(ompi_source_tarball "$WORK") || die "could not get a verified $OMPI_TARBALL"
t=$SECONDS
say "unpacking Open MPI ${OMPI_VERSION}"
tar -xJf "$tarball" -C "$WORK" --exclude='*/3rd-party/prrte' --exclude='*/3rd-party/openpmix' \
    --exclude='*/docs/_build/html' "openmpi-${OMPI_VERSION}"
src="$WORK/openmpi-${OMPI_VERSION}"
grep -q "^major=5" "$src/VERSION" && grep -q "^minor=0" "$src/VERSION" && grep -q "^release=7" "$src/VERSION" \
    || die "unexpected Open MPI version in the tarball"

rm -rf "$PREFIX"
say "configuring Open MPI ${OMPI_VERSION} with the external PMIx and PRRTE of $PRRTE_PREFIX -> $PREFIX"
( cd "$src" && ./configure --prefix="$PREFIX" \
      --with-pmix="$PRRTE_PREFIX" --with-prrte="$PRRTE_PREFIX" \
      --with-libevent=external --with-hwloc=external \
      --disable-mpi-fortran --disable-oshmem --disable-io-romio --disable-mpi-java \
      --without-ucx --without-ofi --without-cuda --without-psm2 \
      --enable-shared --disable-static --disable-dependency-tracking ) >"$WORK/configure.log" 2>&1 \
  || { tail -40 "$WORK/configure.log" >&2; die "Open MPI configure failed (log above)"; }
grep -q '#define OMPI_USING_INTERNAL_PRRTE 0' "$src/opal/include/opal_config.h" \
  && grep -q "OMPI_PRTERUN_PATH \"$PRRTE_PREFIX/bin/prterun\"" "$src/opal/include/opal_config.h" \
  || die "Open MPI was not configured with the external PRRTE in $PRRTE_PREFIX"
say "configure took $(elapsed "$t")"
t=$SECONDS
say "building Open MPI (make -j$JOBS)"
( cd "$src" && make -j"$JOBS" && make install ) >"$WORK/make.log" 2>&1 \
  || { tail -40 "$WORK/make.log" >&2; die "Open MPI build failed (log above)"; }
say "make + install took $(elapsed "$t")"

# Check that what was built uses our PRRTE and PMIx.
# (each output is read whole before it is searched: with pipefail, `cmd | grep -q` fails when grep
# stops reading at its match and cmd still writes, which a loaded machine makes likely)
info=$("$PREFIX/bin/ompi_info" --parsable 2>/dev/null) || info=""
grep -q "^ompi:version:full:${OMPI_VERSION}$" <<<"$info" \
  || die "the installed ompi_info does not run or reports another version"
libs=$(ldd "$PREFIX/lib/libmpi.so") || libs=""
grep -q "$PRRTE_PREFIX/lib/libpmix.so" <<<"$libs" \
  || die "libmpi does not link the PMIx of $PRRTE_PREFIX"

t=$SECONDS
say "building the mpi4py ${MPI4PY_VERSION} wheel against $PREFIX/bin/mpicc (Debian's python3)"
/usr/bin/python3 -m venv "$WORK/venv" || die "python3 -m venv failed (apt-get install python3-venv)"
mkdir -p "$PREFIX/share/wheels"
( env MPICC="$PREFIX/bin/mpicc" CFLAGS="-O2 -g0" PIP_FIND_LINKS= "$WORK/venv/bin/pip" wheel -q --disable-pip-version-check \
      --no-deps --no-binary mpi4py -w "$PREFIX/share/wheels" "mpi4py==${MPI4PY_VERSION}" ) >"$WORK/mpi4py.log" 2>&1 \
  || { tail -40 "$WORK/mpi4py.log" >&2; die "building the mpi4py wheel failed (log above)"; }
whl=$(compgen -G "$PREFIX/share/wheels/mpi4py-${MPI4PY_VERSION}-*.whl" | head -1)
[[ -n "$whl" ]] || die "no mpi4py wheel was produced"
say "mpi4py wheel $(basename "$whl") took $(elapsed "$t")"

echo "$STAMP_VALUE" >"$STAMP"
say "done in $(elapsed "$t0"): Open MPI ${OMPI_VERSION} in $PREFIX ($(du -sh "$PREFIX" | cut -f1)), mpirun -> $PRRTE_PREFIX/bin/prterun"
echo "OMPI_PREFIX=$PREFIX"
