#!/bin/sh
# Build the libFuzzer targets (fuzz/) with clang and run each one for
# SECONDS (default 60) on a copy of its seed corpus and regressions.
# Fails if any target crashes, breaks a property, leaks, times out (5 s per
# input) or passes 2 GiB; prints the executions of each target.
#
#   scripts/fuzz.sh [SECONDS]
#
# Environment: BUILD_DIR (default build-fuzz), TARGETS (default all),
# CC (default clang), KEEP=1 to keep the work directory.
# A reproducer found here belongs in fuzz/regressions/<target>/, where the
# unit suite (unit_fuzz_replay) replays it from then on.
set -eu

secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
targets=${TARGETS:-"lease status watch kubeconfig base64 exec_credential microtime etcd etcd_encode pod"}

work=$(mktemp -d "${TMPDIR:-/tmp}/kl-fuzz.XXXXXX")
keep=${KEEP:-0}
cleanup() {
    if [ "$keep" = 1 ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

build_targets=""
for t in $targets; do
    build_targets="$build_targets fuzz_$t"
done
# shellcheck disable=SC2086 # one word per target
if ! cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="${CC:-clang}" -DK8SLEASE_FUZZ=ON \
    -DK8SLEASE_BUILD_TESTS=OFF -DK8SLEASE_BUILD_CLI=OFF -DK8SLEASE_BUILD_TESTSERVER=OFF \
    -DK8SLEASE_BUILD_BENCH=OFF -DK8SLEASE_BUILD_EXAMPLES=OFF >"$work/build.log" 2>&1 ||
    ! cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target $build_targets \
        >>"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "fuzz: build failed" >&2
    exit 1
fi

# Dictionaries: JSON for the API bodies, YAML for kubeconfig, the etcd
# gateway's field names (etcd_encode reads binary: none).
dict_of() {
    case $1 in
    lease | status | watch | exec_credential | pod) echo "$root/fuzz/dict/json.dict" ;;
    etcd) echo "$root/fuzz/dict/etcd.dict" ;;
    kubeconfig) echo "$root/fuzz/dict/kubeconfig.dict" ;;
    microtime) echo "$root/fuzz/dict/microtime.dict" ;;
    *) echo "" ;;
    esac
}

failed=""
printf '%-16s %12s  %s\n' target executions result
for t in $targets; do
    dir="$work/$t"
    mkdir -p "$dir/corpus" "$dir/artifacts"
    cp "$root/fuzz/corpus/$t"/* "$dir/corpus/"
    if [ -d "$root/fuzz/regressions/$t" ]; then
        cp "$root/fuzz/regressions/$t"/* "$dir/corpus/" 2>/dev/null || true
    fi
    set -- -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/"
    dict=$(dict_of "$t")
    [ -n "$dict" ] && set -- "$@" -dict="$dict"
    # Longer inputs for the stream splitter: more lines per chunk pattern.
    [ "$t" = watch ] && set -- "$@" -max_len=16384
    # The kubeconfig target rewrites a file per input: tmpfs is 4x faster.
    tmp=${TMPDIR:-/tmp}
    [ "$t" = kubeconfig ] && [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
    rc=0
    TMPDIR=$tmp ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/fuzz/fuzz_$t" "$@" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n 1)
    artifacts=$(ls "$dir/artifacts")
    if [ "$rc" -eq 0 ] && [ -z "$artifacts" ]; then
        printf '%-16s %12s  %s\n' "$t" "${execs:-?}" ok
    else
        printf '%-16s %12s  %s\n' "$t" "${execs:-?}" "FAILED (exit $rc)"
        grep -E 'ERROR|property broken|input:|SUMMARY' "$dir/log" | head -n 20 | sed 's/^/    /'
        for a in $artifacts; do
            echo "    reproducer: $dir/artifacts/$a"
        done
        echo "    log: $dir/log"
        failed="$failed $t"
        keep=1
    fi
done

if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed"
    exit 1
fi
echo "fuzz: all targets ran ${secs}s without a finding"
