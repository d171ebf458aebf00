#!/bin/sh
# envtest-suites.sh BUILD ASSETS [CTEST ARGS...]
#
# Runs the suites that work on a real kube-apiserver (ctest label envtest:
# the integration suites, the differential test, quick chaos) against the
# envtest binaries in ASSETS (kube-apiserver and etcd side by side, as
# ../shared/kube-apiserver/unpack.sh lays them out, or your own envtest
# download), through tests/integration/envtest.sh. Then prints each test
# that skipped, with the reason the test gave. Extra arguments go to ctest
# (e.g. -LE chaos to leave the chaos suite out). Exit status: ctest's.
set -eu
[ $# -ge 2 ] || { echo "usage: envtest-suites.sh BUILD ASSETS [CTEST ARGS...]" >&2; exit 2; }
build=$1 assets=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
status=0
KUBEBUILDER_ASSETS=$assets "$here/tests/integration/envtest.sh" \
    ctest --test-dir "$build" -L envtest --output-on-failure "$@" || status=$?
# ctest keeps every test's whole output there, passed or not.
log=$build/Testing/Temporary/LastTest.log

# cmocka prints the reason ("skipped ...: why") just before "[  SKIPPED ] name".
echo "== skipped on the real server ($(basename "$assets")):"
awk '/^skipped/ { why = $0; next }
     /^\[  SKIPPED \] [a-z_]+$/ && why != "" { printf "  %-40s %s\n", $4, why; why = ""; n++ }
     END { printf "  %d skipped\n", n }' "$log"
exit "$status"
