#!/bin/sh
# envtest_ha_selftest.sh: envtest.sh's replicas behind haproxy, on real
# kube-apiservers.
#
#   K8SLEASE_ENVTEST_REPLICAS=2 K8SLEASE_ENVTEST_BALANCE=first KUBEBUILDER_ASSETS=DIR \
#       tests/integration/envtest.sh sh tests/integration/envtest_ha_selftest.sh
#
# or as ctest's envtest_ha_selftest (label envtest). Under an envtest.sh
# with K8SLEASE_ENVTEST_REPLICAS >= 2 it uses those servers; under one
# with a single kube-apiserver, or not under envtest.sh but with
# $KUBEBUILDER_ASSETS, it runs itself under an envtest.sh of its own with
# K8SLEASE_ENVTEST_REPLICAS (default 2) and K8SLEASE_ENVTEST_BALANCE
# (default first). It skips (exit 0, saying why) without envtest binaries
# or without haproxy.
#
# Checks, each step bounded, exit 1 at the first failure saying which: the
# ports are distinct and outside the ephemeral range; the kubeconfigs point
# at the balancer and kubeconfig-replicaN at replica N; /livez answers 200
# without a token (haproxy's health check has none); a request through the
# balancer works and each replica answers directly (the same objects: one
# etcd); haproxy has every replica UP and balances as told (first: every
# new connection to replica 1; roundrobin: to each); replica 1 hung
# (SIGSTOP): a request through the balancer (2 s timeout) succeeds again
# within 5 s and haproxy marks it DOWN, a watch through the balancer on it
# (balance first) is left open and goes on after SIGCONT, haproxy has it UP
# again; replica 2 killed: requests through the balancer go on, started
# again it is UP; haproxy restarted: a watch through it ends, the balancer
# answers again.
set -eu
me=envtest_ha_selftest.sh

skip() {
    echo "$me: skipped: $*"
    exit 0
}

replicas=
if [ -n "${K8SLEASE_ENVTEST_CTL:-}" ]; then
    replicas=$("$K8SLEASE_ENVTEST_CTL" replicas 2>/dev/null) || replicas=1
fi
if [ "${replicas:-0}" -lt 2 ]; then
    if [ -z "${KUBEBUILDER_ASSETS:-}" ] && [ -z "${TEST_ASSET_KUBE_APISERVER:-}" ]; then
        skip "no envtest.sh with K8SLEASE_ENVTEST_REPLICAS >= 2 and no KUBEBUILDER_ASSETS" \
            "(run it under tests/integration/envtest.sh)"
    fi
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] ||
        skip "no haproxy (Debian package haproxy; scripts/install-deps.sh installs it)"
    want=${K8SLEASE_ENVTEST_REPLICAS:-2}
    [ "$want" -ge 2 ] 2>/dev/null || want=2
    echo "$me: starting $want kube-apiservers behind haproxy (envtest.sh)"
    K8SLEASE_ENVTEST_REPLICAS=$want K8SLEASE_ENVTEST_BALANCE=${K8SLEASE_ENVTEST_BALANCE:-first} \
        exec "$(cd "$(dirname "$0")" && pwd)/envtest.sh" sh "$0"
fi

ctl=$K8SLEASE_ENVTEST_CTL
dir=${K8SLEASE_ENVTEST_DIR:?K8SLEASE_ENVTEST_DIR is not set}
# shellcheck disable=SC1091
. "$dir/env"

fail() {
    echo "$me: FAIL: $*" >&2
    if [ -r "$dir/lb.log" ]; then
        echo "$me: the end of lb.log:" >&2
        tail -15 "$dir/lb.log" >&2
    fi
    exit 1
}

# Milliseconds since boot (for step times).
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }

# run_ctl PROC ACTION: the ctl script, bounded (its own waits are 10 s after
# a kill, 2 x 60 s for a start and 10 s until haproxy has it up).
run_ctl() {
    if command -v timeout >/dev/null 2>&1; then
        timeout 160 "$ctl" "$1" "$2"
    else
        "$ctl" "$1" "$2"
    fi
}

