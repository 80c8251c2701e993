# prrte-k8s: the two commands a newcomer needs (as root on Debian 12):
#   make demo   sandbox cluster, a DVM through ras k8s / plm k8s, a real MPI program across pods
#   make test   everything the project tests
SHELL := /bin/bash
export PRRTE_K8S_PREFIX ?= /opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5

.PHONY: setup build test demo clean-leftovers

setup:
	bash prrte-config/setup.sh

build: setup
	cargo build --workspace --all-targets

test: build
	bash tests/run-tests.sh

demo: setup
	bash prrte-config/demo.sh
