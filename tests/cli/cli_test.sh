#!/bin/sh
# CLI tests: the built k8slease against k8slease-testserver.
#
#   sh cli_test.sh TEST     (K8SLEASE, K8SLEASE_TESTSERVER and CLI_JSON set)
#
# Each TEST starts its own test server on a free port. Every wait is a
# bounded poll that fails with a message, never a fixed sleep. Leases are
# short (3s/2s/500ms); where a check must tell a release from an expiry,
# the lease is long (30 s) and the wait 10 s, so no check is tighter than
# 10x what it expects.
set -u

: "${K8SLEASE:?path of k8slease}"
: "${K8SLEASE_TESTSERVER:?path of k8slease-testserver}"
: "${CLI_JSON:?path of cli_json}"
unset KUBECONFIG KUBERNETES_SERVICE_HOST POD_NAME POD_NAMESPACE
unset ETCDCTL_ENDPOINTS ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY K8SLEASE_ETCD_PASSWORD
T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-cli.XXXXXX") || exit 1
export T K8SLEASE CLI_JSON
PIDS=
FAST="--lease-duration 3s --renew-deadline 2s --retry-period 500ms"
LONG="--lease-duration 30s --renew-deadline 20s --retry-period 1s"

cleanup() {
    # An etcd that etcd.sh started but did not report (it failed, or we were
    # interrupted meanwhile) is stopped too.
    for f in "$T"/etcd*/etcd.pid; do
        [ ! -s "$f" ] || PIDS="$PIDS $(cat "$f")"
    done
    # TERM first: a k8slease elect stops its CMD's process group.
    stop_all 30
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
    echo "FAIL: $*"
    for f in "$T"/*.out "$T"/*.err "$T"/etcd*/etcd.log; do
        [ -s "$f" ] || continue
        echo "--- ${f##*/}:"
        tail -n 30 "$f"
    done
    exit 1
}

# The test server (start_testserver) and wait_until, run, stop_all:
# tests/lib/testserver.sh.
. "$(dirname "$0")/../lib/testserver.sh"

sig() { kill -"$1" "$(cat "$T/$2.pid")" || fail "kill -$1 $2"; }

# clean FILE: no report of a sanitizer build (leak, bad access, UB) in it.
clean() {
    ! grep -q 'Sanitizer\|runtime error:' "$1" || fail "sanitizer report in ${1##*/}"
}