# code PORT PATH [MAX-TIME]: HTTP status of GET PATH (admin token) on
# 127.0.0.1:PORT, 000 when no answer within MAX-TIME s (default 10).
code() {
    curl -s --max-time "${3:-10}" -o "$dir/ha-selftest.out" -w '%{http_code}' \
        --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
        "https://127.0.0.1:$1$2" 2>/dev/null || true
}

# expect CODE PORT PATH: one request, CODE or fail.
expect() {
    got=$(code "$2" "$3")
    [ "$got" = "$1" ] ||
        fail "GET https://127.0.0.1:$2$3: HTTP $got, want $1: $(head -c 300 "$dir/ha-selftest.out" 2>/dev/null)"
}

# state SERVER: haproxy's state of SERVER (apiserver1, ...): UP, DOWN,
# "UP 1/2" (going down), "DOWN 1/2" (going up).
state() { "$ctl" lb status | awk -v s="$1" '$1 == s { $1 = ""; sub(/^ /, ""); print }'; }

# wait_state SERVER STATE MS: until haproxy has SERVER in STATE; prints
# the ms it took; fail after MS.
wait_state() {
    ws_t0=$(now_ms)
    while [ "$(state "$1")" != "$2" ]; do
        [ $(($(now_ms) - ws_t0)) -lt "$3" ] ||
            fail "haproxy has $1 '$(state "$1")', not $2, after $3 ms"
        sleep 0.1
    done
    echo $(($(now_ms) - ws_t0))
}

# sessions SERVER: haproxy's count of sessions it sent to SERVER (stot).
sessions() {
    curl -sf --max-time 2 "http://127.0.0.1:$LB_STATS_PORT/;csv" |
        awk -F, -v s="$1" '$1 == "apiservers" && $2 == s { print $8 }'
}

