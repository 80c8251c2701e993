#!/usr/bin/env bash
# `make image`: build the prrte-k8s images into buildah's local store (containers-storage),
# reusing every cache:
#   1. PMIx 5.0.5 + PRRTE 3.0.8 (build-prrte.sh) and Open MPI 5.0.7 + an mpi4py wheel on them
#      (build-ompi.sh), cached under /opt/prrte-k8s by version;
#   2. the Rust artifacts (prrte-k8s, prrte-k8s-agent, prrte-k8s-rsh, the components' library),
#      `cargo build --release` (the agent: `--profile agent`) with the project's toolchain, in
#      $CARGO_TARGET_DIR; and the three programs again as static executables
#      (x86_64-unknown-linux-musl, static-pie) for the injected runtime, which must run in any
#      image;
#   3. the base image docker.io/library/debian:bookworm-slim made with mmdebstrap (base.sh);
#   4. the images, each built with `buildah bud --isolation chroot` from a staging directory and
#      labelled with a key hashed from everything that goes into it; an image whose label already
#      matches is not rebuilt:
#        localhost/prrte-k8s:latest            runtime (Containerfile)
#        localhost/prrte-k8s-builder:latest    builder (Containerfile.builder)
#        localhost/prrte-k8s-allreduce:latest  example application (Containerfile.app with
#                                              tests/programs/allreduce.{c,py})
#        localhost/prrte-k8s-inject:latest     the injected runtime (Containerfile.inject: FROM
#                                              scratch, the bundle in /opt/prrte-k8s-bundle)
#        localhost/prrte-k8s-controller:latest  the controller (Containerfile.controller: FROM
#                                              scratch, the static prrte-k8s alone)
#        localhost/prrte-k8s-app/*:latest      the tests' user images, like mpi-operator's
#                                              (app-images.sh: Debian's Open MPI or MPICH, no libc)
# Prints the time of every step and the image sizes.
#
#   PRRTE_K8S_PREFIX   the PMIx/PRRTE prefix the images carry (default: the project's default)
#   PRRTE_K8S_ROOT     cache root (default /opt/prrte-k8s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ROOT=${PRRTE_K8S_ROOT:-/opt/prrte-k8s}
export PRRTE_K8S_PREFIX=${PRRTE_K8S_PREFIX:-$ROOT/prrte-3.0.8-pmix-5.0.5-k8s3}
PRRTE_PREFIX=$PRRTE_K8S_PREFIX
BASE=docker.io/library/debian:bookworm-slim
RUNTIME=localhost/prrte-k8s:latest
BUILDER=localhost/prrte-k8s-builder:latest
APP=localhost/prrte-k8s-allreduce:latest
INJECT=localhost/prrte-k8s-inject:latest
CONTROLLER=localhost/prrte-k8s-controller:latest
MUSL=x86_64-unknown-linux-musl
target=${CARGO_TARGET_DIR:-$repo/target}

say() { printf '[image] %s\n' "$*"; }
die() { printf '[image] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (buildah's local store and chroot isolation)"
for tool in buildah mmdebstrap cargo; do
    command -v "$tool" >/dev/null || die "$tool is missing (prrte-config/setup.sh installs buildah and mmdebstrap)"
done

t_all=$SECONDS
timings=()
timed() { # timed LABEL CMD...: run, remember how long it took
    local label=$1 t=$SECONDS; shift
    "$@"
    timings+=("$(printf '%-34s %4d s' "$label" $((SECONDS - t)))")
}

timed "PMIx + PRRTE (build-prrte.sh)" bash "$repo/prrte-config/build-prrte.sh"
ompi_out=$(mktemp); trap 'rm -f "$ompi_out"' EXIT
timed "Open MPI + mpi4py (build-ompi.sh)" bash -c 'bash "$1" | tee "$2"' _ "$repo/prrte-config/build-ompi.sh" "$ompi_out"
OMPI_PREFIX=$(sed -n 's/^OMPI_PREFIX=//p' "$ompi_out" | tail -1)
[[ -n "$OMPI_PREFIX" && -x "$OMPI_PREFIX/bin/mpicc" ]] || die "build-ompi.sh did not report an Open MPI prefix"
timed "Rust release build (cargo)" bash -c 'cd "$1" && cargo build --release -q -p prrte-k8s -p prrte-k8s-cabi' _ "$repo"
# The agent idles in every pod: its own profile (Cargo.toml: fat LTO, one codegen unit) keeps
# its resident set small.
timed "Rust agent build (agent profile)" bash -c 'cd "$1" && cargo build --profile agent -q -p prrte-k8s --bin prrte-k8s-agent' _ "$repo"
rust=("$target/release/prrte-k8s" "$target/agent/prrte-k8s-agent" "$target/release/prrte-k8s-rsh"
      "$target/release/libprrte_k8s_cabi.so")
