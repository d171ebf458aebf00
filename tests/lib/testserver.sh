# Start k8slease-testserver from a shell script (POSIX sh), and the bounded
# waits and background runs of the shell tests; source it:
#
#   . "$(dirname "$0")/../lib/testserver.sh"
#   start_testserver "$T/server" "$T/server.ready" "$T/server.err" 10 || fail "..."
#   export KUBECONFIG=$TESTSERVER_KUBECONFIG
#
# Used by tests/cli/cli_test.sh, examples/test_examples.sh (installed beside
# it with the examples, so that it also runs without this tree) and
# scripts/check-deploy.sh. The C suites and the benchmarks start the server
# with tests/lib/harness.c.

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

# The test scripts' helpers below expect the script to define fail (print
# a message and exit 1) and T (its temporary directory), and to stop the
# processes listed in PIDS when it exits (stop_all).

# wait_until SECONDS WHAT CMD...: poll CMD every 100 ms; fail "WHAT: not
# within SECONDS s" if it never succeeds.
wait_until() {
    _secs=$1 _what=$2 _n=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        _n=$((_n + 1))
        [ "$_n" -lt $((_secs * 10)) ] || fail "$_what: not within $_secs s"
        sleep 0.1
    done
}

# run NAME CMD...: CMD in the background; stdout in $T/NAME.out, stderr in
# $T/NAME.err, pid in $T/NAME.pid, exit status in $T/NAME.rc when it ends.
# Both the watcher and CMD go into PIDS.
run() {
    _name=$1
    shift
    rm -f "$T/$_name.rc" "$T/$_name.pid"
    (
        "$@" >"$T/$_name.out" 2>"$T/$_name.err" &
        echo $! >"$T/$_name.pid"
        wait $!
        echo $? >"$T/$_name.rc"
    ) &
    PIDS="$PIDS $!"
    wait_until 5 "$_name started" test -s "$T/$_name.pid"
    PIDS="$PIDS $(cat "$T/$_name.pid")"
}

# stop_all TENTHS: SIGTERM to every process in PIDS, wait at most TENTHS
# tenths of a second for them to end, then SIGKILL to what is left.
stop_all() {
    for _p in $PIDS; do kill -TERM "$_p" 2>/dev/null; done
    _n=0
    while [ "$_n" -lt "$1" ]; do
        _alive=
        for _p in $PIDS; do kill -0 "$_p" 2>/dev/null && _alive=1; done
        [ -n "$_alive" ] || break
        sleep 0.1
        _n=$((_n + 1))
    done
    for _p in $PIDS; do kill -KILL "$_p" 2>/dev/null; done
}
