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
unset KUBECONFIG KUBERNETES_SERVICE_HOST POD_NAME
T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-cli.XXXXXX") || exit 1
export T K8SLEASE CLI_JSON
PIDS=
FAST="--lease-duration 3s --renew-deadline 2s --retry-period 500ms"
LONG="--lease-duration 30s --renew-deadline 20s --retry-period 1s"

cleanup() {
    # TERM first: a k8slease elect stops its CMD's process group.
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    n=0
    while [ $n -lt 30 ]; do
        alive=
        for p in $PIDS; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ -n "$alive" ] || break
        sleep 0.1
        n=$((n + 1))
    done
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
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

# wait_until SECONDS WHAT CMD...: poll CMD every 100 ms.
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
at_least_lines() { [ -f "$1" ] && [ "$(lines "$1")" -ge "$2" ]; }
# gone PID: no such process, or a zombie (orphans may not be reaped here).
gone() {
    ! kill -0 "$1" 2>/dev/null ||
        { [ -r "/proc/$1/stat" ] && sed 's/.*) //' "/proc/$1/stat" | grep -q '^Z'; }
}
# same ACTUAL EXPECTED WHAT
same() { [ "$1" = "$2" ] || fail "$3: got \"$1\", expected \"$2\""; }

start_server() {
    "$K8SLEASE_TESTSERVER" --quiet --dir "$T/server" >"$T/server.ready" 2>"$T/server.err" &
    PIDS="$PIDS $!"
    wait_until 10 "test server ready" grep -q '^ready ' "$T/server.ready"
    KUBECONFIG=$(sed -n 's/.* kubeconfig=\([^ ]*\).*/\1/p' "$T/server.ready")
    SERVER_PORT=$(sed -n 's/^ready port=\([0-9]*\).*/\1/p' "$T/server.ready")
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
    expect 0 "$K8SLEASE" --version
    has "$T/last.out" "k8slease 0."
    expect 0 "$K8SLEASE" watch --version
    has "$T/last.out" "k8slease 0."
    expect 2 "$K8SLEASE"
    expect 2 "$K8SLEASE" frob
    has "$T/last.err" 'unknown command "frob"'

    # Exit 2 and one line that names the flag and the rule.
    bad() {
        _msg=$1
        shift
        expect 2 "$K8SLEASE" "$@"
        has "$T/last.err" "$_msg"
        [ "$(lines "$T/last.err")" = 1 ] || fail "more than one line of error: $*"
    }
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

    # --force releases whoever holds it. Both candidates lost a term: they
    # wait a lease duration (30 s) before campaigning again.
    expect 0 "$K8SLEASE" release --lease r1 --force
    has "$T/last.out" 'released lease default/r1 (holder "bob", epoch 1)'
    wait_until 10 "bob steps down" has_line "$T/b.out" "lost"
    expect 3 "$K8SLEASE" holder --lease r1

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
    curl -sS "$base/leader" >"$T/leader.json"
    same "$("$CLI_JSON" lease identity holder epoch is_leader <"$T/leader.json" | tr '\n' ' ')" \
        "default/m1 alice alice 0 true " "/leader"
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
        'k8slease_requests_total{name="m1"} '; do
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
}

test_demo() {
    run demo "$K8SLEASE" demo --local
    finished demo 90 0
    has "$T/demo.out" "failover:"
    has "$T/demo.out" "handover:"
    has "$T/demo.out" "done: 3 terms"
}

case "${1:-}" in
usage | holder | release | elect_events | elect_cmd | elect_signals | watch | label | sidecar | demo)
    "test_$1"
    echo "ok: cli_$1"
    ;;
*)
    echo "usage: cli_test.sh usage|holder|release|elect_events|elect_cmd|elect_signals|watch|label|sidecar|demo" >&2
    exit 2
    ;;
esac