# finished NAME SECONDS [STATUS]: wait for NAME to exit; check its status.
finished() {
    wait_until "$2" "$1 exits" test -s "$T/$1.rc"
    clean "$T/$1.err"
    _rc=$(cat "$T/$1.rc")
    [ $# -lt 3 ] || [ "$_rc" = "$3" ] || fail "$1 exited with status $_rc, expected $3"
}

# expect STATUS CMD...: run CMD, check its status; output in $T/last.out
# and $T/last.err.
expect() {
    _want=$1
    shift
    "$@" >"$T/last.out" 2>"$T/last.err"
    _rc=$?
    clean "$T/last.err"
    [ "$_rc" = "$_want" ] || fail "status $_rc, expected $_want: $*"
}

# has FILE TEXT / lacks FILE TEXT: fixed strings.
has() { grep -qF -- "$2" "$1" || fail "${1##*/} lacks \"$2\""; }
lacks() { ! grep -qF -- "$2" "$1" || fail "${1##*/} has \"$2\""; }
# has_line FILE LINE: an exact line.
has_line() { grep -qxF -- "$2" "$1"; }
lines() { wc -l <"$1" | tr -d ' '; }
# bad MSG ARGS...: k8slease ARGS exits 2 with one line on stderr saying MSG.
bad() {
    _msg=$1
    shift
    expect 2 "$K8SLEASE" "$@"
    has "$T/last.err" "$_msg"
    [ "$(lines "$T/last.err")" = 1 ] || fail "more than one line of error: $*"
}
at_least_lines() { [ -f "$1" ] && [ "$(lines "$1")" -ge "$2" ]; }
# gone PID: no such process, or a zombie (orphans may not be reaped here).
gone() {
    ! kill -0 "$1" 2>/dev/null ||
        { [ -r "/proc/$1/stat" ] && sed 's/.*) //' "/proc/$1/stat" | grep -q '^Z'; }
}
# same ACTUAL EXPECTED WHAT
same() { [ "$1" = "$2" ] || fail "$3: got \"$1\", expected \"$2\""; }

# start_server [ARGS...]: ARGS go to the test server.
start_server() {
    start_testserver "$T/server" "$T/server.ready" "$T/server.err" 10 "$@"
    _rc=$?
    PIDS="$PIDS $TESTSERVER_PID"
    [ "$_rc" = 0 ] || fail "test server ready: not within 10 s"
    KUBECONFIG=$TESTSERVER_KUBECONFIG
    SERVER_PORT=$TESTSERVER_PORT
    export KUBECONFIG
}

# api METHOD PATH [BODY]: a request to the test server, as its admin.
api() {
    curl -sS --cacert "$T/server/ca.crt" -H "Authorization: Bearer $(cat "$T/server/token")" \
        -H 'Content-Type: application/json' -X "$1" ${3:+-d "$3"} \
        "https://127.0.0.1:$SERVER_PORT$2"
}

create_pod() {
    api POST /api/v1/namespaces/default/pods \
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"}}" >/dev/null ||
        fail "cannot create pod $1"
}

# label_of POD KEY: the value, or <missing>.
label_of() { api GET "/api/v1/namespaces/default/pods/$1" | "$CLI_JSON" "metadata.labels.$2"; }
label_is() { [ "$(label_of "$1" "$2")" = "$3" ]; }

# fault_hits ID N: the test server's fault rule ID has hit N times.
fault_hits() { api GET "/testserver/v1/faults/$1" | grep -Eq "\"hits\": *$2,"; }

# holder_of LEASE: the holder's identity ("" when none).
holder_of() { "$K8SLEASE" holder --lease "$1" --json | "$CLI_JSON" holder; }
holder_is() { [ "$(holder_of "$1")" = "$2" ]; }

# http_port NAME: the port `elect --http 127.0.0.1:0` reported.
http_port() {
    wait_until 10 "$1 listens" grep -q 'http: listening on' "$T/$1.err"
    sed -n 's/.*http: listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$T/$1.err"
}

# A CMD for elect: records its start (epoch identity lease) in $T/NAME.starts
# and, on SIGTERM, "epoch holder-at-that-moment" in $T/NAME.stops.
write_child() {
    cat >"$T/$1.sh" <<EOF
#!/bin/sh
echo "\$K8SLEASE_EPOCH \$K8SLEASE_IDENTITY \$K8SLEASE_LEASE" >>"$T/$1.starts"
trap 'echo "\$K8SLEASE_EPOCH \$("\$K8SLEASE" holder --lease "\${K8SLEASE_LEASE#*/}" --json |
    "\$CLI_JSON" holder)" >>"$T/$1.stops"; exit 0' TERM
n=0
while [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
EOF
}

# ---- tests ------------------------------------------------------------------

test_usage() {
    for c in "" elect holder watch release label demo; do
        # shellcheck disable=SC2086
        expect 0 "$K8SLEASE" $c --help
        has "$T/last.out" "usage: k8slease"
    done
    for c in "" elect holder watch release; do
        # shellcheck disable=SC2086
        expect 0 "$K8SLEASE" $c --help
        has "$T/last.out" "--backend"
        has "$T/last.out" "--etcd-endpoints"
    done
    expect 0 "$K8SLEASE" elect --help
    has "$T/last.out" "--crash-failover"
    has "$T/last.out" "--container NAME"
    expect 0 "$K8SLEASE" --version
    has "$T/last.out" "k8slease 0."
    expect 0 "$K8SLEASE" watch --version
    has "$T/last.out" "k8slease 0."
    expect 2 "$K8SLEASE"
    expect 2 "$K8SLEASE" frob
    has "$T/last.err" 'unknown command "frob"'

    # Exit 2 and one line that names the flag and the rule (bad, above).
    bad "k8slease elect: --lease is required" elect
    bad "k8slease holder: --lease is required" holder
    bad "--renew-deadline 20s: must be less than --lease-duration (15s)" \
        elect --lease x --renew-deadline 20s
    bad "--lease-duration 5s: must be greater than --renew-deadline (10s)" \
        elect --lease x --lease-duration 5s
    bad "--retry-period 9s: 1.2 x --retry-period must be less than --renew-deadline (10s)" \
        elect --lease x --retry-period 9s
    bad "--renew-deadline 2s: must be greater than 1.2 x --retry-period (2s)" \
        elect --lease x --renew-deadline 2s
    bad "--lease-duration 0s: must be greater than 0" elect --lease x --lease-duration 0s
    bad "--grace 10x: not a duration" elect --lease x --grace 10x
    bad "--grace -1s: must not be negative" elect --lease x --grace=-1s
    bad "--retry-period 15: not a duration" elect --lease x --retry-period 15
    bad "--lease Foo: lease name must be a lowercase RFC 1123 subdomain" elect --lease Foo
    bad "--lease a/b/c: must be NAME or NAMESPACE/NAME" holder --lease a/b/c
    bad "--lease NS/x: namespace must be a lowercase RFC 1123 label" watch --lease NS/x
    bad "--namespace a_b: namespace must be" watch --lease x --namespace a_b
    bad "--http localhost:4040: must be HOST:PORT with a numeric" elect --lease x \
        --http localhost:4040
    bad "--http 127.0.0.1:70000: must be HOST:PORT" elect --lease x --http 127.0.0.1:70000
    bad "--http 127.0.0.1: must be HOST:PORT" elect --lease x --http 127.0.0.1
    bad "--label role: must be KEY=VALUE" elect --lease x --label-pod p --label role
    bad "--label needs --label-pod" elect --lease x --label role=leader
    bad "--label-pod P: pod name must be" elect --lease x --label-pod P
    bad "--identity needs a value" elect --lease x --identity --unique
    bad "k8slease elect: --binary-version needs --coordinated" elect --lease x \
        --binary-version 1.36.0
    bad "k8slease elect: --emulation-version needs --coordinated" elect --lease x \
        --emulation-version 1.35.0
    bad "k8slease elect: --strategy needs --coordinated" elect --lease x \
        --strategy OldestEmulationVersion
    bad "k8slease elect: --coordinated needs --binary-version V" elect --lease x --coordinated
    bad "--binary-version : must not be empty" elect --lease x --coordinated --binary-version=
    bad "--coordinated takes no value" elect --lease x --coordinated=1 --binary-version 1.36.0
    # --crash-failover: our Pod from $POD_NAME/$POD_NAMESPACE (the Downward API).
    bad "k8slease elect: --crash-failover needs \$POD_NAME (the Pod this process runs in: set it from the Downward API, metadata.name)" \
        elect --lease x --crash-failover
    POD_NAME='' bad "k8slease elect: --crash-failover needs \$POD_NAME" elect --lease x \
        --crash-failover
    bad "k8slease elect: --container needs --crash-failover" elect --lease x --container main
    POD_NAME=p bad "k8slease elect: --container needs --crash-failover" elect --lease x \
        --container main
    POD_NAME=p bad "k8slease elect: --crash-failover: not with --coordinated (kube-apiserver's controller picks the holder)" \
        elect --lease x --identity i --crash-failover --coordinated --binary-version 1.36.0
    POD_NAME=P bad "k8slease elect: --crash-failover: \$POD_NAME \"P\": pod name must be a lowercase RFC 1123 subdomain" \
        elect --lease x --crash-failover
    POD_NAME=p POD_NAMESPACE=A_B bad "k8slease elect: --crash-failover: \$POD_NAMESPACE \"A_B\": namespace must be a lowercase RFC 1123 label" \
        elect --lease x --crash-failover
    POD_NAME=p bad "k8slease elect: --container Main: container name must be a lowercase RFC 1123 label" \
        elect --lease x --crash-failover --container Main
    POD_NAME=p bad "--container needs a value" elect --lease x --crash-failover --container
    POD_NAME=p bad "--crash-failover takes no value" elect --lease x --crash-failover=1
    bad "--log-level chatty: must be error, warn, info or debug" holder --lease x \
        --log-level chatty
    bad "unknown flag --frob" release --lease x --frob
    bad "--identity is required" release --lease x
    bad "--lease needs a value" holder --lease
    bad "--json takes no value" holder --lease x --json=1
    bad 'unexpected argument "extra"' holder --lease x extra
    bad "--pod is required" label set role=x
    bad 'expected "set" or "clear"' label frob
    bad "role: must be KEY=VALUE" label set --pod p role
    bad "role=x: must be KEY (clear takes no value)" label clear --pod p role=x
    bad "a label value must be" label set --pod p role=-x
    bad "a label key must be" label set --pod p "bad key=x"

    # Valid Go-style durations pass validation and fail later, on the
    # missing configuration: status 1, with the file named.
    HOME=$T/nohome expect 1 "$K8SLEASE" elect --lease x --lease-duration 1m30s \
        --renew-deadline 1.25m --retry-period 500ms
    HOME=$T/nohome expect 1 "$K8SLEASE" elect --lease x --lease-duration 2m \
        --renew-deadline 1m30s --retry-period 1.5s --grace 0
    expect 1 "$K8SLEASE" holder --lease x --kubeconfig "$T/none.yaml"
    has "$T/last.err" "$T/none.yaml"
}

test_holder() {
    start_server
    expect 4 "$K8SLEASE" holder --lease h1
    has "$T/last.err" "lease default/h1 not found"

    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease h1 --identity alice $FAST --no-release
    wait_until 10 "alice elected" has_line "$T/a.out" "elected epoch=0"
    expect 0 "$K8SLEASE" holder --lease default/h1
    has "$T/last.out" "holder:         alice"
    has "$T/last.out" "expired:        no"
    expect 0 "$K8SLEASE" holder --lease h1 --namespace default --json
    same "$("$CLI_JSON" lease holder epoch expired lease_duration_seconds <"$T/last.out" |
        tr '\n' ' ')" "default/h1 alice 0 false 3 " "holder --json"
    "$CLI_JSON" renew_time acquire_time resource_version <"$T/last.out" >/dev/null ||
        fail "holder --json lacks a field"
    expect 4 "$K8SLEASE" holder --lease other/h1
    expect 0 "$K8SLEASE" holder --lease h1 --kubeconfig "$KUBECONFIG" --log-level debug
    # The API server's connection: the native transport by default, libcurl
    # on request; any other value of the variable is refused, named.
    has "$T/last.err" "a new HTTP/2 connection (native)"
    expect 0 env K8SLEASE_TRANSPORT=libcurl "$K8SLEASE" holder --lease h1 --log-level debug
    lacks "$T/last.err" "(native)"
    expect 1 env K8SLEASE_TRANSPORT=curl "$K8SLEASE" holder --lease h1
    has "$T/last.err" 'K8SLEASE_TRANSPORT: "curl" is neither "native" nor "libcurl"'

    # SIGKILL: nobody releases it; once expired, status 3 and "expired".
    sig KILL a
    finished a 10
    wait_until 20 "lease h1 expires" sh -c '"$K8SLEASE" holder --lease h1 >/dev/null; [ $? = 3 ]'
    expect 3 "$K8SLEASE" holder --lease h1 --json
    same "$("$CLI_JSON" holder expired <"$T/last.out" | tr '\n' ' ')" "alice true " "expired"

    # Released: no holder, status 3.
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease h1 --identity bob $FAST
    wait_until 10 "bob elected" grep -q "^elected" "$T/b.out"
    sig TERM b
    finished b 10 0
    expect 3 "$K8SLEASE" holder --lease h1
    has "$T/last.out" "holder:         (none)"
}

test_release() {
    start_server
    expect 4 "$K8SLEASE" release --lease r1 --identity x
    has "$T/last.err" "lease default/r1 not found"

    # Long leases: a takeover within 10 s is a release, not an expiry.
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease r1 --identity alice $LONG
    wait_until 10 "alice elected" has_line "$T/a.out" "elected epoch=0"
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease r1 --identity bob $LONG
    wait_until 10 "bob sees alice" has_line "$T/b.out" "leader=alice epoch=0"

    expect 1 "$K8SLEASE" release --lease r1 --identity bob
    has "$T/last.err" 'lease default/r1 is held by "alice", not "bob": not released'
    has "$T/last.err" "--force"
    holder_is r1 alice || fail "a refused release changed the holder"

    expect 0 "$K8SLEASE" release --lease r1 --identity alice
    has "$T/last.out" 'released lease default/r1 (holder "alice", epoch 0)'
    wait_until 10 "alice steps down" has_line "$T/a.out" "lost"
    wait_until 10 "bob takes the released lease" has_line "$T/b.out" "elected epoch=1"

    # --force releases whoever holds it. Alice, whose term ended on the
    # Lease she released, campaigned again once her watch between terms saw
    # bob take it (nothing to take back), and takes it; bob, whose term ends
    # on a free Lease that nobody else takes, waits a lease duration (30 s)
    # before campaigning again.
    expect 0 "$K8SLEASE" release --lease r1 --force
    has "$T/last.out" 'released lease default/r1 (holder "bob", epoch 1)'
    wait_until 10 "bob steps down" has_line "$T/b.out" "lost"
    wait_until 10 "alice takes it again" has_line "$T/a.out" "elected epoch=2"
    holder_is r1 alice || fail "holder is $(holder_of r1), not alice"

    sig TERM a
    sig TERM b
    finished a 10 0
    finished b 10 0
    expect 0 "$K8SLEASE" release --lease r1 --identity alice
    has "$T/last.out" "lease default/r1 has no holder: nothing to release"
}

