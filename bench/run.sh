#!/bin/sh
# `make bench` / `make bench-quick`: build the benchmark driver, run it
# (arguments are passed on, e.g. --quick or --only 1,3), draw the plots.
# Results go to bench/results/: summary.md (the table), *.csv, *.png.
set -eu
cd "$(dirname "$0")/.."
build=${BENCH_BUILD:-build-bench}
out=bench/results

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
"$build/bench/k8slease-bench" --out "$out" "$@" || status=$?
if gnuplot -e "dir='$out'" bench/plots.gp; then
    echo "plots: $out/*.png"
fi
exit $status
