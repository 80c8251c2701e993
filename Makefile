# prrte-k8s: the two commands a newcomer needs (as root on Debian 12):
#   make demo   sandbox cluster, a DVM through ras k8s / plm k8s, a real MPI program across pods
#   make test   everything the project tests
#   make image  the container images (Open MPI 5 + PRRTE + the k8s components; prrte-config/image)
#   make wheel  the Python module's wheel (pip + maturin), cached outside the clone
#   make bench  DVM-ready time, daemons through the agents vs through an sshd in each pod,
#               a batch Job end to end, a running DVM grown by 1/4/16 pods
#               (release build; bench.json, bench.png, bench-batch.png)
#   make bench-controller  an MPIJob through `prrte-k8s controller` against `prrte-k8s manifest
#               --from-mpijob` applied, 4 and 16 pods, and the controller's CPU and RSS for a
#               burst of 20 MPIJobs (release build; bench-controller.json)
#   make bench-controller-scale  2,000 MPIJobs at once through the controller, half another's,
#               the controller killed midway (release build; bench-controller-scale.json)
#   make bench-scale  discovery of 1,000/10,000 pods, fan-out to 256/1,024 agents, agent RSS
SHELL := /bin/bash
export PRRTE_K8S_PREFIX ?= /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3

.PHONY: setup build lint image wheel test demo bench bench-controller bench-controller-scale bench-scale clean-leftovers

setup:
	bash prrte-config/setup.sh

build: setup
	cargo build --workspace --all-targets

# What CI checks before the tests: formatting, clippy and the API docs (broken or private
# intra-doc links, bare URLs), each with warnings as errors.
lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

# the images are built (or found up to date in seconds) first: tests run pods from them (the
# Python workflow test builds its own wheel with build-wheel.sh, in the dev profile)
test: build image
	bash tests/run-tests.sh

# BENCH_ARGS, e.g. "--quick" or "--pods 4,16 --runs 3" (prrte-k8s-bench --help)
# `make bench` runs the scale benchmarks first, then the launch benchmark, both release builds:
# the bench binary takes the agent and the components from its own target directory, so all
# three are built --release here (cargo builds what is missing or stale). Writes bench.json,
# bench.png (DVM-ready time against pods per method) and bench-batch.png (a batch Job's phases;
# its pods run the application image `make image` builds, hence the dependency).
bench: setup bench-scale image
	cargo build --release -p prrte-k8s -p prrte-k8s-cabi -p prrte-k8s-sandbox
	cargo run --release -q -p prrte-k8s-sandbox --bin prrte-k8s-bench -- \
		--json bench.json --plot bench.png $(BENCH_ARGS)

# CONTROLLER_PODS (4,16), CONTROLLER_RUNS (5), CONTROLLER_BURST (20: MPIJobs of 2 pods at once).
CONTROLLER_PODS ?= 4,16
CONTROLLER_RUNS ?= 5
CONTROLLER_BURST ?= 20
bench-controller: setup image
	cargo build --release -p prrte-k8s -p prrte-k8s-cabi -p prrte-k8s-sandbox
	cargo run --release -q -p prrte-k8s-sandbox --bin prrte-k8s-bench -- --controller-only \
		--pods $(CONTROLLER_PODS) --runs $(CONTROLLER_RUNS) --burst $(CONTROLLER_BURST) \
		--json bench-controller.json

# CONTROLLER_MPIJOBS (2000): MPIJobs created at once, suspended (no pods, no images needed).
CONTROLLER_MPIJOBS ?= 2000
bench-controller-scale: setup
	cargo build --release -p prrte-k8s -p prrte-k8s-sandbox
	cargo run --release -q -p prrte-k8s-sandbox --bin prrte-k8s-bench -- \
		--controller-scale $(CONTROLLER_MPIJOBS) --json bench-controller-scale.json

# Release build (cargo's bench profile); SCALE_ARGS e.g. "discovery --pods 1000" (--help).
# Writes bench-scale.json here (cargo bench runs the bench in adapter/, hence the absolute path).
# The footprint is that of the agent the runtime image carries (Cargo.toml's `agent` profile).
AGENT_BIN = $(abspath $(or $(CARGO_TARGET_DIR),target))/agent/prrte-k8s-agent
bench-scale: setup
	cargo build --profile agent -p prrte-k8s --bin prrte-k8s-agent
	cargo bench -p prrte-k8s --bench scale -- --json $(CURDIR)/bench-scale.json \
		--footprint-agent $(AGENT_BIN) $(SCALE_ARGS)

image: setup
	bash prrte-config/image/build.sh

# `pip wheel adapter/python` (release, maturin from setup's venv) into
# /var/cache/prrte-k8s/wheels/<version>-release-<hash of its sources>/; prints the wheel's path
wheel: setup
	bash adapter/python/build-wheel.sh

# what killed test runs and sandboxes left on the host (live ones are left alone)
clean-leftovers:
	cargo run -q -p prrte-k8s-sandbox --bin prrte-k8s-sandbox -- sweep

demo: setup
	bash prrte-config/demo.sh
