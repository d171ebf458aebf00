#!/bin/sh
# `make bench` / `make bench-quick`: build the benchmark driver, run it
# (arguments are passed on, e.g. --quick or --only 1,3), draw the plots.
# Results go to bench/results/: summary.md (the table), *.csv, *.png.
#
#   bench/run.sh [--quick] [--only LIST]                      the test server
#   bench/run.sh --apiserver DIR [--quick] [--only LIST]      + a real kube-apiserver
#   bench/run.sh --kubeconfig FILE [--quick] [--only LIST]    + your cluster (shared-safe)
#
# --apiserver DIR starts etcd + kube-apiserver from DIR (KUBEBUILDER_ASSETS:
# DIR/kube-apiserver, DIR/etcd) with tests/integration/envtest.sh and runs
# every benchmark on it too, in the same run (bench/README.md). Benchmark 7
# (a hung replica) needs replicas: it starts an HA envtest.sh of its own for
# each scenario (K8SLEASE_ENVTEST_REPLICAS=2 behind haproxy, which must be
# installed), from the same DIR; --hang-s N sets the hang (100 s, quick 20 s).
# --kubeconfig FILE runs only what is safe on a shared cluster: benchmarks
# 1, 2, 5 and 4 with 100 elections, on Leases named bench-* and scale-*
# in the kubeconfig's namespace, which are left there, released.
set -eu
cd "$(dirname "$0")/.."
build=${BENCH_BUILD:-build-bench}
out=bench/results

apiserver=
set -- "$@" --end-of-args
while [ "$1" != --end-of-args ]; do
    case $1 in
    --apiserver)
        [ $# -ge 3 ] || { echo "bench/run.sh: --apiserver needs a directory" >&2; exit 2; }
        apiserver=$2
        shift 2 ;;
    --apiserver=*) apiserver=${1#--apiserver=}; shift ;;
    *) set -- "$@" "$1"; shift ;;
    esac
done
shift # --end-of-args
if [ -n "$apiserver" ]; then
    [ -x "$apiserver/kube-apiserver" ] && [ -x "$apiserver/etcd" ] || {
        echo "bench/run.sh: --apiserver $apiserver: no kube-apiserver and etcd there" >&2
        exit 2
    }
    apiserver=$(cd "$apiserver" && pwd)
fi

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "installing Debian package gnuplot-nox"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox
fi

# An optimised build of its own; the CLI and the test suites are not needed.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK8SLEASE_BUILD_BENCH=ON \
    -DK8SLEASE_BUILD_TESTS=OFF -DK8SLEASE_BUILD_CLI=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target k8slease-bench -- --no-print-directory

status=0
if [ -n "$apiserver" ]; then
    KUBEBUILDER_ASSETS=$apiserver tests/integration/envtest.sh \
        "$build/bench/k8slease-bench" --out "$out" --envtest "$@" || status=$?
else
    "$build/bench/k8slease-bench" --out "$out" "$@" || status=$?
fi
if gnuplot -e "dir='$out'" bench/plots.gp; then
    echo "plots: $out/*.png"
fi
exit $status
