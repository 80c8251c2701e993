# Sourced by build-prrte.sh and build-ompi.sh: fetch Debian's openmpi 5.0.7 source tarball with a
# private apt configuration (the system's sources are never edited), verify its sha256, and keep
# the verified tarball in a cache so the second build does not download it again.
#
#   ompi_source_tarball WORKDIR    prints the path of the verified tarball
#
#   PRRTE_K8S_ROOT   cache root (default /opt/prrte-k8s); the tarball is kept in $PRRTE_K8S_ROOT/sources
# shellcheck shell=bash

OMPI_VERSION=5.0.7
OMPI_DEB_SUITE=trixie
OMPI_TARBALL=openmpi_${OMPI_VERSION}.orig.tar.xz
OMPI_TARBALL_SHA256=97f10c04e9b9a1771db3fd005009e4c07afa3ce739f940e41eb0fc7397cb9473

ompi_source_tarball() {
    local work=$1 cache=${PRRTE_K8S_ROOT:-/opt/prrte-k8s}/sources
    local cached="$cache/$OMPI_TARBALL" got
    if [[ -f "$cached" ]] && [[ "$(sha256sum "$cached" | cut -d' ' -f1)" == "$OMPI_TARBALL_SHA256" ]]; then
        printf '[source] %s\n' "verified $OMPI_TARBALL from $cache" >&2
        printf '%s\n' "$cached"
        return 0
    fi
    printf '[source] %s\n' "fetching Debian's openmpi ${OMPI_VERSION} source package (${OMPI_DEB_SUITE}) with a private apt configuration" >&2
    local A="$work/apt"
    mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/etc"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian ${OMPI_DEB_SUITE} main" >"$A/etc/sources.list"
    : >"$A/etc/status"
    local opts=(-o "Dir::Etc::SourceList=$A/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
                -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Dir::State::Status=$A/etc/status"
                -o "APT::Sandbox::User=root" -q)
    if ! apt-get "${opts[@]}" update >"$work/apt-update.log" 2>&1; then
        cat "$work/apt-update.log" >&2
        printf '[source] ERROR: %s\n' "apt-get update of the private deb-src list failed (network? keyring for ${OMPI_DEB_SUITE}?)" >&2
        return 1
    fi
    if ! ( cd "$work" && apt-get "${opts[@]}" source --download-only "openmpi=${OMPI_VERSION}-1" ) >"$work/apt-source.log" 2>&1; then
        cat "$work/apt-source.log" >&2
        printf '[source] ERROR: %s\n' "could not fetch source package openmpi=${OMPI_VERSION}-1 from ${OMPI_DEB_SUITE}" >&2
        return 1
    fi
    [[ -f "$work/$OMPI_TARBALL" ]] || { printf '[source] ERROR: %s\n' "source download did not produce $OMPI_TARBALL" >&2; return 1; }
    got=$(sha256sum "$work/$OMPI_TARBALL" | cut -d' ' -f1)
    if [[ "$got" != "$OMPI_TARBALL_SHA256" ]]; then
        printf '[source] ERROR: %s\n' "checksum mismatch for $OMPI_TARBALL: got $got, expected $OMPI_TARBALL_SHA256" >&2
        return 1
    fi
    printf '[source] %s\n' "sha256 of $OMPI_TARBALL verified" >&2
    mkdir -p "$cache"
    cp "$work/$OMPI_TARBALL" "$cached.new" && mv -f "$cached.new" "$cached"
    printf '%s\n' "$cached"
}
