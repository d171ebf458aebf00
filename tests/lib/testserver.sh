# Start k8slease-testserver from a shell script (POSIX sh); source it:
#
#   . "$(dirname "$0")/../lib/testserver.sh"
#   start_testserver "$T/server" "$T/server.ready" "$T/server.err" 10 || fail "..."
#   export KUBECONFIG=$TESTSERVER_KUBECONFIG
#
# Used by tests/cli/cli_test.sh and scripts/check-deploy.sh. The C suites and
# the benchmarks start it with tests/lib/harness.c. (examples/test_examples.sh
# keeps its own: it also runs from the installed examples, without this tree.)

# start_testserver DIR OUT ERR SECONDS [ARGS...]: run $K8SLEASE_TESTSERVER
# (default: k8slease-testserver in PATH) in the background with --quiet --dir
# DIR and ARGS, stdout in OUT, stderr in ERR (empty: inherited), and wait
# for its ready line, polling every 100 ms for at most SECONDS. Sets
# TESTSERVER_PID, TESTSERVER_PORT and TESTSERVER_KUBECONFIG. Returns 0, 1
# when the server exited first, 2 when it was not ready in time (it is left
# running: TESTSERVER_PID is set for the caller's cleanup).
start_testserver() {
    _ts_dir=$1 _ts_out=$2 _ts_err=$3 _ts_secs=$4
    shift 4
    if [ -n "$_ts_err" ]; then
        "${K8SLEASE_TESTSERVER:-k8slease-testserver}" --quiet --dir "$_ts_dir" "$@" \
            >"$_ts_out" 2>"$_ts_err" &
    else
        "${K8SLEASE_TESTSERVER:-k8slease-testserver}" --quiet --dir "$_ts_dir" "$@" >"$_ts_out" &
    fi
    TESTSERVER_PID=$!
    TESTSERVER_PORT= TESTSERVER_KUBECONFIG=
    _ts_n=0
    until grep -q '^ready ' "$_ts_out" 2>/dev/null; do
        kill -0 "$TESTSERVER_PID" 2>/dev/null || return 1
        _ts_n=$((_ts_n + 1))
        [ "$_ts_n" -lt $((_ts_secs * 10)) ] || return 2
        sleep 0.1
    done
    TESTSERVER_KUBECONFIG=$(sed -n 's/^ready .*kubeconfig=\([^ ]*\).*/\1/p' "$_ts_out")
    TESTSERVER_PORT=$(sed -n 's/^ready port=\([0-9]*\).*/\1/p' "$_ts_out")
    return 0
}
