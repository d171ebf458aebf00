#!/bin/sh
# Run the test programs of a build under valgrind's memcheck: any invalid
# access, use of uninitialised memory or definite/indirect leak fails.
# Still-reachable memory (libcurl's and OpenSSL's global state, kept on
# purpose) is not an error.
#
#   scripts/valgrind.sh BUILD_DIR [PROGRAM...]
#
# Without PROGRAMs: every unit test, the seed-ABI consumers and, unless
# INTEGRATION=0, test_compat and test_e2e (they start k8slease-testserver,
# which itself does not run under valgrind). BUILD_DIR must be a build
# without sanitizers. Logs go to BUILD_DIR/valgrind/.
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 BUILD_DIR [PROGRAM...]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || {
    echo "valgrind: not installed" >&2
    exit 2
}
if grep -q '^K8SLEASE_SANITIZE:STRING=.\+' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "$build is a sanitizer build: valgrind needs a plain one" >&2
    exit 2
fi

if [ $# -eq 0 ]; then
    progs="$build/tests/unit/unit_* $build/tests/abi/abi_seed_consumer"
    progs="$progs $build/tests/abi/abi_seed_consumer_cxx"
    if [ "${INTEGRATION:-1}" != 0 ]; then
        progs="$progs $build/tests/integration/test_compat $build/tests/integration/test_e2e"
    fi
    for p in $progs; do
        if [ -f "$p" ] && [ -x "$p" ]; then
            set -- "$@" "$p"
        fi
    done
fi
if [ $# -eq 0 ]; then
    echo "no test programs under $build (build it first)" >&2
    exit 2
fi

logs="$build/valgrind"
mkdir -p "$logs"
failed=""
for p in "$@"; do
    name=$(basename "$p")
    log="$logs/$name.log"
    out="$logs/$name.out"
    start=$(date +%s)
    rc=0
    # The seed-ABI consumers run as ctest runs them: no cluster, so every
    # call fails the way the seed's did.
    KUBECONFIG=$build/no-such-kubeconfig KUBERNETES_SERVICE_HOST='' \
        valgrind --quiet --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
        --num-callers=40 --suppressions="$root/scripts/valgrind.supp" \
        --log-file="$log" "$p" >"$out" 2>&1 || rc=$?
    secs=$(($(date +%s) - start))
    errors=$(grep -c '^==[0-9]*== \(Invalid\|Conditional\|Use of\|Syscall\|Mismatched\|Source and\|Argument\)' "$log" || true)
    leaks=$(grep -c 'are definitely lost\|are indirectly lost' "$log" || true)
    if [ "$rc" -eq 0 ]; then
        printf '%-28s ok      %4ss  0 errors, 0 leaks\n' "$name" "$secs"
    elif [ "$rc" -eq 99 ]; then
        printf '%-28s FAILED  %4ss  %s errors, %s leak records (%s)\n' "$name" "$secs" \
            "$errors" "$leaks" "$log"
        failed="$failed $name"
    else
        printf '%-28s FAILED  %4ss  the program failed (exit %s): %s\n' "$name" "$secs" "$rc" "$out"
        failed="$failed $name"
    fi
done

if [ -n "$failed" ]; then
    echo "valgrind: failed:$failed"
    exit 1
fi
echo "valgrind: $# programs, 0 errors, 0 leaks"