for f in "${rust[@]}"; do [[ -f "$f" ]] || die "$f was not built"; done
command -v musl-gcc >/dev/null || die "musl-gcc is missing (prrte-config/setup.sh installs Debian's musl-tools)"
grep -qx "$MUSL" <<<"$(rustup target list --installed 2>/dev/null)" \
    || die "the Rust target $MUSL is missing (prrte-config/setup.sh adds it: rustup target add $MUSL)"
timed "Rust static build (cargo, musl)" bash -c 'cd "$1" && cargo build --release -q --target "$2" -p prrte-k8s --bins' _ "$repo" "$MUSL"
static=("$target/$MUSL/release/prrte-k8s" "$target/$MUSL/release/prrte-k8s-agent" "$target/$MUSL/release/prrte-k8s-rsh")
for f in "${static[@]}"; do
    [[ -f "$f" ]] || die "$f was not built"
    # Static: no program interpreter (PT_INTERP), so no loader or libc is needed in the image.
    # (readelf's output read whole first: with pipefail, `readelf | grep -q` can fail on SIGPIPE)
    headers=$(LC_ALL=C readelf -lW "$f") || die "readelf could not read $f"
    if grep -q 'Requesting program interpreter' <<<"$headers"; then
        die "$f is not statically linked (it names a program interpreter)"
    fi
done
timed "base image (base.sh)" bash "$here/base.sh" "$BASE"

wheel=$(compgen -G "$OMPI_PREFIX/share/wheels/mpi4py-*-cp311-*.whl" | head -1)
[[ -n "$wheel" ]] || die "no mpi4py wheel for Python 3.11 in $OMPI_PREFIX/share/wheels (Debian 12's python3)"

