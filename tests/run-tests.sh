#!/usr/bin/env bash
# The test suite: every crate's unit and integration tests (the sandbox cluster, discovery,
# the agent, the components inside real PRRTE), then a check that nothing was left behind.
set -uo pipefail
cd "$(dirname "$0")/.."
export PRRTE_K8S_PREFIX=${PRRTE_K8S_PREFIX:-/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3}
[[ $(id -u) -eq 0 ]] || { echo "run-tests: the tests create network namespaces; run as root" >&2; exit 1; }

# What a killed earlier run (or sandbox) left would fail the check below: remove it first, and
# say so. Networks of live processes are left alone.
cargo run -q -p prrte-k8s-sandbox --bin prrte-k8s-sandbox -- sweep || exit 1

cargo test --workspace --no-fail-fast -- --test-threads="${PRRTE_K8S_TEST_THREADS:-2}"
rc=$?

bash tests/check-leftovers.sh || rc=1
exit $rc
