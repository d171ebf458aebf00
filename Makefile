# Entry points; the real build is CMake (build/ and build-asan/).
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests: one more than the cores. The long suites spend most of their time
# waiting on servers' timings (an etcd cluster's fault, a lease running
# out), and each stands a loaded machine (10x its expected timing).
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
CTEST_ARGS ?=

.PHONY: all deps build test demo demo-node asan-test tsan-test clean format

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j$(JOBS) -- --no-print-directory

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(TEST_JOBS) $(CTEST_ARGS)

demo: build
	$(BUILD)/cli/k8slease demo

# The demo on a real node (as root): deploy/ with k8slease's image on a
# single-node cluster (scripts/demo-node.sh; NODE_ASSETS as for node-test).
demo-node: build
	./scripts/demo-node.sh $(BUILD) $(NODE_ASSETS)

asan-test: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DK8SLEASE_SANITIZE=address,undefined >/dev/null
	cmake --build build-asan -j$(JOBS) -- --no-print-directory
	cd build-asan && ctest --output-on-failure -j$(TEST_JOBS) -LE libcurl $(CTEST_ARGS)

tsan-test: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DK8SLEASE_SANITIZE=thread >/dev/null
	cmake --build build-tsan -j$(JOBS) -- --no-print-directory
	cd build-tsan && ctest --output-on-failure -j$(TEST_JOBS) -L 'unit|integration|abi|cli|examples|cpp' -LE libcurl $(CTEST_ARGS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')

clean:
	rm -rf build build-asan build-tsan

# Packaging and documentation (scripts/ has the details).
.PHONY: docs packages check-packages examples check-deploy image node-test

docs:
	./scripts/build-docs.sh $(BUILD)/docs

packages:
	./scripts/build-packages.sh $(BUILD)/packages

check-packages: packages
	./scripts/check-packages.sh $(BUILD)/packages

examples: build
	cd $(BUILD) && ctest --output-on-failure -L examples $(CTEST_ARGS)

check-deploy: build
	./scripts/check-deploy.sh $(BUILD)/tools/testserver/k8slease-testserver

# OCI images (no registry, no daemon): $(BUILD)/image/k8slease.tar and the
# node suite's; scripts/build-image.sh says what is in them.
image: build
	./scripts/build-image.sh $(BUILD)

# The node suite on a real single-node cluster (as root): NODE_ASSETS=DIR
# with kube-apiserver, kubelet, kube-controller-manager, kube-scheduler and
# etcd (default: ../shared/kube-apiserver's v1.24.0, unpacked into
# $(BUILD)/k8s-assets).
NODE_ASSETS ?=
node-test: build
	assets=$$(tests/node/assets.sh $(BUILD) $(NODE_ASSETS)) && \
	    ./scripts/node-suites.sh $(BUILD) "$$assets" $(CTEST_ARGS)

# Benchmarks (bench/README.md); not part of `make test`. bench: about 7
# minutes on the test server; with APISERVER=DIR (envtest binaries: DIR/
# kube-apiserver, DIR/etcd) also on that real kube-apiserver, in the same
# run (about 12 minutes; bench-quick about 3). BENCH_ARGS: e.g. --only 1,3,
# or --kubeconfig FILE for a shared cluster (light benchmarks only).
.PHONY: bench bench-quick bench-node bench-rollout
APISERVER ?=
BENCH_ARGS ?=

bench: deps
	./bench/run.sh $(if $(APISERVER),--apiserver $(APISERVER)) $(BENCH_ARGS)

bench-quick: deps
	./bench/run.sh --quick $(if $(APISERVER),--apiserver $(APISERVER)) $(BENCH_ARGS)

# Benchmark 8 on a real node (as root; about 5 minutes): crash failover with
# a real kubelet, SIGKILL and OOM, 20 kills each (bench/node-crash.sh).
# NODE_ASSETS as for node-test.
bench-node: build
	./bench/node-crash.sh $(BUILD) $(NODE_ASSETS) $(BENCH_ARGS)

# Benchmark 9 on a real node (as root; about 10 minutes): rolling updates of
# deploy/ with planned handoff, plain release and polling followers, and
# k8slease handoff (bench/node-rollout.sh). NODE_ASSETS as for node-test.
bench-rollout: build
	./bench/node-rollout.sh $(BUILD) $(NODE_ASSETS) $(BENCH_ARGS)

# Chaos suite (docs/chaos.md): faults against 3-5 candidates, invariants
# checked (0 overlaps, recovery, epochs, no stuck candidate). chaos-quick
# takes about 3 minutes, chaos-long runs until 500 leader transitions.
# CHAOS_ARGS: e.g. --seed N, --backend etcd, --log FILE.
# chaos-real APISERVER=DIR: the quick run against a real kube-apiserver and
# its etcd (envtest binaries in DIR, e.g. v1.36.3 with etcd 3.5) started by
# tests/integration/envtest.sh; faults are their processes killed and
# frozen, plus the candidate faults (about 4 minutes).
.PHONY: chaos-quick chaos-long chaos-real
CHAOS_ARGS ?=

chaos-quick: build
	$(BUILD)/tests/chaos/k8slease-chaos --quick $(CHAOS_ARGS)

chaos-long: build
	$(BUILD)/tests/chaos/k8slease-chaos --long $(CHAOS_ARGS)

chaos-real: build
	@test -n "$(APISERVER)" || { echo "make chaos-real APISERVER=DIR (DIR/kube-apiserver, DIR/etcd)"; exit 2; }
	KUBEBUILDER_ASSETS=$(abspath $(APISERVER)) tests/integration/envtest.sh \
		$(BUILD)/tests/chaos/k8slease-chaos --quick --backend envtest $(CHAOS_ARGS)
