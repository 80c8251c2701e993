#!/usr/bin/env bash
# The test application images: user images like mpi-operator's examples, with nothing of
# prrte-k8s in them (the runtime is injected into their pods). `make image` (build.sh) builds
# them all; the tests (`sandbox::app_images`) call this script for the one they need, so that a
# stale or missing image is rebuilt the same way.
#
#   app-images.sh [NAME...]   default: all of them
#
#   NAME               image                                       from
#   trixie-openmpi     localhost/prrte-k8s-app/trixie-openmpi      debian:trixie-slim + openmpi-bin (Open MPI 5.0.7, PRRTE 3.0.8)
#   trixie-mpich       localhost/prrte-k8s-app/trixie-mpich        debian:trixie-slim + mpich (Hydra)
#   bookworm-openmpi   localhost/prrte-k8s-app/bookworm-openmpi    debian:bookworm-slim + openmpi-bin (Open MPI 4.1, ORTE)
#   bullseye-mpich     localhost/prrte-k8s-app/bullseye-mpich      debian:bullseye-slim + mpich 3.4
#   sid-openmpi        localhost/prrte-k8s-app/sid-openmpi         debian:sid-slim + openmpi-bin (Open MPI 6.0.0~rc2, PRRTE 5.0.0~rc1)
#   trixie-openmpi-python  localhost/prrte-k8s-app/trixie-openmpi-python  trixie-openmpi + python3 as `python` (what the Kubeflow SDK's CustomTrainer runs)
#   nolibc             localhost/prrte-k8s-app/nolibc              busybox-static in an empty image
# (all :latest). The MPI images come from Containerfile.mpi-app with tests/programs/pi.cc and
# spawn.c, the last from Containerfile.nolibc; their bases from base.sh (mmdebstrap). Each
# image carries a label keyed by its recipe, the programs, its build arguments and its base
# image's id; an image whose label matches is kept. Prints one line per image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
programs="$repo/tests/programs"
REPO=localhost/prrte-k8s-app
ALL=(trixie-openmpi trixie-mpich bookworm-openmpi bullseye-mpich sid-openmpi trixie-openmpi-python nolibc)

say() { printf '[app-images] %s\n' "$*"; }
die() { printf '[app-images] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (buildah's local store and chroot isolation)"
command -v buildah >/dev/null || die "buildah is missing (prrte-config/setup.sh installs it)"

image_key() { buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.prrte-k8s.key"}}' "$1" 2>/dev/null || true; }
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

build_one() {
    local name=$1 base file args=() key image old
    case "$name" in
        trixie-openmpi)   base=trixie-slim;   file=Containerfile.mpi-app; args=(MPI_RUN=openmpi-bin MPI_DEV=libopenmpi-dev) ;;
        trixie-mpich)     base=trixie-slim;   file=Containerfile.mpi-app; args=(MPI_RUN=mpich MPI_DEV=libmpich-dev) ;;
        bookworm-openmpi) base=bookworm-slim; file=Containerfile.mpi-app; args=(MPI_RUN=openmpi-bin MPI_DEV=libopenmpi-dev) ;;
        bullseye-mpich)   base=bullseye-slim; file=Containerfile.mpi-app; args=(MPI_RUN=mpich MPI_DEV=libmpich-dev) ;;
        sid-openmpi)      base=sid-slim;      file=Containerfile.mpi-app; args=(MPI_RUN=openmpi-bin MPI_DEV=libopenmpi-dev) ;;
        trixie-openmpi-python) base=trixie-slim; file=Containerfile.mpi-app; args=("MPI_RUN=openmpi-bin python3 python-is-python3" MPI_DEV=libopenmpi-dev) ;;
        nolibc)           base=trixie-slim;   file=Containerfile.nolibc ;;
        *) die "no test image $name (one of: ${ALL[*]})" ;;
    esac
    base=docker.io/library/debian:$base
    bash "$here/base.sh" "$base" >/dev/null || die "base.sh $base failed"
    image="$REPO/$name:latest"
    key=$( {
        cat "$here/$file" "$programs/pi.cc" "$programs/spawn.c"
        echo "base=$(image_id "$base")"
        echo "args=${args[*]}"
    } | sha256sum | cut -c1-16)
    if [[ "$(image_key "$image")" == "$key" ]]; then
        say "$image is up to date (key $key)"
        return 0
    fi
    old=$(image_id "$image")
    say "building $image (key $key)"
    local bargs=(--build-arg "BASE=$base")
    for a in "${args[@]}"; do bargs+=(--build-arg "$a"); done
    buildah bud --isolation chroot --layers --pull=never --quiet -f "$here/$file" "${bargs[@]}" \
        --label "org.prrte-k8s.key=$key" -t "$image" "$programs" >/dev/null \
        || die "buildah bud of $image failed"
    if [[ -n "$old" && "$old" != "$(image_id "$image")" ]]; then
        buildah rmi "$old" >/dev/null 2>&1 || true
    fi
}

names=("$@")
((${#names[@]})) || names=("${ALL[@]}")
for n in "${names[@]}"; do build_one "$n"; done
