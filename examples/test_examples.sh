#!/bin/sh
# Run one example briefly against k8slease-testserver and check its output.
#
#   sh test_examples.sh elect|storage_master|seed_abi
#
# Environment: K8SLEASE_TESTSERVER (the server binary; default: the one in
# PATH) and EXAMPLE_ELECT, EXAMPLE_STORAGE_MASTER, EXAMPLE_SEED_ABI (the
# example binaries). Used by the build's ctests (label examples) and by
# scripts/check-packages.sh against the installed package. Every wait is a
# bounded poll that fails with a message, never a fixed sleep.
set -u

: "${K8SLEASE_TESTSERVER:=k8slease-testserver}"
unset KUBECONFIG KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT

# start_testserver, wait_until, run, stop_all: testserver.sh, installed
# beside this script with the examples, tests/lib/testserver.sh in the tree.
_lib=$(dirname "$0")
if [ -f "$_lib/testserver.sh" ]; then
    . "$_lib/testserver.sh"
else
    . "$_lib/../tests/lib/testserver.sh"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-examples.XXXXXX") || exit 1
PIDS=

cleanup() {
    stop_all 50
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
    echo "FAIL: $*"
    for f in "$T"/*.out "$T"/*.err; do
        [ -s "$f" ] || continue
        echo "--- ${f##*/}:"
        tail -n 30 "$f"
    done
    exit 1
}

# wait_line SECONDS NAME REGEX: a line of NAME's stdout matches REGEX.
wait_line() {
    wait_until "$1" "$2: a line matching '$3'" grep -Eq "$3" "$T/$2.out"
}

# stop NAME: SIGTERM, then expect exit status 0 within 20 s.
stop() {
    kill -TERM "$(cat "$T/$1.pid")" || fail "kill $1"
    wait_until 20 "$1 exits after SIGTERM" test -s "$T/$1.rc"
    [ "$(cat "$T/$1.rc")" = 0 ] || fail "$1 exited with status $(cat "$T/$1.rc")"
}

# epoch NAME REGEX: the number after "epoch=" on the last line matching REGEX.
epoch() {
    grep -E "$2" "$T/$1.out" | tail -n 1 | sed -n 's/.*epoch=\([0-9-]*\).*/\1/p'
}

start_server() {
    start_testserver "$T/ts" "$T/ts.out" "$T/ts.err" 15
    _rc=$?
    PIDS="$PIDS $TESTSERVER_PID"
    case $_rc in
    0) ;;
    1) fail "the test server exited before it was ready" ;;
    *) fail "ts: a line matching '^ready ': not within 15 s" ;;
    esac
    KUBECONFIG=$TESTSERVER_KUBECONFIG
    PORT=$TESTSERVER_PORT
    if [ -z "$KUBECONFIG" ] || [ -z "$PORT" ]; then fail "cannot parse the ready line"; fi
    export KUBECONFIG
}

# api METHOD PATH [JSON]: the test server's API (or its /testserver/v1
# control API) with its CA and token; the body on stdout.
api() {
    curl -sS --fail-with-body --cacert "$T/ts/ca.crt" -A k8slease-examples-test \
        -H "Authorization: Bearer $(cat "$T/ts/token")" -H 'Content-Type: application/json' \
        -X "$1" ${3:+--data "$3"} "https://127.0.0.1:$PORT$2"
}

pod_is_leader() {
    api GET "/api/v1/namespaces/default/pods/$1" | grep -Eq '"role": *"leader"'
}

pod_not_leader() {
    _body=$(api GET "/api/v1/namespaces/default/pods/$1") || return 1
    ! printf '%s' "$_body" | grep -Eq '"role": *"leader"'
}

# reelected NAME EPOCH: NAME's last "elected" line has an epoch above EPOCH.
reelected() {
    _e=$(epoch "$1" '^elected')
    [ "${_e:-0}" -gt "$2" ]
}