image_key() { buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.prrte-k8s.key"}}' "$1" 2>/dev/null || true; }
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# build_image NAME KEY CONTAINERFILE CONTEXT [ARGS...]: buildah bud unless NAME carries KEY
build_image() {
    local name=$1 key=$2 file=$3 ctx=$4 old; shift 4
    if [[ "$(image_key "$name")" == "$key" ]]; then
        say "$name is up to date (key $key)"
        return 0
    fi
    old=$(image_id "$name")
    say "building $name (key $key)"
    buildah bud --isolation chroot --layers --pull=never --quiet -f "$file" \
        --label "org.prrte-k8s.key=$key" -t "$name" "$@" "$ctx" >/dev/null \
        || die "buildah bud of $name failed"
    # drop the image this one replaced (untagged now; refused, and kept, if still in use)
    if [[ -n "$old" && "$old" != "$(image_id "$name")" ]]; then
        buildah rmi "$old" >/dev/null 2>&1 || true
    fi
}

runtime_key=$( {
    cat "$here/Containerfile" "$repo/prrte-config/prte-mca-params.conf"
    echo "prrte=$PRRTE_PREFIX $(cat "$PRRTE_PREFIX/.prrte-k8s-build")"
    echo "ompi=$OMPI_PREFIX $(cat "$OMPI_PREFIX/.prrte-k8s-build")"
    sha256sum "${rust[@]}" "$wheel" | cut -d' ' -f1
    image_id "$BASE"
} | sha256sum | cut -c1-16)

stage=$(mktemp -d /var/tmp/prrte-k8s-image.XXXXXX)
trap 'rm -f "$ompi_out"; rm -rf "$stage"' EXIT
t=$SECONDS
if [[ "$(image_key "$RUNTIME")" != "$runtime_key" ]]; then
    say "staging the build context in $stage"
    mkdir -p "$stage"/{prrte,ompi,python,rust,ompi-include}
    # Only what runs: no sources, headers, docs, libtool archives; never components a host
    # installation happens to have in $prefix/lib/prte, nor its parameter file.
    tar -C "$PRRTE_PREFIX" -cf - --exclude=./src --exclude=./include --exclude=./share/doc --exclude=./share/man \
        --exclude='./lib/prte/*' --exclude='*.la' --exclude=./lib/pkgconfig --exclude=./etc/prte-mca-params.conf \
        --exclude=./.prrte-k8s-build . | tar -C "$stage/prrte" -xf -
    tar -C "$OMPI_PREFIX" -cf - --exclude=./include --exclude=./share/doc --exclude=./share/man \
        --exclude=./share/wheels --exclude='*.la' --exclude=./lib/pkgconfig --exclude=./.prrte-k8s-build . \
        | tar -C "$stage/ompi" -xf -
    /usr/bin/python3 -m zipfile -e "$wheel" "$stage/python"
    install -m 0755 "${rust[@]}" "$stage/rust/"
    strip --strip-unneeded "$stage/rust/"* 2>/dev/null || true
    cp "$repo/prrte-config/prte-mca-params.conf" "$stage/"
    build_image "$RUNTIME" "$runtime_key" "$here/Containerfile" "$stage" \
        --build-arg "BASE=$BASE" --build-arg "PRRTE_PREFIX=$PRRTE_PREFIX" --build-arg "OMPI_PREFIX=$OMPI_PREFIX"
else
    say "$RUNTIME is up to date (key $runtime_key)"
fi
timings+=("$(printf '%-34s %4d s' "runtime image" $((SECONDS - t)))")

t=$SECONDS
builder_key=$( { cat "$here/Containerfile.builder"; image_id "$RUNTIME"; } | sha256sum | cut -c1-16)
if [[ "$(image_key "$BUILDER")" != "$builder_key" ]]; then
    rm -rf "$stage/ompi-include" "$stage/pmix-include" && mkdir -p "$stage/ompi-include" "$stage/pmix-include"
    cp -a "$OMPI_PREFIX/include/." "$stage/ompi-include/"
    # PMIx's headers (pmixcc's -I<include> -I<include>/pmix), not PRRTE's
    cp -a "$PRRTE_PREFIX"/include/pmix*.h "$PRRTE_PREFIX/include/pmix" "$stage/pmix-include/"
    build_image "$BUILDER" "$builder_key" "$here/Containerfile.builder" "$stage" \
        --build-arg "RUNTIME=$RUNTIME" --build-arg "OMPI_PREFIX=$OMPI_PREFIX" \
        --build-arg "PRRTE_PREFIX=$PRRTE_PREFIX"
else
    say "$BUILDER is up to date (key $builder_key)"
fi
timings+=("$(printf '%-34s %4d s' "builder image" $((SECONDS - t)))")

t=$SECONDS
programs="$repo/tests/programs"
app_key=$( { cat "$here/Containerfile.app" "$programs/allreduce.c" "$programs/allreduce.py"; image_id "$RUNTIME"; image_id "$BUILDER"; } \
    | sha256sum | cut -c1-16)
build_image "$APP" "$app_key" "$here/Containerfile.app" "$programs" \
    --build-arg "RUNTIME=$RUNTIME" --build-arg "BUILDER=$BUILDER"
timings+=("$(printf '%-34s %4d s' "example app image" $((SECONDS - t)))")

# The injected runtime: the static programs, the components (the glibc library PRRTE dlopens,
# under both component names) and the site parameter file, with a VERSION naming the content.
t=$SECONDS
inject_stage="$stage/inject"
bundle="$inject_stage/bundle"
rm -rf "$inject_stage" && mkdir -p "$bundle"/{bin,lib/prte,etc}
install -m 0755 "${static[@]}" "$bundle/bin/"
strip --strip-unneeded "$bundle/bin/"* 2>/dev/null || true
install -m 0755 "$target/release/libprrte_k8s_cabi.so" "$bundle/lib/prte/prte_mca_ras_k8s.so"
strip --strip-unneeded "$bundle/lib/prte/prte_mca_ras_k8s.so" 2>/dev/null || true
ln -s prte_mca_ras_k8s.so "$bundle/lib/prte/prte_mca_plm_k8s.so"
install -m 0644 "$repo/prrte-config/prte-mca-params.conf" "$bundle/etc/prte-mca-params.conf"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
content=$( (cd "$bundle" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12)
echo "prrte-k8s $version $content" > "$bundle/VERSION"
cp "$here/Containerfile.inject" "$inject_stage/Containerfile"
inject_key=$( { cat "$here/Containerfile.inject"; echo "$content"; } | sha256sum | cut -c1-16)
build_image "$INJECT" "$inject_key" "$inject_stage/Containerfile" "$inject_stage"
timings+=("$(printf '%-34s %4d s' "inject image" $((SECONDS - t)))")

# The controller: the static prrte-k8s alone (Containerfile.controller: FROM scratch).
t=$SECONDS
controller_stage="$stage/controller"
rm -rf "$controller_stage" && mkdir -p "$controller_stage"
install -m 0755 "$target/$MUSL/release/prrte-k8s" "$controller_stage/prrte-k8s"
strip --strip-unneeded "$controller_stage/prrte-k8s" 2>/dev/null || true
cp "$here/Containerfile.controller" "$controller_stage/Containerfile"
controller_key=$( { cat "$here/Containerfile.controller"; sha256sum "$controller_stage/prrte-k8s" | cut -d' ' -f1; } \
    | sha256sum | cut -c1-16)
build_image "$CONTROLLER" "$controller_key" "$controller_stage/Containerfile" "$controller_stage"
timings+=("$(printf '%-34s %4d s' "controller image" $((SECONDS - t)))")

t=$SECONDS
bash "$here/app-images.sh" || die "app-images.sh failed"
timings+=("$(printf '%-34s %4d s' "test user images (app-images.sh)" $((SECONDS - t)))")

say "build times:"
for line in "${timings[@]}"; do say "  $line"; done
say "  $(printf '%-34s %4d s' total $((SECONDS - t_all)))"
say "images:"
for name in "$BASE" "$RUNTIME" "$BUILDER" "$APP" "$INJECT" "$CONTROLLER" localhost/prrte-k8s-app/{trixie-openmpi,trixie-mpich,bookworm-openmpi,bullseye-mpich,sid-openmpi,nolibc}:latest; do
    say "  $(printf '%-40s %s' "$name" "$(buildah images --format '{{.Size}}' "$name" | head -1)")"
done
