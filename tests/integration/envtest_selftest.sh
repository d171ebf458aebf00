#!/bin/sh
# envtest_selftest.sh: envtest.sh's process control on a real kube-apiserver.
#
#   KUBEBUILDER_ASSETS=DIR tests/integration/envtest.sh tests/integration/envtest_selftest.sh
#
# or as ctest's envtest_selftest (label envtest) under envtest.sh, as
# scripts/envtest-suites.sh runs it. Run with $KUBEBUILDER_ASSETS but not
# under envtest.sh, it runs itself under envtest.sh; with neither, it says
# why it skips and exits 0 (ctest shows it as skipped).
#
# Checks, each step bounded: the ports are outside the kernel's ephemeral
# range; the apiserver restarted 5 times in a row, each time a new process
# with /readyz ok and namespace "default" there at once (200) and the
# objects kept; a start on a port something else listens on fails at once,
# saying so; etcd killed and started (same data); rotate-token (the new
# token works, the old one gets 401). Exits 1 at the first failure, saying
# which. (With K8SLEASE_ENVTEST_REPLICAS >= 2 it drives replica 1 and the
# kube-apiservers' own port; envtest_ha_selftest.sh checks the replicas and
# the balancer.)
set -eu
me=envtest_selftest.sh

if [ -z "${K8SLEASE_ENVTEST_CTL:-}" ]; then
    if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
        exec "$(cd "$(dirname "$0")" && pwd)/envtest.sh" "$0"
    fi
    echo "$me: skipped: no K8SLEASE_ENVTEST_CTL and no KUBEBUILDER_ASSETS" \
        "(run it under tests/integration/envtest.sh)"
    exit 0
fi
ctl=$K8SLEASE_ENVTEST_CTL
dir=${K8SLEASE_ENVTEST_DIR:?K8SLEASE_ENVTEST_DIR is not set}
# shellcheck disable=SC1091
. "$dir/env"

fail() {
    echo "$me: FAIL: $*" >&2
    exit 1
}

# Milliseconds since boot (for step times).
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }

# run_ctl PROC ACTION: the ctl script, bounded (its own waits are 10 s after
# a kill and 2 x 60 s for a start; a restart is both).
run_ctl() {
    if command -v timeout >/dev/null 2>&1; then
        timeout 150 "$ctl" "$1" "$2"
    else
        "$ctl" "$1" "$2"
    fi
}

# http_code METHOD PATH [TOKEN [BODY]]: the apiserver's HTTP status (000
# when it does not answer within 10 s); the body goes to $dir/selftest.out.
http_code() {
    set -- "$1" "$2" "${3:-$TOKEN}" "${4:-}"
    if [ -n "$4" ]; then
        curl -s --max-time 10 -o "$dir/selftest.out" -w '%{http_code}' --cacert "$dir/ca.crt" \
            -H "Authorization: Bearer $3" -H 'Content-Type: application/json' -X "$1" \
            --data "$4" "https://127.0.0.1:$PORT$2" || true
    else
        curl -s --max-time 10 -o "$dir/selftest.out" -w '%{http_code}' --cacert "$dir/ca.crt" \
            -H "Authorization: Bearer $3" -X "$1" "https://127.0.0.1:$PORT$2" || true
    fi
}

# expect CODE METHOD PATH [TOKEN [BODY]]
expect() {
    want=$1
    shift
    got=$(http_code "$@")
    [ "$got" = "$want" ] ||
        fail "$1 $2: HTTP $got, want $want: $(head -c 300 "$dir/selftest.out" 2>/dev/null)"
}

# eventually CODE METHOD PATH: poll (at most 60 s) until it answers CODE.
eventually() {
    end=$(($(now_ms) + 60000))
    while [ "$(http_code "$2" "$3")" != "$1" ]; do
        [ "$(now_ms)" -lt "$end" ] || fail "$2 $3: not HTTP $1 within 60 s"
        sleep 0.2
    done
}

# Does anything listen on loopback port PORT? (as envtest.sh checks it)
listening() {
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v port=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == port { found = 1 }
            END { exit !found }'
}

