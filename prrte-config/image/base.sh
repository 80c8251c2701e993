#!/usr/bin/env bash
# A base image the Containerfiles start FROM, made locally from Debian packages (no registry is
# needed): `mmdebstrap --variant=minbase SUITE`, imported into buildah's local store and tagged
# under the exact name the Containerfiles' FROM uses. Elsewhere the same Containerfiles pull that
# name from a registry instead. The runtime images use bookworm (the Debian release the host
# builds run on, so host-built binaries run in it); the test application images also trixie,
# bullseye and sid (Debian unstable, for the next Open MPI: its Release file may be past its
# validity date, so sid is fetched with Acquire::Check-Valid-Until false, and the image keeps that
# setting for its own apt-get update).
#
#   base.sh [NAME [SUITE]]   default docker.io/library/debian:bookworm-slim; SUITE defaults to
#                            the tag's release name (debian:trixie-slim: trixie)
#
# Cached by content: the image carries a label with a hash of this script and the suite; when the
# store already has NAME with that label, nothing is done.
set -euo pipefail
NAME=${1:-docker.io/library/debian:bookworm-slim}
tag=${NAME##*:}
SUITE=${2:-${tag%-slim}}
case "$SUITE" in
    bullseye|bookworm|trixie) ;;
    sid) ;;
    *) printf '[image-base] ERROR: %s\n' "no Debian suite for $NAME (give it: base.sh NAME SUITE, one of bullseye, bookworm, trixie, sid)" >&2; exit 2 ;;
esac
say() { printf '[image-base] %s\n' "$*"; }
die() { printf '[image-base] ERROR: %s\n' "$*" >&2; exit 1; }
command -v mmdebstrap >/dev/null && command -v buildah >/dev/null \
    || die "mmdebstrap and buildah are needed (apt-get install mmdebstrap buildah)"

key=$( { cat "$0"; echo "$SUITE"; } | sha256sum | cut -c1-16)
have=$(buildah inspect --type image --format '{{index .ImageAnnotations "org.prrte-k8s.key"}}{{index .OCIv1.Config.Labels "org.prrte-k8s.key"}}' "$NAME" 2>/dev/null || true)
if [[ "$have" == "$key" ]]; then
    say "$NAME (mmdebstrap $SUITE, key $key) already in the local store; nothing to do."
    exit 0
fi

t0=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/prrte-k8s-base.XXXXXX")
ctr=""
cleanup() { [[ -n "$ctr" ]] && buildah rm "$ctr" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
sources=("deb http://deb.debian.org/debian $SUITE main")
aptopts=(--aptopt='Acquire::Languages "none"')
hooks=()
if [[ "$SUITE" == sid ]]; then
    # Unstable has no -updates or -security; its Release file may have expired here, so apt in
    # the image (a Containerfile's apt-get update) must not check its validity either.
    aptopts+=(--aptopt='Acquire::Check-Valid-Until "false"')
    hooks+=(--customize-hook='echo "Acquire::Check-Valid-Until \"false\";" > "$1"/etc/apt/apt.conf.d/99check-valid-until')
else
    sources+=("deb http://deb.debian.org/debian $SUITE-updates main"
        "deb http://deb.debian.org/debian-security $SUITE-security main")
fi
say "mmdebstrap --variant=minbase $SUITE (${sources[*]#deb })"
mmdebstrap --quiet --variant=minbase --components=main "${aptopts[@]}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
    --customize-hook='echo "path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/locale/*" > "$1"/etc/dpkg/dpkg.cfg.d/docker-slim' \
    "${hooks[@]}" \
    "$SUITE" "$work/base.tar" "${sources[@]}" \
  || die "mmdebstrap failed"
ctr=$(buildah from scratch)
buildah add --quiet "$ctr" "$work/base.tar" / >/dev/null
buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "org.prrte-k8s.key=$key" --label "org.prrte-k8s.made-by=mmdebstrap --variant=minbase $SUITE" "$ctr"
buildah commit --quiet --rm "$ctr" "$NAME" >/dev/null
ctr=""
size=$(buildah images --format '{{.Size}}' "$NAME" | head -1)
say "tagged $NAME ($size) in $((SECONDS - t0)) s"