test_elect_events() {
    start_server
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease e1 --identity alice $FAST
    wait_until 10 "alice elected" has_line "$T/a.out" "elected epoch=0"
    wait_until 10 "alice sees herself" has_line "$T/a.out" "leader=alice epoch=0"
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease e1 --identity bob $FAST --json
    wait_until 10 "bob sees alice" grep -q '"leader":"alice"' "$T/b.out"
    same "$("$CLI_JSON" -l event leader epoch <"$T/b.out" | head -n 1)" \
        "$(printf 'leader\talice\t0')" "bob's first JSON event"

    sig TERM a
    finished a 10 0
    has_line "$T/a.out" "lost" || fail "alice did not report the loss"
    wait_until 10 "bob elected" grep -q '"event":"elected"' "$T/b.out"
    same "$(grep '"event":"elected"' "$T/b.out" | "$CLI_JSON" -l epoch)" 1 "bob's epoch"
    "$CLI_JSON" -l time event <"$T/b.out" >/dev/null || fail "bad JSON lines from bob"
    holder_is e1 bob || fail "holder is not bob"

    # Identity from $POD_NAME, with --unique.
    # shellcheck disable=SC2086
    run c env POD_NAME=pod-7 "$K8SLEASE" elect --lease e1 --unique $FAST
    wait_until 10 "carol sees bob" has_line "$T/c.out" "leader=bob epoch=1"
    sig TERM b
    finished b 10 0
    wait_until 10 "pod-7 elected" grep -q "^elected" "$T/c.out"
    holder_of e1 | grep -qx 'pod-7-[0-9a-f]\{8\}' || fail "identity is $(holder_of e1)"

    # Losing the lease (a forced release): a new elector campaigns again.
    expect 0 "$K8SLEASE" release --lease e1 --force
    wait_until 10 "pod-7 loses" has_line "$T/c.out" "lost"
    wait_until 10 "pod-7 elected again" sh -c '[ "$(grep -c "^elected" "$T/c.out")" -ge 2 ]'

    # --once: exit 3 when the term ends.
    # shellcheck disable=SC2086
    run d "$K8SLEASE" elect --lease e2 --identity dan $FAST --once
    wait_until 10 "dan elected" grep -q "^elected" "$T/d.out"
    expect 0 "$K8SLEASE" release --lease e2 --force
    finished d 10 3
    has_line "$T/d.out" "lost" || fail "dan did not report the loss"

    # --no-release: SIGTERM leaves the (long) lease held.
    # shellcheck disable=SC2086
    run f "$K8SLEASE" elect --lease e3 --identity frank $LONG --no-release
    wait_until 10 "frank elected" grep -q "^elected" "$T/f.out"
    sig TERM f
    finished f 10 0
    expect 0 "$K8SLEASE" holder --lease e3
    has "$T/last.out" "holder:         frank"
    sig TERM c
    finished c 10 0
}