# Is PID gone with all its threads? (as envtest.sh checks it)
gone() {
    [ -d "/proc/$1" ] || return 0
    for t in "/proc/$1/task"/*/stat; do
        state=$(sed 's/.*) //' "$t" 2>/dev/null | cut -d' ' -f1) || continue
        case $state in '' | Z | X) ;; *) return 1 ;; esac
    done
    return 0
}

# On a failure, leave a server for the suites that run after this one
# (best effort: start what is not running).
squatter=
restore() {
    status=$?
    [ -z "$squatter" ] || kill "$squatter" 2>/dev/null || true
    if [ "$status" -ne 0 ]; then
        echo "$me: failed (exit status $status); starting what is down again" >&2
        "$ctl" etcd start >/dev/null 2>&1 || true
        # With K8SLEASE_ENVTEST_REPLICAS >= 2, the other replicas and haproxy too.
        for n in apiserver apiserver2 apiserver3 lb; do
            "$ctl" "$n" start >/dev/null 2>&1 || true
        done
    fi
}
trap restore EXIT

# The ports: distinct, outside the ephemeral range.
range=$(cat /proc/sys/net/ipv4/ip_local_port_range) # not read <file: dash reads byte-wise
low=${range%%[!0-9]*} high=${range##*[!0-9]}
for p in "$PORT" "$ETCD_PORT" "$ETCD_PEER_PORT"; do
    if [ "$p" -ge "$low" ] && [ "$p" -le "$high" ]; then
        fail "port $p is in the ephemeral range $low-$high"
    fi
done
if [ "$PORT" = "$ETCD_PORT" ] || [ "$PORT" = "$ETCD_PEER_PORT" ] ||
    [ "$ETCD_PORT" = "$ETCD_PEER_PORT" ]; then
    fail "ports not distinct: $PORT $ETCD_PORT $ETCD_PEER_PORT"
fi
echo "$me: ports $PORT (apiserver), $ETCD_PORT and $ETCD_PEER_PORT (etcd), outside $low-$high"

expect 200 GET /readyz
expect 200 GET /api/v1/namespaces/default
cm=envtest-selftest-$$
cm_path=/api/v1/namespaces/default/configmaps/$cm
expect 201 POST /api/v1/namespaces/default/configmaps "$TOKEN" \
    "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"$cm\"},\"data\":{}}"

# The apiserver restarted 5 times in a row: each time a new process, ready
# and with namespace "default" as soon as ctl returns.
i=1
while [ "$i" -le 5 ]; do
    old=$("$ctl" apiserver pid)
    t0=$(now_ms)
    run_ctl apiserver restart || fail "restart $i: ctl apiserver restart exited with status $?"
    new=$("$ctl" apiserver pid)
    if [ -z "$new" ] || [ "$new" = "$old" ]; then
        fail "restart $i: pid $old, then '$new': not a new process"
    fi
    gone "$old" || fail "restart $i: the old apiserver (pid $old) still has running threads"
    expect 200 GET /readyz
    expect 200 GET /api/v1/namespaces/default
    expect 200 GET "$cm_path"
    echo "$me: apiserver restart $i: pid $old -> $new in $(($(now_ms) - t0)) ms"
    i=$((i + 1))
done

# A start on a port something else listens on fails within the 10 s that
# ctl waits for the port, with a message: not a server that is silently gone.
if command -v python3 >/dev/null 2>&1; then
    run_ctl apiserver kill || fail "ctl apiserver kill exited with status $?"
    python3 -c 'import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
time.sleep(60)' "$PORT" &
    squatter=$!
    end=$(($(now_ms) + 10000))
    until listening "$PORT"; do
        [ "$(now_ms)" -lt "$end" ] || fail "the squatter on port $PORT did not listen"
        sleep 0.1
    done
    t0=$(now_ms)
    if run_ctl apiserver start 2>"$dir/selftest.err"; then
        kill "$squatter"
        fail "ctl apiserver start succeeded on port $PORT taken by pid $squatter"
    fi
    took=$(($(now_ms) - t0))
    kill "$squatter"
    wait "$squatter" 2>/dev/null || true
    squatter=
    grep -q "port $PORT" "$dir/selftest.err" ||
        fail "ctl apiserver start on a taken port did not name the port: $(cat "$dir/selftest.err")"
    [ "$took" -lt 20000 ] || fail "ctl apiserver start on a taken port took $took ms to fail"
    echo "$me: start on a taken port failed after $took ms: $(head -n 1 "$dir/selftest.err")"
    run_ctl apiserver start || fail "ctl apiserver start (port free again) exited with status $?"
    expect 200 GET /readyz
    expect 200 GET /api/v1/namespaces/default
fi

# etcd killed and started: same port, same data.
old=$("$ctl" etcd pid)
t0=$(now_ms)
run_ctl etcd kill || fail "ctl etcd kill exited with status $?"
gone "$old" || fail "etcd (pid $old) still has running threads after ctl etcd kill"
for p in "$ETCD_PORT" "$ETCD_PEER_PORT"; do
    ! listening "$p" || fail "port $p still has a listener after ctl etcd kill"
done
run_ctl etcd start || fail "ctl etcd start exited with status $?"
[ "$("$ctl" etcd pid)" != "$old" ] || fail "etcd: the same pid $old after kill and start"
eventually 200 GET /readyz
eventually 200 GET "$cm_path"
expect 200 GET /api/v1/namespaces/default
echo "$me: etcd kill + start: apiserver ready with the data again after $(($(now_ms) - t0)) ms"

# rotate-token: the new token works at once, the old one no longer.
old_token=$(cat "$dir/token-rotating")
t0=$(now_ms)
run_ctl apiserver rotate-token || fail "ctl apiserver rotate-token exited with status $?"
new_token=$(cat "$dir/token-rotating")
if [ -z "$new_token" ] || [ "$new_token" = "$old_token" ]; then
    fail "rotate-token: token-rotating unchanged"
fi
expect 200 GET /readyz
expect 200 GET /api/v1/namespaces/default "$new_token"
expect 401 GET /api/v1/namespaces/default "$old_token"
echo "$me: rotate-token: new token accepted, old one refused, after $(($(now_ms) - t0)) ms"

expect 200 DELETE "$cm_path"
rm -f "$dir/selftest.out" "$dir/selftest.err"
echo "$me: ok"