# Is PID gone with all its threads? (as envtest.sh checks it)
gone() {
    [ -d "/proc/$1" ] || return 0
    for t in "/proc/$1/task"/*/stat; do
        s=$(sed 's/.*) //' "$t" 2>/dev/null | cut -d' ' -f1) || continue
        case $s in '' | Z | X) ;; *) return 1 ;; esac
    done
    return 0
}

# A watch through the balancer in the background: its events go to FILE.
watcher=
start_watch() { # FILE
    : > "$1"
    curl -sN --max-time 120 --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
        "https://127.0.0.1:$LB_PORT/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=110" \
        > "$1" 2>/dev/null &
    watcher=$!
}

# put_cm NAME VALUE PORT [create]: replace (or create) ConfigMap NAME
# through 127.0.0.1:PORT, with data v=VALUE.
put_cm() {
    body="{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"$1\"},\"data\":{\"v\":\"$2\"}}"
    if [ "${4:-}" = create ]; then
        set -- "$1" "$2" "$3" POST "https://127.0.0.1:$3/api/v1/namespaces/default/configmaps"
    else
        set -- "$1" "$2" "$3" PUT "https://127.0.0.1:$3/api/v1/namespaces/default/configmaps/$1"
    fi
    c=$(curl -s --max-time 10 -o "$dir/ha-selftest.out" -w '%{http_code}' --cacert "$dir/ca.crt" \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -X "$4" --data "$body" \
        "$5" 2>/dev/null) || true
    case $c in 200 | 201) ;; *) fail "$4 configmap $1: HTTP $c: $(head -c 300 "$dir/ha-selftest.out")" ;; esac
}

# On a failure, leave the servers running for the suites that run after
# this one (best effort: continue what is stopped, start what is down).
restore() {
    status=$?
    [ -z "$watcher" ] || kill "$watcher" 2>/dev/null || true
    if [ "$status" -ne 0 ]; then
        echo "$me: failed (exit status $status); starting what is down again" >&2
        for n in apiserver apiserver2 apiserver3 lb etcd; do
            "$ctl" "$n" cont >/dev/null 2>&1 || true
        done
        "$ctl" etcd start >/dev/null 2>&1 || true
        for n in apiserver apiserver2 apiserver3 lb; do
            "$ctl" "$n" start >/dev/null 2>&1 || true
        done
    fi
}
trap restore EXIT

ports="$PORT${PORT2:+ $PORT2}${PORT3:+ $PORT3}"
# shellcheck disable=SC2153 # from $dir/env
echo "$me: $REPLICAS replicas (ports $ports), haproxy on $LB_PORT (stats $LB_STATS_PORT), balance $BALANCE"

# The ports: distinct, outside the ephemeral range.
range=$(cat /proc/sys/net/ipv4/ip_local_port_range) # not read <file: dash reads byte-wise
low=${range%%[!0-9]*} high=${range##*[!0-9]}
all="$ports $LB_PORT $LB_STATS_PORT $ETCD_PORT $ETCD_PEER_PORT"
for p in $all; do
    if [ "$p" -ge "$low" ] && [ "$p" -le "$high" ]; then
        fail "port $p is in the ephemeral range $low-$high"
    fi
    [ "$(echo "$all" | tr ' ' '\n' | grep -c "^$p\$")" = 1 ] || fail "port $p is used twice: $all"
done
[ "$SERVER_PORT" = "$LB_PORT" ] || fail "SERVER_PORT $SERVER_PORT is not haproxy's $LB_PORT"

# The kubeconfigs: the shared ones at the balancer, one per replica at it.
for k in kubeconfig kubeconfig-user kubeconfig-tokenfile; do
    grep -q "server: https://127.0.0.1:$LB_PORT\$" "$dir/$k" || fail "$k does not point at haproxy"
done
n=1
for p in $ports; do
    grep -q "server: https://127.0.0.1:$p\$" "$dir/kubeconfig-replica$n" ||
        fail "kubeconfig-replica$n does not point at port $p"
    n=$((n + 1))
done
[ ! -e "$dir/kubeconfig-replica$n" ] || fail "kubeconfig-replica$n exists with $REPLICAS replicas"

# haproxy's health check has no token: /livez must answer without one.
for p in $ports; do
    c=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
        "https://127.0.0.1:$p/livez" 2>/dev/null) || true
    [ "$c" = 200 ] || fail "GET /livez without a token on port $p: HTTP $c, want 200"
done

# Through the balancer, and each replica directly: the same objects.
cm=ha-selftest-$$
expect 200 "$LB_PORT" /readyz
expect 200 "$LB_PORT" /api/v1/namespaces/default
put_cm "$cm" 1 "$LB_PORT" create
for p in $ports; do
    expect 200 "$p" /readyz
    expect 200 "$p" "/api/v1/namespaces/default/configmaps/$cm"
done
n=1
for p in $ports; do
    [ "$(state "apiserver$n")" = UP ] || wait_state "apiserver$n" UP 5000 >/dev/null
    n=$((n + 1))
done
echo "$me: through haproxy and on each replica: ok; haproxy has all UP"

# Balance: 6 new connections through haproxy (first: all to replica 1;
# roundrobin: 6 / REPLICAS to each).
# sessions_all: haproxy's session count of each replica, in order.
sessions_all() {
    sa_n=1
    for p in $ports; do
        printf '%s ' "$(sessions "apiserver$sa_n")"
        sa_n=$((sa_n + 1))
    done
}
before=$(sessions_all)
i=0
while [ "$i" -lt 6 ]; do expect 200 "$LB_PORT" /readyz; i=$((i + 1)); done
after=$(sessions_all)
got=$(echo "$before|$after" | awk -F'|' '{ n = split($1, b, " "); split($2, a, " ")
    for (i = 1; i <= n; i++) printf "%s%d", (i > 1 ? " " : ""), a[i] - b[i] }')
case $BALANCE in
first) want="6 0 0" ;;
*) want="$((6 / REPLICAS)) $((6 / REPLICAS)) $((6 / REPLICAS))" ;;
esac
want=$(echo "$want" | cut -d' ' -f"1-$REPLICAS")
[ "$got" = "$want" ] ||
    fail "balance $BALANCE: 6 new connections went '$got' to apiserver1..$REPLICAS, want '$want'"
echo "$me: balance $BALANCE: 6 new connections: $got to apiserver1..$REPLICAS"

# A watch through haproxy, once it has listed the test ConfigMap.
watch_listing_cm() {
    start_watch "$dir/ha-selftest.watch"
    end=$(($(now_ms) + 10000))
    until grep -q "\"$cm\"" "$dir/ha-selftest.watch"; do
        [ "$(now_ms)" -lt "$end" ] || fail "the watch through haproxy did not list $cm within 10 s"
        sleep 0.1
    done
}

# Replica 1 hung. With balance first, a watch through haproxy is on it.
if [ "$BALANCE" = first ]; then
    watch_listing_cm
fi
log_lines=$(wc -l < "$dir/lb.log")
t0=$(now_ms)
t0_wall=$(date +%s%3N)
run_ctl apiserver stop || fail "ctl apiserver stop exited with status $?"
# New connections: a new request through haproxy every 250 ms, each with a
# 2 s timeout (side by side: a request sent just before haproxy marks
# replica 1 down hangs, the next ones must not), until one answers; one
# must have answered within 5 s of the stop. haproxy has replica 1 DOWN
# within 5 s.
rm -f "$dir"/ha-selftest.ok.*
tries=0 probes=
while [ $(($(now_ms) - t0)) -lt 5000 ]; do
    tries=$((tries + 1))
    (
        c=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
            -H "Authorization: Bearer $TOKEN" \
            "https://127.0.0.1:$LB_PORT/api/v1/namespaces/default" 2>/dev/null) || true
        [ "$c" != 200 ] || now_ms > "$dir/ha-selftest.ok.$tries"
    ) &
    probes="$probes $!"
    sleep 0.25
    ! ls "$dir"/ha-selftest.ok.* >/dev/null 2>&1 || break
done
for p in $probes; do wait "$p" || true; done # they end within their 2 s
first_ok=$(cat "$dir"/ha-selftest.ok.* 2>/dev/null | sort -n | head -n 1)
rm -f "$dir"/ha-selftest.ok.*
[ -n "$first_ok" ] || fail "replica 1 stopped: none of $tries new requests through haproxy answered"
served=$((first_ok - t0))
[ "$served" -le 5000 ] || fail "replica 1 stopped: the first answer through haproxy came after $served ms"
left=$((5000 - ($(now_ms) - t0)))
[ "$left" -gt 0 ] || left=1
wait_state apiserver1 DOWN "$left" >/dev/null
# When haproxy marked it DOWN, from its log (ISO time stamps).
line=$(tail -n +$((log_lines + 1)) "$dir/lb.log" | grep -m 1 "^[0-9].*apiserver1 is DOWN") ||
    fail "lb.log does not say apiserver1 is DOWN"
down=$(($(date -d "${line%% *}" +%s%3N) - t0_wall))
i=0
while [ "$i" -lt 4 ]; do
    [ "$(code "$LB_PORT" /api/v1/namespaces/default 2)" = 200 ] ||
        fail "replica 1 marked DOWN: a new connection through haproxy got no answer within 2 s"
    i=$((i + 1))
done
echo "$me: replica 1 stopped: haproxy marked it DOWN after $down ms; a new request through" \
    "haproxy answered after $served ms ($tries sent, 250 ms apart); 4 more answered"
# Continued: up again; the watch on it was left open and goes on.
t0=$(now_ms)
run_ctl apiserver cont || fail "ctl apiserver cont exited with status $?"
up=$(wait_state apiserver1 UP 10000)
echo "$me: replica 1 continued: UP again after $up ms"
if [ "$BALANCE" = first ]; then
    kill -0 "$watcher" 2>/dev/null || fail "the watch through haproxy on replica 1 ended"
    put_cm "$cm" 2 "$PORT2"
    end=$(($(now_ms) + 10000))
    until grep -q '"v":"2"' "$dir/ha-selftest.watch"; do
        [ "$(now_ms)" -lt "$end" ] ||
            fail "the watch through haproxy left open on replica 1 saw no event within 10 s after cont"
        sleep 0.1
    done
    before1=$(sessions apiserver1)
    expect 200 "$LB_PORT" /readyz
    [ "$(sessions apiserver1)" -gt "$before1" ] ||
        fail "balance first: a new connection after cont did not go to apiserver1"
    echo "$me: the watch through haproxy on replica 1 was left open and had the next event;" \
        "new connections go to replica 1 again"
fi

# Replica 2 killed: requests through haproxy go on; started again, UP.
old=$("$ctl" apiserver2 pid)
t0=$(now_ms)
run_ctl apiserver2 kill || fail "ctl apiserver2 kill exited with status $?"
gone "$old" || fail "apiserver2 (pid $old) still has running threads after ctl apiserver2 kill"
i=0
while [ "$i" -lt 6 ]; do
    [ "$(code "$LB_PORT" /api/v1/namespaces/default 2)" = 200 ] ||
        fail "replica 2 killed: a request through haproxy got no answer within 2 s"
    i=$((i + 1))
done
wait_state apiserver2 DOWN 5000 >/dev/null
down=$(($(now_ms) - t0))
t0=$(now_ms)
run_ctl apiserver2 start || fail "ctl apiserver2 start exited with status $?"
started=$(($(now_ms) - t0))
new=$("$ctl" apiserver2 pid)
if [ -z "$new" ] || [ "$new" = "$old" ]; then fail "apiserver2: pid $old, then '$new': not a new process"; fi
[ "$(state apiserver2)" = UP ] || fail "ctl apiserver2 start returned with haproxy having it '$(state apiserver2)'"
expect 200 "$PORT2" "/api/v1/namespaces/default/configmaps/$cm"
echo "$me: replica 2 killed: requests through haproxy went on, DOWN after at most $down ms;" \
    "started again (pid $old -> $new), ready and UP after $started ms"

# haproxy restarted: a watch through it ends, new connections answer.
[ -z "$watcher" ] || { kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; }
watch_listing_cm
old=$("$ctl" lb pid)
t0=$(now_ms)
run_ctl lb restart || fail "ctl lb restart exited with status $?"
restarted=$(($(now_ms) - t0))
new=$("$ctl" lb pid)
if [ -z "$new" ] || [ "$new" = "$old" ]; then fail "lb: pid $old, then '$new': not a new process"; fi
end=$(($(now_ms) + 5000))
while kill -0 "$watcher" 2>/dev/null; do
    [ "$(now_ms)" -lt "$end" ] || fail "the watch through haproxy still runs 5 s after ctl lb restart"
    sleep 0.1
done
wait "$watcher" 2>/dev/null || true
watcher=
ended=$(($(now_ms) - t0))
t0=$(now_ms)
until [ "$(code "$LB_PORT" /api/v1/namespaces/default 2)" = 200 ]; do
    [ $(($(now_ms) - t0)) -lt 5000 ] || fail "haproxy restarted: no answer through it within 5 s"
done
echo "$me: haproxy restarted (pid $old -> $new) in $restarted ms; the watch through it had" \
    "ended ($ended ms); answers through it again $(($(now_ms) - t0)) ms after"
n=1
for p in $ports; do
    wait_state "apiserver$n" UP 5000 >/dev/null
    n=$((n + 1))
done

c=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
    -H "Authorization: Bearer $TOKEN" -X DELETE \
    "https://127.0.0.1:$LB_PORT/api/v1/namespaces/default/configmaps/$cm" 2>/dev/null) || true
[ "$c" = 200 ] || fail "DELETE configmap $cm through haproxy: HTTP $c"
rm -f "$dir/ha-selftest.out" "$dir/ha-selftest.watch"
echo "$me: ok"