test_elect_cmd() {
    start_server
    write_child a
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease c1 --identity alice $FAST -- sh "$T/a.sh"
    wait_until 10 "CMD started" test -s "$T/a.starts"
    same "$(cat "$T/a.starts")" "0 alice default/c1" "CMD's environment"
    has "$T/a.err" "k8slease elect: elected epoch=0"
    has "$T/a.err" "k8slease elect: started pid="
    [ ! -s "$T/a.out" ] || fail "events on CMD's stdout"

    # Loss (a forced release): CMD stopped; next term, CMD runs again.
    expect 0 "$K8SLEASE" release --lease c1 --force
    wait_until 10 "CMD stopped on loss" test -s "$T/a.stops"
    wait_until 10 "CMD started for the next term" at_least_lines "$T/a.starts" 2
    [ "$(sed -n 2p "$T/a.starts" | cut -d' ' -f1)" -ge 1 ] || fail "epoch did not grow"
    has "$T/a.err" "k8slease elect: lost"
    has "$T/a.err" "k8slease elect: stopping pid="
    has "$T/a.err" "k8slease elect: exited pid="

    # SIGTERM: CMD stopped while we still hold the lease, then released.
    sig TERM a
    finished a 15 0
    same "$(sed -n 2p "$T/a.stops" | cut -d' ' -f2)" alice "holder while CMD stops"
    expect 3 "$K8SLEASE" holder --lease c1

    # Loss by renew deadline (the API holds lease updates for 2.5 s): CMD is
    # stopped while the Lease still names us (its trap watches the holder
    # for 2 s), and the Lease is released only once CMD is gone.
    cat >"$T/slow.sh" <<EOF
echo "\$K8SLEASE_EPOCH" >>"$T/slow.starts"
trap 'i=0
    while [ \$i -lt 10 ]; do
        "\$K8SLEASE" holder --lease c5 --json | "\$CLI_JSON" holder >>"$T/slow.stops"
        sleep 0.2; i=\$((i + 1))
    done; exit 0' TERM
n=0
while [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
EOF
    run w "$K8SLEASE" watch --lease c5
    # shellcheck disable=SC2086
    run e "$K8SLEASE" elect --lease c5 --identity erin $FAST -- sh "$T/slow.sh"
    wait_until 10 "slow CMD started" test -s "$T/slow.starts"
    api POST /testserver/v1/faults '{"kind":"hang","duration_ms":2500,"match":{"verb":"update"}}' \
        >/dev/null || fail "cannot install the fault"
    wait_until 10 "erin loses at the renew deadline" grep -q "k8slease elect: lost" "$T/e.err"
    wait_until 10 "slow CMD exits" grep -q "exited pid=" "$T/e.err"
    same "$(sort -u "$T/slow.stops" | tr '\n' ' ')" "erin " "holder while CMD stops"
    wait_until 10 "release once CMD is gone" has_line "$T/w.out" "released epoch=0"
    wait_until 10 "a new term and CMD" at_least_lines "$T/slow.starts" 2
    sig TERM e
    finished e 15 0
    sig TERM w
    finished w 10 0

    # CMD exits by itself: release, and its status is ours.
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease c2 --identity bob $FAST -- sh -c 'exit 7'
    finished b 10 7
    has "$T/b.err" "exited pid="
    expect 3 "$K8SLEASE" holder --lease c2
    # shellcheck disable=SC2086
    run b2 "$K8SLEASE" elect --lease c2 --identity bob $FAST -- sh -c 'kill -9 $$'
    finished b2 10 137

    # CMD ignores SIGTERM: SIGKILL after --grace, for its whole process group.
    cat >"$T/stubborn.sh" <<EOF
trap '' TERM
echo \$\$ >"$T/stubborn.pid"
sleep 60 &
echo \$! >"$T/stubborn-child.pid"
n=0
while [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
EOF
    # shellcheck disable=SC2086
    run c "$K8SLEASE" elect --lease c3 --identity carol $FAST --grace 1s -- sh "$T/stubborn.sh"
    wait_until 10 "stubborn CMD started" test -s "$T/stubborn-child.pid"
    sig TERM c
    finished c 15 0
    has "$T/c.err" "killed pid="
    wait_until 5 "CMD killed" gone "$(cat "$T/stubborn.pid")"
    wait_until 5 "CMD's child killed" gone "$(cat "$T/stubborn-child.pid")"

    # CMD cannot be run: 127, as a shell; JSON events on stderr.
    # shellcheck disable=SC2086
    run d "$K8SLEASE" elect --lease c4 --identity dan $FAST --json -- "$T/no-such-cmd"
    finished d 10 127
    has "$T/d.err" "cannot run $T/no-such-cmd"
    grep '^{' "$T/d.err" | "$CLI_JSON" -l event >/dev/null || fail "bad JSON events"
    expect 3 "$K8SLEASE" holder --lease c4

    # Each event line leaves in one write(2), whatever else writes to the
    # same stderr (library log lines from the loop thread, CMD): a reader
    # of the lines never gets one torn. strace shows the writes.
    # LeakSanitizer cannot run under ptrace (it stops the process with a
    # fatal error at exit): leak checks are off for the traced process only.
    command -v strace >/dev/null || fail "strace not found (scripts/install-deps.sh installs it)"
    # shellcheck disable=SC2086
    run s env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        strace -f -qq -e trace=write -e signal=none -s 300 -o "$T/s.strace" \
        "$K8SLEASE" elect --lease c6 --identity sam $FAST --log-level debug -- \
        sh -c 'echo from-cmd >&2; exec sleep 60'
    wait_until 20 "sam's CMD started" grep -q "^from-cmd" "$T/s.err"
    for line in 'k8slease elect: elected epoch=0' 'k8slease elect: leader=sam epoch=0'; do
        grep -qF "write(2, \"$line\\n\", $((${#line} + 1)))" "$T/s.strace" ||
            fail "\"$line\" was not written whole: $(grep -F "${line#k8slease elect: }" "$T/s.strace")"
    done
    kill -TERM "$(awk '/k8slease elect: elected/ { print $1; exit }' "$T/s.strace")" ||
        fail "no pid of sam"
    finished s 15 0
}

test_elect_signals() {
    start_server
    write_child a
    # Long leases: bob's takeover within 10 s means alice released.
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease s1 --identity alice $LONG -- sh "$T/a.sh"
    wait_until 10 "alice's CMD started" test -s "$T/a.starts"
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease s1 --identity bob $LONG
    wait_until 10 "bob sees alice" has_line "$T/b.out" "leader=alice epoch=0"
    sig TERM a
    finished a 15 0
    test -s "$T/a.stops" || fail "CMD was not stopped"
    wait_until 10 "bob takes over at once" has_line "$T/b.out" "elected epoch=1"
    holder_is s1 bob || fail "holder is not bob"
    sig TERM b
    finished b 10 0

    # SIGHUP too; and SIGINT (a shell's background jobs ignore SIGINT, and
    # k8slease keeps an ignored SIGINT ignored: give it back its default).
    for s in HUP INT; do
        lease=s-$(echo "$s" | tr 'A-Z' 'a-z')
        if [ "$s" = INT ]; then
            env --default-signal=INT true 2>/dev/null || {
                echo "skip: SIGINT (env --default-signal unsupported)"
                continue
            }
            # shellcheck disable=SC2086
            run c env --default-signal=INT "$K8SLEASE" elect --lease "$lease" --identity carol $LONG
        else
            # shellcheck disable=SC2086
            run c "$K8SLEASE" elect --lease "$lease" --identity carol $LONG
        fi
        wait_until 10 "carol elected" grep -q "^elected" "$T/c.out"
        sig "$s" c
        finished c 10 0
        has_line "$T/c.out" "lost" || fail "no loss reported after SIG$s"
        expect 3 "$K8SLEASE" holder --lease "$lease"
    done

    # A second signal does not wait for --grace.
    cat >"$T/stubborn.sh" <<EOF
trap '' TERM
echo \$\$ >"$T/stubborn.pid"
n=0
while [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
EOF
    # shellcheck disable=SC2086
    run e "$K8SLEASE" elect --lease s2 --identity eve $FAST --grace 100s -- sh "$T/stubborn.sh"
    wait_until 10 "stubborn CMD started" test -s "$T/stubborn.pid"
    sig TERM e
    wait_until 10 "SIGTERM sent to CMD" grep -q "stopping pid=" "$T/e.err"
    sig TERM e
    finished e 10 0
    has "$T/e.err" "killed pid="
}

test_watch() {
    start_server
    run w "$K8SLEASE" watch --lease w1
    run j "$K8SLEASE" watch --lease default/w1 --json
    wait_until 10 "watch: absent" has_line "$T/w.out" "absent"
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease w1 --identity alice $FAST
    wait_until 10 "watch sees alice" has_line "$T/w.out" "leader=alice epoch=0"
    # Renewals (renewTime moves, 500 ms apart) print nothing.
    wait_until 10 "alice renews" sh -c \
        '"$K8SLEASE" holder --lease w1 --json | "$CLI_JSON" acquire_time renew_time |
         uniq | wc -l | grep -qx 2'
    same "$(lines "$T/w.out")" 2 "watch lines after a renewal"
    sig TERM a
    finished a 10 0
    wait_until 10 "watch sees the release" has_line "$T/w.out" "released epoch=0"
    wait_until 10 "JSON watch sees the release" at_least_lines "$T/j.out" 3
    sig TERM w
    finished w 10 0
    same "$(tr '\n' ' ' <"$T/w.out")" "absent leader=alice epoch=0 released epoch=0 " "watch lines"
    same "$("$CLI_JSON" -l event <"$T/j.out" | tr '\n' ' ')" "absent leader released " \
        "watch --json events"
    same "$(sed -n 2p "$T/j.out" | "$CLI_JSON" leader epoch | tr '\n' ' ')" "alice 0 " \
        "watch --json leader"
    sig HUP j
    finished j 10 0
    if env --default-signal=INT true 2>/dev/null; then
        run i env --default-signal=INT "$K8SLEASE" watch --lease w1
        wait_until 10 "watch started" test -s "$T/i.out"
        sig INT i
        finished i 10 0
    fi
}

test_label() {
    start_server
    create_pod p1
    expect 0 "$K8SLEASE" label set --pod p1 role=leader
    has "$T/last.out" "pod default/p1: label role=leader set"
    label_is p1 role leader || fail "label not set"
    expect 0 "$K8SLEASE" label clear --pod default/p1 role
    label_is p1 role "<missing>" || fail "label not removed"
    expect 4 "$K8SLEASE" label set --pod nosuch role=x
    has "$T/last.err" "pod default/nosuch not found"

    # elect --label-pod: on the leader's pod only, while it leads.
    create_pod p2
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease l1 --identity alice $FAST --label-pod p1 --label role=primary
    wait_until 10 "alice labels her pod" label_is p1 role primary
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease l1 --identity bob $FAST --label-pod default/p2 \
        --label role=primary --log-level info
    wait_until 10 "bob sees alice" has_line "$T/b.out" "leader=alice epoch=0"
    label_is p2 role "<missing>" || fail "a follower labelled its pod"
    sig TERM a
    finished a 10 0
    label_is p1 role "<missing>" || fail "label left after SIGTERM"
    wait_until 10 "the label moves to bob's pod" label_is p2 role primary

    # Loss (a forced release): bob's label is removed; he may win again.
    expect 0 "$K8SLEASE" release --lease l1 --force
    wait_until 10 "bob loses" has_line "$T/b.out" "lost"
    wait_until 10 "bob removes the label" grep -q "label role=primary: removed" "$T/b.err"
    sig TERM b
    finished b 10 0
    label_is p2 role "<missing>" || fail "label left after SIGTERM"

    # A stale label (from a leader that crashed) is removed at start.
    expect 0 "$K8SLEASE" label set --pod p2 role=primary
    # shellcheck disable=SC2086
    run c "$K8SLEASE" elect --lease l2 --identity carol $FAST --label-pod p1 --label role=primary
    wait_until 10 "carol labels her pod" label_is p1 role primary
    # shellcheck disable=SC2086
    run d "$K8SLEASE" elect --lease l2 --identity dan $FAST --label-pod p2 --label role=primary
    wait_until 10 "dan sees carol" grep -q "^leader=carol" "$T/d.out"
    wait_until 10 "dan removes the stale label" label_is p2 role "<missing>"
    sig TERM d
    sig TERM c
    finished d 10 0
    finished c 10 0

    # Retried until it converges: the pod appears after the election.
    # shellcheck disable=SC2086
    run e "$K8SLEASE" elect --lease l3 --identity eve $FAST --label-pod p3
    wait_until 10 "eve elected" grep -q "^elected" "$T/e.out"
    wait_until 10 "eve reports the failure" grep -q "label role=leader: .*retrying in" "$T/e.err"
    create_pod p3
    wait_until 20 "label set once the pod exists" label_is p3 role leader
    sig TERM e
    finished e 10 0

    # The term ends while the PATCH that sets the label is on its way (held
    # by the server until CMD has exited): the label must not stay behind.
    create_pod p4
    mkfifo "$T/go"
    # shellcheck disable=SC2086
    run h "$K8SLEASE" elect --lease l4 --identity hal $LONG
    wait_until 10 "hal elected" grep -q "^elected" "$T/h.out"
    # shellcheck disable=SC2086
    run g "$K8SLEASE" elect --lease l4 --identity gus $LONG --label-pod p4 --log-level debug \
        -- sh -c "read -r go <'$T/go'; exit 5"
    wait_until 10 "gus's first removal" grep -q "pod default/p4 label role=leader: removed" "$T/g.err"
    hold=$(api POST /testserver/v1/faults '{"kind":"hang",
        "match":{"verb":"patch","path_prefix":"/api/v1/namespaces/default/pods/p4"}}' |
        sed -n 's/^ *"id": *\([0-9]*\),$/\1/p')
    [ -n "$hold" ] || fail "cannot install the fault"
    sig TERM h
    finished h 10 0
    wait_until 10 "gus's label PATCH held" fault_hits "$hold" 1
    timeout 10 sh -c "echo go >'$T/go'" || fail "gus's CMD does not read its fifo"
    wait_until 10 "gus waits for the held PATCH" grep -q "label role=leader: waiting for the change on its way" "$T/g.err"
    api DELETE "/testserver/v1/faults/$hold" >/dev/null || fail "cannot end the fault"
    finished g 20 5
    grep -q "label role=leader: set" "$T/g.err" || fail "the held PATCH never set the label"
    label_is p4 role "<missing>" || fail "label left on p4 after gus's term ended"
}

test_sidecar() {
    start_server
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect --lease m1 --identity alice $FAST --http 127.0.0.1:0
    pa=$(http_port a)
    wait_until 10 "alice elected" grep -q "^elected" "$T/a.out"
    base=http://127.0.0.1:$pa

    same "$(curl -sS "$base/healthz")" ok "/healthz"
    curl -sS -o /dev/null -w '%{http_code}' "$base/healthz" | grep -qx 200 || fail "/healthz"
    same "$(curl -sS "$base/readyz")" ok "/readyz without handoff"
    curl -sS "$base/leader" >"$T/leader.json"
    same "$("$CLI_JSON" lease backend identity holder epoch is_leader <"$T/leader.json" |
        tr '\n' ' ')" "default/m1 k8s alice alice 0 true " "/leader"
    left=$("$CLI_JSON" renew_deadline_ms_left <"$T/leader.json")
    [ "$left" -gt 0 ] && [ "$left" -le 2000 ] || fail "renew_deadline_ms_left $left"
    same "$(curl -sS "$base/" | "$CLI_JSON" name)" alice "/ (legacy leader-elector)"

    curl -sS "$base/metrics" >"$T/metrics.txt"
    for m in 'leader_election_master_status{name="m1"} 1' \
        'leader_election_slowpath_total{name="m1"} ' \
        '# TYPE k8slease_renew_duration_seconds histogram' \
        'k8slease_renew_duration_seconds_bucket{name="m1",le="0.001"} ' \
        'k8slease_renew_duration_seconds_bucket{name="m1",le="2.5"} ' \
        'k8slease_renew_duration_seconds_bucket{name="m1",le="+Inf"} ' \
        'k8slease_renew_duration_seconds_sum{name="m1"} ' \
        'k8slease_leader_transitions_total{name="m1"} 1' \
        'k8slease_api_errors_total{name="m1",code="409"} ' \
        'k8slease_api_errors_total{name="m1",code="4xx"} ' \
        'k8slease_api_errors_total{name="m1",code="5xx"} ' \
        'k8slease_api_errors_total{name="m1",code="transport"} ' \
        'k8slease_requests_total{name="m1"} ' \
        'k8slease_election_info{name="m1",backend="k8s"} 1'; do
        has "$T/metrics.txt" "$m"
    done
    # Buckets are cumulative, and +Inf is the count.
    awk '/^k8slease_renew_duration_seconds_bucket/ { if ($2 < last) exit 1; last = $2 }
         /le="\+Inf"/ { inf = $2 } /^k8slease_renew_duration_seconds_count/ { n = $2 }
         END { exit !(inf == n) }' "$T/metrics.txt" || fail "histogram not cumulative"

    same "$(curl -sS -o /dev/null -w '%{http_code}' "$base/nope")" 404 "unknown path"
    same "$(curl -sS -o /dev/null -w '%{http_code}' -X POST -d x "$base/leader")" 405 "POST"

    # A follower's view.
    # shellcheck disable=SC2086
    run b "$K8SLEASE" elect --lease m1 --identity bob $FAST --http 127.0.0.1:0
    pb=$(http_port b)
    wait_until 10 "bob sees alice" has_line "$T/b.out" "leader=alice epoch=0"
    same "$(curl -sS "http://127.0.0.1:$pb/leader" | "$CLI_JSON" holder is_leader \
        renew_deadline_ms_left | tr '\n' ' ')" "alice false 0 " "follower's /leader"
    same "$(curl -sS "http://127.0.0.1:$pb/" | "$CLI_JSON" name)" alice "follower's /"
    same "$(curl -sS "http://127.0.0.1:$pb/healthz")" ok "follower's /healthz"
    curl -sS "http://127.0.0.1:$pb/metrics" | grep -qxF 'leader_election_master_status{name="m1"} 0' ||
        fail "follower's master_status"

    # A port in use is a runtime error naming --http.
    expect 1 "$K8SLEASE" elect --lease m2 --identity x --http "127.0.0.1:$pa"
    has "$T/last.err" "--http 127.0.0.1:$pa: cannot listen"

    # Failover: bob's sidecar follows.
    sig TERM a
    finished a 10 0
    wait_until 10 "bob elected" grep -q "^elected" "$T/b.out"
    wait_until 10 "bob's /leader" sh -c "curl -sS http://127.0.0.1:$pb/leader |
        \"\$CLI_JSON\" is_leader | grep -qx true"
    same "$(curl -sS "http://127.0.0.1:$pb/" | "$CLI_JSON" name)" bob "new leader's /"
    sig TERM b
    finished b 10 0

    # With handoff, /readyz waits until this candidate is known (the server
    # holds the create of its object; m1 exists, so that is its only create)
    # and says why; between terms it is not ready either.
    hold=$(api POST /testserver/v1/faults '{"kind":"hang","match":{"verb":"create",
        "path_prefix":"/apis/coordination.k8s.io/v1/namespaces/default/leases"}}' |
        sed -n 's/^ *"id": *\([0-9]*\),$/\1/p')
    [ -n "$hold" ] || fail "cannot install the fault"
    # shellcheck disable=SC2086
    run d "$K8SLEASE" elect --lease m1 --identity dora $LONG --handoff --http 127.0.0.1:0
    pd=$(http_port d)
    wait_until 10 "dora elected" grep -q "^elected" "$T/d.out"
    wait_until 10 "dora's object held" fault_hits "$hold" 1
    same "$(curl -sS -w '%{http_code}' "http://127.0.0.1:$pd/readyz" | tr '\n' ' ')" \
        "not ready: this candidate of lease default/m1 is not known for a handoff yet 503" \
        "/readyz before the object is written"
    same "$(curl -sS "http://127.0.0.1:$pd/healthz")" ok "/healthz meanwhile"
    api DELETE "/testserver/v1/faults/$hold" >/dev/null || fail "cannot end the fault"
    wait_until 10 "dora ready" sh -c "curl -sS http://127.0.0.1:$pd/readyz | grep -qx ok"
    expect 0 "$K8SLEASE" release --lease m1 --force
    wait_until 10 "dora loses" has_line "$T/d.out" "lost"
    wait_until 10 "dora not ready between terms" sh -c \
        "curl -sS http://127.0.0.1:$pd/readyz | grep -qx 'not ready: between terms, not a candidate of lease default/m1 now'"
    same "$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$pd/readyz")" 503 \
        "/readyz between terms"
    sig TERM d
    finished d 10 0
}