# ---- elect: elected, standby sees the leader, release hands over -----------
test_elect() {
    : "${EXAMPLE_ELECT:?path of the elect example}"
    start_server
    run a "$EXAMPLE_ELECT" default/example-elect a:9000
    wait_line 10 a '^elected epoch=[0-9]+$'
    ea=$(epoch a '^elected')
    run b "$EXAMPLE_ELECT" example-elect b:9000
    wait_line 10 b "^leader=a:9000 epoch=$ea\$"
    # The default lease is 15 s: b taking over within 10 s means a released.
    stop a
    grep -q '^released$' "$T/a.out" || fail "a did not print released"
    wait_line 10 b "^elected epoch=$((ea + 1))\$"
    stop b
    grep -q '^released$' "$T/b.out" || fail "b did not print released"
}

# ---- storage_master: standby, pod label, handover, loss and re-campaign ----
test_storage_master() {
    : "${EXAMPLE_STORAGE_MASTER:?path of the storage_master example}"
    command -v curl >/dev/null || fail "curl is needed"
    start_server
    for p in master-a master-b; do
        api POST /api/v1/namespaces/default/pods \
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$p\"},\"spec\":{\"containers\":[{\"name\":\"m\",\"image\":\"m\"}]}}" \
            >/dev/null || fail "create pod $p"
    done
    timing="--lease-duration-ms 3000 --renew-deadline-ms 2000 --retry-period-ms 500"
    # shellcheck disable=SC2086
    run a "$EXAMPLE_STORAGE_MASTER" --lease default/example-master --identity 10.0.0.1:9000 \
        --pod default/master-a --campaign-timeout-ms 500 $timing
    wait_line 10 a '^elected epoch=[0-9]+$'
    ea=$(epoch a '^elected')
    wait_until 10 "master-a labelled role=leader" pod_is_leader master-a
    # shellcheck disable=SC2086
    run b "$EXAMPLE_STORAGE_MASTER" --lease default/example-master --identity 10.0.0.2:9000 \
        --pod default/master-b --campaign-timeout-ms 500 $timing
    wait_line 10 b "^view leader=10.0.0.1:9000 epoch=$ea\$"
    wait_line 10 b "^standby leader=10.0.0.1:9000 epoch=$ea\$"
    pod_not_leader master-b || fail "master-b labelled while standby"

    # SIGTERM: a releases, removes its label, exits 0; b takes over.
    stop a
    grep -q '^stopped$' "$T/a.out" || fail "a did not print stopped"
    wait_line 10 b "^elected epoch=$((ea + 1))\$"
    wait_until 10 "master-b labelled role=leader" pod_is_leader master-b
    wait_until 10 "master-a label removed" pod_not_leader master-a

    # Renewals of b fail (HTTP 500 on its updates): the term ends after the
    # renew deadline, b removes its label and campaigns again; once the API
    # answers again it is elected with a greater epoch.
    api POST /testserver/v1/faults \
        '{"kind":"error","status":500,"match":{"verb":"update","user_agent":"10.0.0.2:9000"}}' \
        >/dev/null || fail "add fault"
    wait_line 15 b "^lost epoch=$((ea + 1))\$"
    wait_until 10 "master-b label removed after loss" pod_not_leader master-b
    api DELETE /testserver/v1/faults >/dev/null || fail "delete faults"
    wait_until 15 "b re-elected with an epoch above $((ea + 1))" reelected b $((ea + 1))
    wait_until 10 "master-b labelled again" pod_is_leader master-b
    stop b
    grep -q '^stopped$' "$T/b.out" || fail "b did not print stopped"
}

# ---- seed_abi: the Go library's users' loop on the drop-in library ---------
test_seed_abi() {
    : "${EXAMPLE_SEED_ABI:?path of the seed_abi example}"
    start_server
    run a "$EXAMPLE_SEED_ABI" default example-seed a:9000 2
    wait_line 10 a '^leader epoch=[0-9]+$'
    ea=$(epoch a '^leader')
    run b "$EXAMPLE_SEED_ABI" default example-seed b:9000 2
    wait_line 15 b "^standby leader=a:9000 epoch=$ea\$"
    stop a
    grep -q '^stopped$' "$T/a.out" || fail "a did not print stopped"
    wait_line 15 b "^leader epoch=$((ea + 1))\$"
    stop b
    grep -q '^stopped$' "$T/b.out" || fail "b did not print stopped"
}

case "${1:-}" in
elect | storage_master | seed_abi) "test_$1" ;;
*)
    echo "usage: $0 elect|storage_master|seed_abi" >&2
    exit 2
    ;;
esac
echo "ok: example $1"