test_demo() {
    run demo "$K8SLEASE" demo --local
    finished demo 90 0
    has "$T/demo.out" "failover:"
    has "$T/demo.out" "handover:"
    has "$T/demo.out" "done: 3 terms"
}

# ---- coordinated leader election ------------------------------------------------

# candidates: the names of the LeaseCandidates in default, one line.
candidates() {
    api GET /apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates |
        tr ',{' '\n\n' | sed -n 's/^ *"name": *"\([^"]*\)".*/\1/p' | tr '\n' ' '
}
candidates_are() { [ "$(candidates)" = "$1" ]; }
count_of() { grep -c "$2" "$T/$1.out"; }

# The test server with the CoordinatedLeaderElection gate (its controller
# pings, waits its 5 s election duration, and writes the Lease); waits are
# 30 s, several times a preferred-holder handover (ping, ack, preferredHolder,
# step-down, release, election).
test_coordinated() {
    start_server --feature-gates=CoordinatedLeaderElection=true
    # shellcheck disable=SC2086
    CO="--lease cle $FAST --coordinated"

    # Values the library refuses: a usage error (2), its message verbatim.
    # shellcheck disable=SC2086
    bad "binary_version" elect $CO --identity x --binary-version v1.36.0
    # shellcheck disable=SC2086
    bad "emulation_version" elect $CO --identity x --binary-version 1.36.0 \
        --emulation-version 1.35
    # shellcheck disable=SC2086
    bad "emulation_version 1.37.0 must not be greater than binary_version 1.36.0" \
        elect $CO --identity x --binary-version 1.36.0 --emulation-version 1.37.0
    # shellcheck disable=SC2086
    bad 'strategy "Newest"' elect $CO --identity x --binary-version 1.36.0 --strategy Newest
    # shellcheck disable=SC2086
    bad "identity (in coordinated election it names the LeaseCandidate)" \
        elect $CO --identity Alice --binary-version 1.36.0
    same "$(candidates)" "" "LeaseCandidates after refused starts"

    # The newer binary first: it leads alone. Then the older one: the
    # controller prefers it, the newer steps down (releasing) and campaigns
    # again at once, as a candidate.
    # shellcheck disable=SC2086
    run n "$K8SLEASE" elect $CO --identity new-0 --binary-version 1.36.0
    wait_until 30 "1.36.0 elected" has_line "$T/n.out" "elected epoch=1"
    expect 0 "$K8SLEASE" holder --lease cle
    has "$T/last.out" "holder:         new-0"
    has "$T/last.out" "strategy:       OldestEmulationVersion"
    lacks "$T/last.out" "preferred holder:"
    same "$(candidates)" "new-0 " "LeaseCandidates"
    # shellcheck disable=SC2086
    run o "$K8SLEASE" elect $CO --identity old-0.example --binary-version 1.36.0 \
        --emulation-version 1.35.0 --json --http 127.0.0.1:0
    po=$(http_port o)
    wait_until 30 "1.36.0 steps down" has_line "$T/n.out" "lost"
    wait_until 30 "1.35.0 elected" grep -q '"event":"elected"' "$T/o.out"
    same "$(grep '"event":"elected"' "$T/o.out" | "$CLI_JSON" -l epoch)" 2 "1.35.0's epoch"
    # (It sees the controller's write: the holder named, the epoch still the
    # last term's, before the holder's own update starts its term.)
    wait_until 10 "1.36.0 sees 1.35.0" grep -q "^leader=old-0.example epoch=" "$T/n.out"
    same "$(count_of n '^elected')" 1 "1.36.0's terms"
    expect 0 "$K8SLEASE" holder --lease cle --json
    same "$("$CLI_JSON" holder epoch strategy preferred_holder <"$T/last.out" | tr '\n' ' ')" \
        "old-0.example 2 OldestEmulationVersion  " "holder --json"
    same "$(curl -sS "http://127.0.0.1:$po/leader" | "$CLI_JSON" holder is_leader coordinated |
        tr '\n' ' ')" "old-0.example true true " "/leader"
    wait_until 10 "both are candidates" candidates_are "new-0 old-0.example "

    # The older one stops (releasing, its LeaseCandidate deleted): the
    # controller names the newer one, which leads again.
    sig TERM o
    finished o 10 0
    wait_until 30 "1.36.0 elected again" sh -c '[ "$(grep -c "^elected" "$T/n.out")" = 2 ]'
    same "$(candidates)" "new-0 " "LeaseCandidates once 1.35.0 stopped"
    sig TERM n
    finished n 10 0
    same "$(candidates)" "" "LeaseCandidates once both stopped"
    expect 3 "$K8SLEASE" holder --lease cle

    # The preferred holder, as the controller writes it (a Lease that no
    # candidate names: the controller leaves it alone).
    api POST /apis/coordination.k8s.io/v1/namespaces/default/leases \
        '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"ph"},
          "spec":{"holderIdentity":"a","leaseDurationSeconds":300,
          "renewTime":"2030-01-01T00:00:00.000000Z","strategy":"OldestEmulationVersion",
          "preferredHolder":"b"}}' >/dev/null || fail "cannot create lease ph"
    expect 0 "$K8SLEASE" holder --lease ph
    has "$T/last.out" "strategy:       OldestEmulationVersion"
    has "$T/last.out" "preferred holder: b"
    expect 0 "$K8SLEASE" holder --lease ph --json
    same "$("$CLI_JSON" holder strategy preferred_holder <"$T/last.out" | tr '\n' ' ')" \
        "a OldestEmulationVersion b " "holder --json, preferred holder"

    # A server without LeaseCandidates: the election ends, status 1.
    start_testserver "$T/plain" "$T/plain.ready" "$T/plain.err" 10
    _rc=$?
    PIDS="$PIDS $TESTSERVER_PID"
    [ "$_rc" = 0 ] || fail "second test server ready: not within 10 s"
    # shellcheck disable=SC2086
    run p "$K8SLEASE" elect $CO --identity p --binary-version 1.36.0 \
        --kubeconfig "$TESTSERVER_KUBECONFIG"
    finished p 10 1
    has "$T/p.err" "serves no LeaseCandidate API"
    has "$T/p.err" "coordinated election ended without a term"
    # A classic election's holder has neither line, and empty keys.
    # shellcheck disable=SC2086
    run c "$K8SLEASE" elect --lease plain --identity c $FAST --kubeconfig "$TESTSERVER_KUBECONFIG"
    wait_until 10 "classic elected" grep -q "^elected" "$T/c.out"
    expect 0 "$K8SLEASE" holder --lease plain --kubeconfig "$TESTSERVER_KUBECONFIG"
    lacks "$T/last.out" "strategy:"
    expect 0 "$K8SLEASE" holder --lease plain --kubeconfig "$TESTSERVER_KUBECONFIG" --json
    same "$("$CLI_JSON" strategy preferred_holder <"$T/last.out" | tr '\n' ' ')" "  " \
        "holder --json, classic"
    sig TERM c
    finished c 10 0
}

# ---- crash failover ------------------------------------------------------------

# kubectl against the test server ($KUBECONFIG), with a discovery cache of
# our own.
kc() { KUBECACHEDIR=$T/kcache kubectl --request-timeout=10s "$@"; }

# rfc3339 EPOCH_SECONDS: "2026-12-02T07:00:00Z" (GNU date).
rfc3339() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

# kubelet POD CONTAINER_ID STATE: write container main's status as the
# kubelet does (pods/status); STATE is a containerStatuses[].state object.
kubelet() {
    kc patch pod "$1" --subresource=status --type=merge -p "{\"status\":{\"containerStatuses\":[
        {\"name\":\"main\",\"containerID\":\"$2\",\"ready\":true,\"restartCount\":0,
         \"image\":\"x\",\"imageID\":\"x\",\"state\":$3}]}}" >"$T/kubelet.out" 2>&1 ||
        fail "kubectl patch pod $1 --subresource=status: $(cat "$T/kubelet.out")"
}

# record_of LEASE KEY...: fields of the Lease's crash failover record (the
# annotation k8slease.io/holder-container, JSON).
record_of() {
    _lease=$1
    shift
    kc get lease "$_lease" -o jsonpath='{.metadata.annotations.k8slease\.io/holder-container}' |
        "$CLI_JSON" "$@" | tr '\n' ' '
}
record_is() { [ "$(record_of "$1" containerID)" = "$2 " ]; }

# elect --crash-failover: the Pod from $POD_NAME (namespace: the Lease's, or
# $POD_NAMESPACE). The leader records its container instance in the Lease;
# once the kubelet reports exactly that instance terminated, a follower
# with the option takes over at once. Long leases: a takeover within 10 s
# of the report is no expiry (30 s).
test_crash_failover() {
    command -v kubectl >/dev/null || { echo "skip: no kubectl"; exit 77; }
    start_server
    started=$(rfc3339 $(($(date +%s) - 10)))
    for p in pa pb; do
        api POST /api/v1/namespaces/default/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",
            \"metadata\":{\"name\":\"$p\"},\"spec\":{\"containers\":[{\"name\":\"main\",
            \"image\":\"x\"}]}}" >"$T/pod.out" || fail "cannot create pod $p"
        "$CLI_JSON" metadata.uid <"$T/pod.out" >/dev/null || fail "pod $p: $(cat "$T/pod.out")"
    done
    cid_a=containerd://$(printf pa | sha256sum | cut -c1-64)
    cid_b=containerd://$(printf pb | sha256sum | cut -c1-64)
    kubelet pa "$cid_a" "{\"running\":{\"startedAt\":\"$started\"}}"
    kubelet pb "$cid_b" "{\"running\":{\"startedAt\":\"$started\"}}"
    uid_a=$(api GET /api/v1/namespaces/default/pods/pa | "$CLI_JSON" metadata.uid)

    # shellcheck disable=SC2086
    run a env POD_NAME=pa "$K8SLEASE" elect --lease cf --identity alice $LONG --crash-failover \
        --log-level info
    wait_until 10 "alice elected" has_line "$T/a.out" "elected epoch=0"
    has "$T/a.err" "crash failover: pod default/pa, container (the pod's only one)"
    wait_until 10 "the lease records alice's container ($cid_a)" record_is cf "$cid_a"
    same "$(record_of cf holder epoch podNamespace pod podUID container)" \
        "alice 0 default pa $uid_a main " "alice's record"
    has "$T/a.err" "this process runs in container main ($cid_a) of pod default/pa"
    verified=$(record_of cf verifiedAt)

    # shellcheck disable=SC2086
    run b env POD_NAME=pb POD_NAMESPACE=default "$K8SLEASE" elect --lease cf --identity bob \
        $LONG --crash-failover --container main --log-level info
    wait_until 10 "bob sees alice" has_line "$T/b.out" "leader=alice epoch=0"
    has "$T/b.err" "crash failover: pod default/pb, container main"

    # alice crashes; her container's end is reported in a later second than
    # her record's verifiedAt (only such a report is evidence).
    sig KILL a
    finished a 10
    v=$(date -u -d "$verified" +%s) || fail "verifiedAt \"$verified\": not a time"
    now=$(date +%s)
    [ "$now" -gt "$v" ] || now=$((v + 1))
    kubelet pa "$cid_a" "{\"terminated\":{\"exitCode\":137,\"reason\":\"Error\",
        \"startedAt\":\"$started\",\"finishedAt\":\"$(rfc3339 "$now")\",\"containerID\":\"$cid_a\"}}"
    wait_until 10 "bob takes over on the kubelet's report" has_line "$T/b.out" "elected epoch=1"
    has "$T/b.err" "the kubelet reported container main ($cid_a) of pod default/pa terminated"
    wait_until 10 "the lease records bob's container ($cid_b)" record_is cf "$cid_b"
    same "$(record_of cf holder epoch pod container)" "bob 1 pb main " "bob's record"
    sig TERM b
    finished b 10 0
}

# ---- etcd ---------------------------------------------------------------------

# 1 when the library has its etcd driver (while it is being written, every
# etcd client is refused with "etcd backend not built yet").
etcd_driver_built() {
    "$K8SLEASE" holder --backend etcd --etcd-endpoints http://127.0.0.1:1 --lease x \
        >/dev/null 2>"$T/driver.err"
    ! grep -q "not built yet" "$T/driver.err"
}

# No etcd needed: flags, their errors, and what the library says of bad values.
test_etcd_flags() {
    # Exit 2 and one line that names the flag and the rule (bad, above).
    EP="--backend etcd --etcd-endpoints http://127.0.0.1:1"
    for c in elect holder watch release; do
        # Flags each command needs besides these.
        more=
        [ "$c" = holder ] || [ "$c" = watch ] || more="--identity i"
        # shellcheck disable=SC2086
        bad "k8slease $c: --backend etcd needs --etcd-endpoints URL[,URL...] (or \$ETCDCTL_ENDPOINTS)" \
            $c --backend etcd --lease x $more
        bad "k8slease $c: --backend bogus: must be k8s or etcd" $c --backend bogus --lease x
        # shellcheck disable=SC2086
        bad "k8slease $c: --etcd-endpoints needs --backend etcd" $c --lease x \
            --etcd-endpoints http://127.0.0.1:1 $more
        # shellcheck disable=SC2086
        bad "k8slease $c: --etcd-user root needs a password: --etcd-password-file FILE or \$K8SLEASE_ETCD_PASSWORD" \
            $c $EP --lease x $more --etcd-user root
        # shellcheck disable=SC2086
        bad "k8slease $c: --namespace: Kubernetes only, not with --backend etcd" \
            $c $EP --lease x $more --namespace default
    done
    # shellcheck disable=SC2086
    bad "k8slease elect: --label-pod: Kubernetes only (a Pod), not with --backend etcd" \
        elect $EP --lease x --label-pod p
    # shellcheck disable=SC2086
    bad "k8slease elect: --coordinated: Kubernetes only (LeaseCandidates), not with --backend etcd" \
        elect $EP --lease x --identity i --coordinated --binary-version 1.36.0
    # shellcheck disable=SC2086
    bad "k8slease elect: --crash-failover: Kubernetes only (the kubelet's report on a Pod), not with --backend etcd" \
        elect $EP --lease x --identity i --crash-failover
    # shellcheck disable=SC2086
    POD_NAME=p bad "k8slease elect: --crash-failover: Kubernetes only" elect $EP --lease x \
        --crash-failover --container main
    # shellcheck disable=SC2086
    bad "--kubeconfig: Kubernetes only, not with --backend etcd" holder $EP --lease x \
        --kubeconfig "$T/kc"
    # shellcheck disable=SC2086
    bad "--context: Kubernetes only" watch $EP --lease x --context c
    bad "k8slease label set: --backend etcd: not with this command: Pods are Kubernetes objects" \
        label set --pod p role=x --backend etcd
    bad "k8slease label clear: --etcd-endpoints: not with this command" \
        label clear --pod p role --etcd-endpoints http://127.0.0.1:1
    bad "k8slease demo: --backend etcd: not with this command" demo --backend etcd
    bad "--etcd-password-file needs --etcd-user" holder --lease x --backend etcd \
        --etcd-endpoints http://127.0.0.1:1 --etcd-password-file "$T/pw"
    # shellcheck disable=SC2086
    bad "--etcd-cert needs --etcd-key FILE" holder $EP --lease x --etcd-cert "$T/c.pem"
    # shellcheck disable=SC2086
    bad "--etcd-key needs --etcd-cert FILE" holder $EP --lease x --etcd-key "$T/k.pem"
    # shellcheck disable=SC2086
    bad "--etcd-endpoints : must not be empty" holder --backend etcd --etcd-endpoints= --lease x
    bad "--etcd-cacert needs --backend etcd" holder --lease x --etcd-cacert "$T/ca.pem"

    # A password never goes on the command line, nor into a message.
    bad "--etcd-password: no such flag: a password on the command line shows in ps(1)" \
        holder --lease x --etcd-password hunter2
    lacks "$T/last.err" hunter2
    # shellcheck disable=SC2086
    bad "--etcd-user: a user name without ':'" holder $EP --lease x --etcd-user root:hunter2
    lacks "$T/last.err" hunter2

    # The election name: any non-empty string of at most 400 bytes.
    # shellcheck disable=SC2086
    bad "--lease: the election name must not be empty" holder $EP --lease ""
    long=$(printf '%0401d' 0)
    # shellcheck disable=SC2086
    bad "the election name must be at most 400 bytes" holder $EP --lease "$long"
    # ... while Kubernetes keeps its rules.
    bad "--lease Foo: lease name must be a lowercase RFC 1123 subdomain" \
        holder --backend k8s --lease Foo

    # Files that cannot be read: status 1, the flag and the file named.
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $EP --lease x --etcd-cacert "$T/none.pem"
    has "$T/last.err" "--etcd-cacert $T/none.pem: cannot read"
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $EP --lease x --etcd-user root --etcd-password-file "$T/none"
    has "$T/last.err" "--etcd-password-file $T/none: cannot read"
    : >"$T/empty"
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $EP --lease x --etcd-user root --etcd-password-file "$T/empty"
    has "$T/last.err" "--etcd-password-file $T/empty: is empty"
    # shellcheck disable=SC2086
    ETCDCTL_CACERT=$T/none.pem expect 1 "$K8SLEASE" holder $EP --lease x
    has "$T/last.err" "\$ETCDCTL_CACERT $T/none.pem: cannot read"
    # etcdctl's variables are defaults with --backend etcd only.
    ETCDCTL_ENDPOINTS=http://127.0.0.1:1 expect 2 "$K8SLEASE" holder --lease Foo
    has "$T/last.err" "lease name must be"

    if ! etcd_driver_built; then
        echo "skip: library values (the etcd driver is not built yet: $(cat "$T/driver.err"))"
        return
    fi
    # What the library refuses is a bad flag value too: status 2, its message.
    bad "ftp://127.0.0.1:2379" holder --backend etcd --etcd-endpoints ftp://127.0.0.1:2379 \
        --lease x
    has "$T/last.err" "--etcd-endpoints"
    ETCDCTL_ENDPOINTS=127.0.0.1:2379 bad "127.0.0.1:2379" holder --backend etcd --lease x
    has "$T/last.err" "\$ETCDCTL_ENDPOINTS"
    # Nobody on the port: a runtime error (status 1), one line.
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $EP --lease "Any name/with \"quotes\""
    [ "$(lines "$T/last.err")" = 1 ] || fail "more than one line of error: holder on port 1"
}

# etcdctl with the test etcd (run NAME ectl ...: exec, so that NAME's pid
# is etcdctl's).
ectl() { ETCDCTL_API=3 exec "$K8SLEASE_TEST_ETCDCTL" --endpoints="$ETCD" "$@"; }

# start_etcd DIR [tls]: print the endpoint of a new etcd (etcd.sh).
start_etcd() {
    # shellcheck disable=SC2086
    sh "$(dirname "$0")/etcd.sh" "$T/$1" ${2:-} >"$T/$1.endpoint" || fail "etcd did not start"
    PIDS="$PIDS $(cat "$T/$1/etcd.pid")"
    cat "$T/$1.endpoint"
}

# keys PREFIX: how many keys (candidates) there are under PREFIX/.
keys() { (ectl get --prefix "$1/" --keys-only) | grep -c .; }
keys_are() { [ "$(keys "$1")" = "$2" ]; }
# epoch_of NAME: the epoch of NAME's (last) "elected epoch=N" line.
epoch_of() { sed -n 's/^elected epoch=//p' "$T/$1.out" | tail -n 1; }

# A real etcd (Debian's etcd-server), and etcdctl (etcd-client) in the same
# election: both ways.
test_etcd() {
    : "${K8SLEASE_TEST_ETCDCTL:?path of etcdctl}"
    if ! etcd_driver_built; then
        echo "skip: the etcd driver is not built yet: $(cat "$T/driver.err")"
        exit 77
    fi
    ETCD=$(start_etcd etcd) || exit 1
    export ETCD
    E="--backend etcd --etcd-endpoints $ETCD"
    EL=cli/election

    # No candidate: no holder (3), nothing to release (0).
    # shellcheck disable=SC2086
    expect 3 "$K8SLEASE" holder $E --lease $EL
    has "$T/last.out" "holder:         (none)"
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" release $E --lease $EL --identity x
    has "$T/last.out" "election $EL has no holder: nothing to release"

    # We lead; etcdctl's observer, holder, watch and the sidecar see it.
    run obs ectl elect -l $EL
    # shellcheck disable=SC2086
    run w "$K8SLEASE" watch $E --lease $EL
    wait_until 10 "watch: absent" has_line "$T/w.out" "absent"
    # shellcheck disable=SC2086
    run a "$K8SLEASE" elect $E --lease $EL --identity alice $FAST --http 127.0.0.1:0
    pa=$(http_port a)
    wait_until 10 "alice elected" grep -q "^elected epoch=" "$T/a.out"
    ea=$(epoch_of a)
    wait_until 10 "alice sees herself" has_line "$T/a.out" "leader=alice epoch=$ea"
    wait_until 10 "etcdctl elect -l sees alice" has_line "$T/obs.out" alice
    wait_until 10 "watch sees alice" has_line "$T/w.out" "leader=alice epoch=$ea"
    same "$(ectl get --prefix $EL/ --print-value-only)" alice "the value of our key"
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" holder $E --lease $EL
    has "$T/last.out" "election:       $EL"
    has "$T/last.out" "holder:         alice"
    has "$T/last.out" "epoch:          $ea (create revision)"
    has "$T/last.out" "lease TTL:      3s"
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" holder $E --lease $EL --json
    same "$("$CLI_JSON" election holder epoch lease_ttl_seconds <"$T/last.out" | tr '\n' ' ')" \
        "$EL alice $ea 3 " "holder --json"
    # The epoch is the key's create revision, as etcd says.
    (ectl get --prefix $EL/ -w json) >"$T/keys.json"
    grep -q "\"create_revision\":${ea}[,}]" "$T/keys.json" || fail "epoch $ea is no create revision"
    same "$(curl -sS "http://127.0.0.1:$pa/leader" | "$CLI_JSON" lease backend holder is_leader |
        tr '\n' ' ')" "$EL etcd alice true " "/leader"
    curl -sS "http://127.0.0.1:$pa/metrics" >"$T/metrics.txt"
    has "$T/metrics.txt" "leader_election_master_status{name=\"$EL\"} 1"
    has "$T/metrics.txt" "k8slease_election_info{name=\"$EL\",backend=\"etcd\"} 1"
    has "$T/metrics.txt" "k8slease_leader_transitions_total{name=\"$EL\"} 1"

    # etcdctl queues behind us; we resign (SIGTERM): etcdctl leads at once.
    run b ectl elect $EL bob
    wait_until 10 "etcdctl's candidate queues" keys_are $EL 2
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" holder $E --lease $EL
    has "$T/last.out" "holder:         alice"
    sig TERM a
    finished a 10 0
    has_line "$T/a.out" "lost" || fail "alice did not report the loss"
    wait_until 10 "etcdctl elected" has_line "$T/b.out" bob
    wait_until 10 "watch sees bob" grep -q "^leader=bob epoch=" "$T/w.out"
    eb=$(sed -n 's/^leader=bob epoch=//p' "$T/w.out")
    [ "$eb" -gt "$ea" ] || fail "epoch did not grow: $ea then $eb"
    wait_until 10 "etcdctl elect -l sees bob" has_line "$T/obs.out" bob

    # etcdctl's candidate stops (SIGTERM: it resigns): we lead.
    # shellcheck disable=SC2086
    run c "$K8SLEASE" elect $E --lease $EL --identity carol $FAST --once
    wait_until 10 "carol sees bob" has_line "$T/c.out" "leader=bob epoch=$eb"
    sig TERM b
    finished b 10
    wait_until 10 "carol elected" grep -q "^elected epoch=" "$T/c.out"
    ec=$(epoch_of c)
    [ "$ec" -gt "$eb" ] || fail "epoch did not grow: $eb then $ec"
    wait_until 10 "etcdctl elect -l sees carol" has_line "$T/obs.out" carol

    # An operator's release: refused for another identity; else carol's lease
    # is revoked, she loses (--once: exits 3) and nobody is left.
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" release $E --lease $EL --identity bob
    has "$T/last.err" "election $EL is held by \"carol\", not \"bob\": not released"
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" release $E --lease $EL --identity carol
    has "$T/last.out" "released election $EL (holder \"carol\", epoch $ec)"
    finished c 10 3
    has_line "$T/c.out" "lost" || fail "carol did not report the loss"
    wait_until 10 "no key left" keys_are $EL 0
    # shellcheck disable=SC2086
    expect 3 "$K8SLEASE" holder $E --lease $EL --json
    same "$("$CLI_JSON" holder epoch <"$T/last.out" | tr '\n' ' ')" " -1 " "holder --json, none"
    wait_until 10 "watch: absent again" sh -c "tail -n 1 '$T/w.out' | grep -qx absent"

    # CMD runs while leader, told the election name; $ETCDCTL_ENDPOINTS is
    # the default endpoint; any name goes.
    odd='odd "name" \ with/slashes'
    # shellcheck disable=SC2086,SC2016
    run d env ETCDCTL_ENDPOINTS="$ETCD" "$K8SLEASE" elect --backend etcd --lease "$odd" \
        --identity dan $FAST --http 127.0.0.1:0 -- \
        sh -c 'echo "$K8SLEASE_EPOCH $K8SLEASE_IDENTITY $K8SLEASE_LEASE" >"$T/d.env"; exec sleep 60'
    pd=$(http_port d)
    wait_until 10 "dan's CMD started" test -s "$T/d.env"
    same "$(cat "$T/d.env")" "$(sed -n 's/.*elected epoch=//p' "$T/d.err") dan $odd" "CMD's environment"
    same "$(ectl get --prefix "$odd/" --print-value-only)" dan "dan's key"
    curl -sS "http://127.0.0.1:$pd/metrics" | grep -qxF \
        'leader_election_master_status{name="odd \"name\" \\ with/slashes"} 1' ||
        fail "metrics: label value not escaped"
    sig TERM d
    finished d 10 0
    has "$T/d.err" "exited pid="
    wait_until 10 "dan resigned" keys_are "$odd" 0

    # Authentication: the password from a file or $K8SLEASE_ETCD_PASSWORD.
    # (auth enable also gives root the root role, after a warning.)
    (ectl user add root:s3cret) >"$T/etcdctl.log" 2>&1 || fail "etcdctl user add"
    (ectl auth enable) >>"$T/etcdctl.log" 2>&1 || fail "etcdctl auth enable"
    printf 's3cret\n' >"$T/pw"
    # shellcheck disable=SC2086
    expect 3 "$K8SLEASE" holder $E --lease $EL --etcd-user root --etcd-password-file "$T/pw"
    # shellcheck disable=SC2086
    K8SLEASE_ETCD_PASSWORD=s3cret expect 3 "$K8SLEASE" holder $E --lease $EL --etcd-user root
    # shellcheck disable=SC2086
    K8SLEASE_ETCD_PASSWORD=Xyzzy-pw expect 1 "$K8SLEASE" holder $E --lease $EL --etcd-user root
    lacks "$T/last.err" Xyzzy-pw
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $E --lease $EL
    # shellcheck disable=SC2086
    run e "$K8SLEASE" elect $E --lease $EL --identity erin $FAST --etcd-user root \
        --etcd-password-file "$T/pw"
    wait_until 10 "erin elected with a password" grep -q "^elected epoch=" "$T/e.out"
    # shellcheck disable=SC2086
    K8SLEASE_ETCD_PASSWORD=s3cret expect 0 "$K8SLEASE" holder $E --lease $EL --etcd-user root
    has "$T/last.out" "holder:         erin"
    sig TERM e
    finished e 10 0
    sig TERM w
    finished w 10 0

    # TLS with client certificates, from the flags or etcdctl's variables.
    ETLS=$(start_etcd etcd-tls tls) || exit 1
    C=$T/etcd-tls
    TLS="--backend etcd --etcd-endpoints $ETLS --etcd-cacert $C/ca.crt"
    # shellcheck disable=SC2086
    expect 3 "$K8SLEASE" holder $TLS --etcd-cert "$C/client.crt" --etcd-key "$C/client.key" \
        --lease $EL
    # shellcheck disable=SC2086
    expect 1 "$K8SLEASE" holder $TLS --lease $EL
    ETCDCTL_CACERT=$C/ca.crt ETCDCTL_CERT=$C/client.crt ETCDCTL_KEY=$C/client.key \
        ETCDCTL_ENDPOINTS=$ETLS expect 3 "$K8SLEASE" holder --backend etcd --lease $EL
    # shellcheck disable=SC2086
    run f "$K8SLEASE" elect $TLS --etcd-cert "$C/client.crt" --etcd-key "$C/client.key" \
        --lease $EL --identity frank $FAST
    wait_until 10 "frank elected over TLS" grep -q "^elected epoch=" "$T/f.out"
    # shellcheck disable=SC2086
    expect 0 "$K8SLEASE" holder $TLS --etcd-cert "$C/client.crt" --etcd-key "$C/client.key" \
        --lease $EL
    has "$T/last.out" "holder:         frank"
    sig TERM f
    finished f 10 0
}

case "${1:-}" in
usage | holder | release | elect_events | elect_cmd | elect_signals | watch | label | sidecar | demo | coordinated | crash_failover | etcd_flags | etcd)
    "test_$1"
    echo "ok: cli_$1"
    ;;
*)
    echo "usage: cli_test.sh usage|holder|release|elect_events|elect_cmd|elect_signals|watch|label|sidecar|demo|coordinated|crash_failover|etcd_flags|etcd" >&2
    exit 2
    ;;
esac
