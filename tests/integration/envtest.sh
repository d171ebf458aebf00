#!/bin/sh
# envtest.sh COMMAND [ARGS...]
# envtest.sh --ctl DIR apiserver|apiserver2|apiserver3|etcd|lb ACTION
# envtest.sh --ctl DIR replicas
#
# Start etcd + kube-apiserver from the envtest binaries (the convention of
# controller-runtime's envtest: $KUBEBUILDER_ASSETS holding kube-apiserver
# and etcd, or $TEST_ASSET_KUBE_APISERVER and $TEST_ASSET_ETCD), on loopback
# with fresh certificates and free ports (outside the kernel's ephemeral
# range, so that no outgoing connection takes one while its server is down
# for a restart), wait until namespace "default" exists, then run COMMAND
# with K8SLEASE_TEST_KUBECONFIG (and KUBECONFIG) pointing at it, e.g.
#
#   KUBEBUILDER_ASSETS=/opt/envtest/1.30 tests/integration/envtest.sh \
#       ctest --test-dir build -L integration --output-on-failure
#
# K8SLEASE_ENVTEST_REPLICAS=2 or 3 starts the shape of a production control
# plane instead (kubeadm's HA guide): that many kube-apiservers on the one
# etcd (each its own port; same certificates, tokens and flags) behind one
# haproxy (Debian package haproxy) in TCP mode that health-checks each with
# GET /livez over TLS every second (down after 2 failed checks of at most
# 1 s, up again after 2 good ones; sessions to a server marked down are left
# open; client and server timeouts of 1 h, so watches are not cut). The
# kubeconfigs then point at haproxy (K8SLEASE_ENVTEST_LB_CHECK_MS sets the
# check interval and timeout, 1000 by default). K8SLEASE_ENVTEST_BALANCE=roundrobin
# (default) or first (every connection to replica 1 while haproxy has it
# up, the next replica only when it is down) is haproxy's balance. Neither
# variable is passed on to COMMAND (see $K8SLEASE_ENVTEST_DIR/env).
#
# COMMAND also gets K8SLEASE_ENVTEST_CTL, the path of a script that drives
# the processes for fault tests (process faults a real server can have):
#
#   $K8SLEASE_ENVTEST_CTL apiserver kill      SIGKILL, wait until it is gone
#                                  (every thread) and nothing listens on its port
#   $K8SLEASE_ENVTEST_CTL apiserver start     start again (same port, flags, etcd);
#                                  returns once /readyz is ok and namespace
#                                  "default" exists (with replicas, also
#                                  once haproxy has it up again, at most 10 s)
#   $K8SLEASE_ENVTEST_CTL apiserver stop|cont SIGSTOP / SIGCONT (a hung server)
#   $K8SLEASE_ENVTEST_CTL etcd kill|start|stop|cont   the same for etcd (same data)
#   ... restart = kill + start; term = SIGTERM (SIGKILL after 3 s);
#   ready = wait until it answers; pid = print it
#   $K8SLEASE_ENVTEST_CTL apiserver rotate-token   a new token for the user of
#                                  kubeconfig-tokenfile, then restart (every
#                                  replica, one after the other)
#   $K8SLEASE_ENVTEST_CTL etcd wipe   all killed, etcd's data removed, all
#                                  started: a server that lost its state
#   $K8SLEASE_ENVTEST_CTL replicas    print the number of kube-apiservers
#
# With replicas, "apiserver" (or "apiserver1") is replica 1 and
# "apiserver2", "apiserver3" the others, with the same actions; "lb" is
# haproxy: kill, start, restart (kill + start on the same port: every
# connection through it ends), term, stop, cont, pid, ready (a request
# through it answers), and status (each replica's state as haproxy has it:
# "apiserver1 UP", "apiserver2 DOWN", ...).
#
# Kubeconfigs in $K8SLEASE_ENVTEST_DIR: kubeconfig (system:masters token),
# kubeconfig-user (envtest-user: no groups, only what RBAC grants it),
# kubeconfig-tokenfile (system:masters, tokenFile: token-rotating),
# kubeconfig-cert (system:masters, client certificate client.crt and key
# client.key, signed by ca.crt), all at
# the balancer when there are replicas; kubeconfig-replica1 ... -replicaN
# (system:masters) each at one kube-apiserver directly. $K8SLEASE_ENVTEST_DIR/env
# has the ports: PORT (replica 1), PORT2, PORT3, LB_PORT (haproxy),
# LB_STATS_PORT (haproxy's stats page, http://127.0.0.1:LB_STATS_PORT/),
# SERVER_PORT (where the kubeconfigs point), and REPLICAS, BALANCE. The
# logs are there too: etcd.log, apiserver.log, apiserver2.log, ..., lb.log.
#
# Every wait is bounded (start: 60 s until it answers, then 60 s until the
# apiserver has namespace "default"; gone and ports free after SIGKILL:
# 10 s; haproxy has a started replica up: 10 s); the script exits non-zero
# with the process's last log lines when one is exceeded or the process
# exits during start (e.g. its port is taken), and the test should then
# stop: the server is gone.
#
# K8SLEASE_ENVTEST_APISERVER_FLAGS adds flags to kube-apiserver (word-split),
# e.g. "--feature-gates=CoordinatedLeaderElection=true".
#
# At exit all processes get SIGCONT and SIGTERM (haproxy and the
# kube-apiservers first, then etcd), then SIGKILL after 3 s (a
# kube-apiserver waits for open watches on SIGTERM, longer still once etcd
# is gone): the script never hangs. Everything is removed at exit, unless
# K8SLEASE_ENVTEST_KEEP is set (the directory is printed).
set -eu

# ---- process control (also used by --ctl) ---------------------------------

# Is PID alive (running)? A zombie (killed, not yet reaped) counts as not
# running; see gone for when its sockets are released.
alive() {
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# Has PID released everything? Not the same as "not alive": when a
# multi-threaded process (Go's kube-apiserver, etcd) is killed, its main
# thread can be a zombie while other threads are still exiting, and the
# sockets are closed only when the last thread is gone. Gone = no
# /proc/PID, or only zombie threads left in /proc/PID/task.
gone() {
    [ -n "$1" ] && [ -d "/proc/$1" ] || return 0
    for t in "/proc/$1/task"/*/stat; do
        state=$(sed 's/.*) //' "$t" 2>/dev/null | cut -d' ' -f1) || continue
        case $state in '' | Z | X) ;; *) return 1 ;; esac
    done
    return 0
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

# The loopback ports NAME listens on (its main one first).
# shellcheck disable=SC2153 # PORT and the others come from $dir/env
ports_of() {
    # shellcheck disable=SC1091
    . "$dir/env"
    case $1 in
    apiserver) echo "$PORT" ;;
    apiserver2) echo "$PORT2" ;;
    apiserver3) echo "$PORT3" ;;
    lb) echo "$LB_PORT $LB_STATS_PORT" ;;
    etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
    esac
}

# The names of the kube-apiservers: apiserver (replica 1), apiserver2, ...
# shellcheck disable=SC2153 # REPLICAS comes from $dir/env
apiservers() {
    # shellcheck disable=SC1091
    . "$dir/env"
    as_names=apiserver
    as_i=2
    while [ "$as_i" -le "$REPLICAS" ]; do
        as_names="$as_names apiserver$as_i"
        as_i=$((as_i + 1))
    done
    echo "$as_names"
}

# Does anything LISTEN (state 0A) on TCP port PORT, IPv4 or IPv6?
listening() {
    hex=$(printf '%04X' "$1")
    for f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$f" ] || continue
        awk -v port=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == port {
                found = 1
            }
            END { exit !found }' "$f" && return 0
    done
    return 1
}

# wait_gone NAME TENTHS: wait until NAME's process is gone (all its
# threads) and nothing listens on its ports any more, so that it can start
# again on them. 1 if that takes longer, with the reason in $why.
wait_gone() {
    p=$(pid_of "$1")
    i=0
    while ! gone "$p"; do
        i=$((i + 1))
        if [ "$i" -gt "$2" ]; then
            why="pid $p still has running threads after $(($2 / 10)) s"
            return 1
        fi
        sleep 0.1
    done
    wait_ports_free "$1" $(($2 - i))
}

# wait_ports_free NAME TENTHS: wait until nothing listens on NAME's ports;
# 1 if that takes longer, with the reason in $why.
wait_ports_free() {
    i=0
    for port in $(ports_of "$1"); do
        while listening "$port"; do
            i=$((i + 1))
            if [ "$i" -gt "$2" ]; then
                why="port $port still has a listener after $(($2 / 10)) s"
                return 1
            fi
            sleep 0.1
        done
    done
    return 0
}

die_with_log() { # NAME MESSAGE
    echo "envtest.sh: $1: $2; its log:" >&2
    tail -20 "$dir/$1.log" >&2 2>/dev/null || true
    exit 1
}

start_etcd() {
    # shellcheck disable=SC1091
    . "$dir/env"
    "$ETCD_BIN" --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
        </dev/null >>"$dir/etcd.log" 2>&1 &
    echo $! > "$dir/etcd.pid"
}

# start_apiserver NAME: replica NAME (apiserver, apiserver2, ...) on its
# port. The replicas differ only in their port: one issuer (where the
# kubeconfigs point), so that a service-account token of one is valid on
# every other, as in a real HA control plane. With replicas, no endpoint
# reconciler: replicas of one address on different ports would rewrite the
# Endpoints of Service "kubernetes" with their own port every 10 s, which
# replicas on different hosts do not do. (They do share one identity Lease,
# kube-system/apiserver-<hash of the host name>, as the host is the same.)
start_apiserver() {
    # shellcheck disable=SC1091
    . "$dir/env"
    sa_port=$(ports_of "$1")
    sa_flags=
    [ "$REPLICAS" -eq 1 ] || sa_flags=--endpoint-reconciler-type=none
    # shellcheck disable=SC2086 # extra flags are word-split on purpose
    "$APISERVER_BIN" --advertise-address=127.0.0.1 --bind-address=127.0.0.1 \
        --secure-port="$sa_port" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --tls-cert-file="$dir/apiserver.crt" --tls-private-key-file="$dir/apiserver.key" \
        --client-ca-file="$dir/ca.crt" --token-auth-file="$dir/tokens.csv" \
        --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
        --service-account-issuer="https://127.0.0.1:$SERVER_PORT" \
        --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=RBAC \
        --disable-admission-plugins=ServiceAccount --allow-privileged=true \
        $sa_flags $APISERVER_FLAGS </dev/null >>"$dir/$1.log" 2>&1 &
    echo $! > "$dir/$1.pid"
}

# haproxy in the foreground (-db: no daemon, so its pid is ours and its log
# goes to lb.log), with the configuration written at setup (haproxy.cfg).
# shellcheck disable=SC2317 # called as start_$name
start_lb() {
    # shellcheck disable=SC1091
    . "$dir/env"
    "$HAPROXY_BIN" -db -f "$dir/haproxy.cfg" </dev/null >>"$dir/lb.log" 2>&1 &
    echo $! > "$dir/lb.pid"
}

# ready NAME: wait (at most 60 s) until it answers its health check; for
# an apiserver (or the balancer: a request through it), then (at most 60 s
# more) until the namespace "default" exists: v1.24.0 on a loaded machine
# answers /readyz before it has made it, and a test's first request would
# get a 404.
# shellcheck disable=SC2153 # PORT and the others come from $dir/env
ready() {
    # shellcheck disable=SC1091
    . "$dir/env"
    rd_port=$(ports_of "$1" | cut -d' ' -f1)
    end=$(($(date +%s) + 60))
    while :; do
        p=$(pid_of "$1")
        case $1 in
        etcd)
            curl -sf --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && return 0 ;;
        *)
            curl -sf --max-time 5 --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
                "https://127.0.0.1:$rd_port/readyz" >/dev/null 2>&1 && break ;;
        esac
        alive "$p" || die_with_log "$1" "exited"
        [ "$(date +%s)" -lt "$end" ] || die_with_log "$1" "not ready after 60 s"
        sleep 0.2
    done
    end=$(($(date +%s) + 60))
    while :; do
        code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
            -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$rd_port/api/v1/namespaces/default" \
            2>/dev/null) || true
        [ "$code" = 200 ] && return 0
        alive "$p" || die_with_log "$1" "exited"
        [ "$(date +%s)" -lt "$end" ] || die_with_log "$1" "/readyz is ok but GET \
/api/v1/namespaces/default still answers HTTP ${code:-000} after 60 s"
        sleep 0.2
    done
}

# lb_status: each replica's state as haproxy has it, one "NAME STATE" a
# line (apiserver1 UP, apiserver2 DOWN, "UP 1/2" going down, "DOWN 1/2"
# going up); 1 when its stats page does not answer within 2 s.
lb_status() {
    # shellcheck disable=SC1091
    . "$dir/env"
    ls_csv=$(curl -sf --max-time 2 "http://127.0.0.1:$LB_STATS_PORT/;csv") || return 1
    printf '%s\n' "$ls_csv" | awk -F, '$1 == "apiservers" && $2 != "BACKEND" { print $2, $18 }'
}

# lb_wait_up NAME: with replicas, wait (at most 10 s) until haproxy has the
# started replica NAME up again (2 good checks, 1 s apart), so that new
# connections can reach it when start returns. Nothing to wait for when
# haproxy is not running or does not answer (killed or stopped by a test).
lb_wait_up() {
    # shellcheck disable=SC1091
    . "$dir/env"
    [ "$REPLICAS" -gt 1 ] || return 0
    case $1 in apiserver) lw_srv=apiserver1 ;; *) lw_srv=$1 ;; esac
    lw_end=$(($(date +%s) + 10))
    while :; do
        alive "$(pid_of lb)" || return 0
        lw_status=$(lb_status) || return 0
        lw_state=$(printf '%s\n' "$lw_status" | awk -v s="$lw_srv" '$1 == s { print $2 }')
        [ "$lw_state" = UP ] && return 0
        [ "$(date +%s)" -lt "$lw_end" ] ||
            die_with_log lb "$1 is ready, but haproxy has it ${lw_state:-unknown}, not UP, after 10 s"
        sleep 0.2
    done
}

# start_many NAME...: start each (not running; its ports free within 10 s),
# then wait until each is ready: replicas start side by side.
start_many() {
    for sm_n in "$@"; do
        alive "$(pid_of "$sm_n")" &&
            { echo "envtest.sh --ctl: $sm_n is already running (pid $(pid_of "$sm_n"))" >&2; exit 1; }
        # Killed by someone else (or term): its ports may not be free yet.
        wait_ports_free "$sm_n" 100 || { echo "envtest.sh: $sm_n: cannot start: $why" >&2; exit 1; }
        case $sm_n in apiserver*) start_apiserver "$sm_n" ;; *) "start_$sm_n" ;; esac
    done
    for sm_n in "$@"; do
        ready "$sm_n"
    done
    for sm_n in "$@"; do
        case $sm_n in apiserver*) lb_wait_up "$sm_n" ;; esac
    done
}

# stop_gracefully NAME...: SIGCONT + SIGTERM to each, SIGKILL after 3 s,
# wait 10 s more.
stop_gracefully() {
    sg_names=
    for sg_n in "$@"; do
        sg_p=$(pid_of "$sg_n")
        alive "$sg_p" || continue
        kill -CONT "$sg_p" 2>/dev/null || true
        kill -TERM "$sg_p" 2>/dev/null || true
        sg_names="$sg_names $sg_n"
    done
    for sg_n in $sg_names; do
        wait_gone "$sg_n" 30 && continue
        kill -KILL "$(pid_of "$sg_n")" 2>/dev/null || true
        wait_gone "$sg_n" 100 || echo "envtest.sh: $sg_n not gone 10 s after SIGKILL: $why" >&2
    done
}

ctl() { # NAME ACTION
    # shellcheck disable=SC1091
    . "$dir/env"
    case $1 in apiserver1) set -- apiserver "$2" ;; esac
    case $1 in
    apiserver | etcd) ;;
    apiserver2 | apiserver3 | lb)
        case $1 in lb) ctl_need=2 ;; *) ctl_need=${1#apiserver} ;; esac
        [ "$REPLICAS" -ge "$ctl_need" ] || {
            echo "envtest.sh --ctl: no process '$1': K8SLEASE_ENVTEST_REPLICAS=$REPLICAS" >&2
            exit 2
        } ;;
    *)
        echo "envtest.sh --ctl: unknown process '$1' (apiserver, etcd; with replicas" \
            "apiserver2, apiserver3, lb)" >&2
        exit 2 ;;
    esac
    p=$(pid_of "$1")
    case $2 in
    pid) echo "$p" ;;
    ready)
        ready "$1"
        # A replica is ready for clients once the balancer sends to it.
        case $1 in apiserver*) lb_wait_up "$1" ;; esac ;;
    stop) alive "$p" || die_with_log "$1" "not running"; kill -STOP "$p" ;;
    cont) alive "$p" || die_with_log "$1" "not running"; kill -CONT "$p" ;;
    kill)
        # Also when it is already dying (a zombie main thread): wait until
        # its last thread is gone and its ports are free, or start fails
        # with "bind: address already in use".
        gone "$p" || kill -KILL "$p" 2>/dev/null || true
        wait_gone "$1" 100 || die_with_log "$1" "not gone 10 s after SIGKILL: $why" ;;
    term) stop_gracefully "$1" ;;
    start) start_many "$1" ;;
    restart) ctl "$1" kill; ctl "$1" start ;;
    status)
        [ "$1" = lb ] || { echo "envtest.sh --ctl: status is for lb" >&2; exit 2; }
        lb_status || die_with_log lb "its stats page (port $LB_STATS_PORT) does not answer" ;;
    wipe)
        [ "$1" = etcd ] || { echo "envtest.sh --ctl: wipe is for etcd" >&2; exit 2; }
        # A server that lost its state: all killed, etcd's data removed,
        # all started again (the apiservers make their namespaces anew).
        for wp_n in $(apiservers); do ctl "$wp_n" kill; done
        ctl etcd kill
        rm -rf "$dir/etcd"
        ctl etcd start
        # shellcheck disable=SC2046 # the names, word-split
        start_many $(apiservers) ;;
    rotate-token)
        case $1 in apiserver*) ;; *) echo "envtest.sh --ctl: rotate-token is for the apiserver" >&2; exit 2 ;; esac
        # A new token for envtest-rotating: the file first (as kubelet
        # rewrites a projected token), then the servers, which read their
        # token file only at start (one after the other, as a rolling
        # restart would).
        old=$(cat "$dir/token-rotating")
        new=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
        printf '%s' "$new" > "$dir/token-rotating.tmp"
        mv "$dir/token-rotating.tmp" "$dir/token-rotating"
        sed "s/^$old,/$new,/" "$dir/tokens.csv" > "$dir/tokens.csv.tmp"
        mv "$dir/tokens.csv.tmp" "$dir/tokens.csv"
        for rt_n in $(apiservers); do ctl "$rt_n" restart; done ;;
    *) echo "envtest.sh --ctl: unknown action '$2' (kill term stop cont start restart ready pid rotate-token wipe status)" >&2; exit 2 ;;
    esac
}

if [ "${1:-}" = --ctl ]; then
    if [ $# -lt 3 ] || [ -z "$2" ]; then
        echo "usage: envtest.sh --ctl DIR apiserver|apiserver2|apiserver3|etcd|lb ACTION | replicas" >&2
        exit 2
    fi
    dir=$2
    [ -f "$dir/env" ] || { echo "envtest.sh --ctl: $dir is not an envtest directory" >&2; exit 2; }
    if [ $# -eq 3 ] && [ "$3" = replicas ]; then
        # shellcheck disable=SC1091
        . "$dir/env"
        echo "$REPLICAS"
        exit 0
    fi
    [ $# -eq 4 ] || { echo "usage: envtest.sh --ctl DIR apiserver|apiserver2|apiserver3|etcd|lb ACTION | replicas" >&2; exit 2; }
    ctl "$3" "$4"
    exit 0
fi

# ---- start them, run COMMAND, stop them -------------------------------------

apiserver=${TEST_ASSET_KUBE_APISERVER:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/kube-apiserver}}
etcd=${TEST_ASSET_ETCD:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/etcd}}
{ [ -n "$apiserver" ] && [ -x "$apiserver" ]; } ||
    { echo "envtest.sh: no kube-apiserver: set KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER" >&2; exit 2; }
{ [ -n "$etcd" ] && [ -x "$etcd" ]; } ||
    { echo "envtest.sh: no etcd: set KUBEBUILDER_ASSETS or TEST_ASSET_ETCD" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: envtest.sh COMMAND [ARGS...]" >&2; exit 2; }
replicas=${K8SLEASE_ENVTEST_REPLICAS:-1}
case $replicas in
1 | 2 | 3) ;;
*) echo "envtest.sh: K8SLEASE_ENVTEST_REPLICAS='$replicas': 1, 2 or 3" >&2; exit 2 ;;
esac
balance=${K8SLEASE_ENVTEST_BALANCE:-roundrobin}
case $balance in
first | roundrobin) ;;
*) echo "envtest.sh: K8SLEASE_ENVTEST_BALANCE='$balance': first or roundrobin" >&2; exit 2 ;;
esac
lb_check_ms=${K8SLEASE_ENVTEST_LB_CHECK_MS:-1000}
case $lb_check_ms in
'' | *[!0-9]*) echo "envtest.sh: K8SLEASE_ENVTEST_LB_CHECK_MS='$lb_check_ms': milliseconds" >&2; exit 2 ;;
esac
# Not passed on: an envtest.sh that COMMAND runs (test_e2e_external's, with
# a stand-in server per replica that would share nothing) starts one
# kube-apiserver unless told otherwise. COMMAND finds them in
# $K8SLEASE_ENVTEST_DIR/env and `$K8SLEASE_ENVTEST_CTL replicas`.
unset K8SLEASE_ENVTEST_REPLICAS K8SLEASE_ENVTEST_BALANCE K8SLEASE_ENVTEST_LB_CHECK_MS
haproxy=
if [ "$replicas" -gt 1 ]; then
    # Debian puts it in /usr/sbin, which a user's PATH may not have.
    haproxy=$(command -v haproxy 2>/dev/null) || haproxy=/usr/sbin/haproxy
    [ -x "$haproxy" ] || {
        echo "envtest.sh: K8SLEASE_ENVTEST_REPLICAS=$replicas needs haproxy (Debian package" \
            "haproxy; scripts/install-deps.sh installs it)" >&2
        exit 2
    }
fi
# Absolute: the ctl script runs from wherever a test runs.
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
apiserver=$(abs "$apiserver")
etcd=$(abs "$etcd")
# COMMAND may run envtest.sh again from another directory (the HA selftest
# under a single-apiserver run): it finds the same binaries by absolute path.
export TEST_ASSET_KUBE_APISERVER="$apiserver" TEST_ASSET_ETCD="$etcd"

dir=$(mktemp -d "${TMPDIR:-/tmp}/envtest.XXXXXX")
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    trap - EXIT INT TERM
    # The balancer and the apiservers side by side, then etcd (the
    # apiservers' graceful stop needs it).
    stop_gracefully lb apiserver apiserver2 apiserver3
    stop_gracefully etcd
    if [ -n "${K8SLEASE_ENVTEST_KEEP:-}" ]; then
        echo "envtest.sh: kept $dir" >&2
    else
        rm -rf "$dir"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port [TAKEN...]: a free loopback port, not one of TAKEN. Not from the
# kernel's ephemeral range (ip_local_port_range, e.g. 32768-60999), where
# any outgoing connection may take it while the server is down for a
# restart: a random one in 10000..low-1 or high+1..65535, checked by
# binding it on 127.0.0.1 (python3) or, without python3, by finding no
# listener in /proc/net; 50 tries.
free_port() {
    # Not `read <file`: dash reads a byte at a time, and a sysctl file
    # answers only its first read.
    range=$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || range="32768 60999"
    low=${range%%[!0-9]*} high=${range##*[!0-9]}
    below=$((low > 10000 ? low - 10000 : 0))
    above=$((high < 65535 ? 65535 - high : 0))
    if [ $((below + above)) -le 0 ]; then
        echo "envtest.sh: no ports outside the ephemeral range $low-$high" >&2
        return 1
    fi
    tries=0
    while [ "$tries" -lt 50 ]; do
        tries=$((tries + 1))
        r=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
        k=$((r % (below + above)))
        if [ "$k" -lt "$below" ]; then port=$((10000 + k)); else port=$((high + 1 + k - below)); fi
        case " $* " in *" $port "*) continue ;; esac
        if command -v python3 >/dev/null 2>&1; then
            python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' \
                "$port" 2>/dev/null || continue
        else
            ! listening "$port" || continue
        fi
        echo "$port"
        return 0
    done
    echo "envtest.sh: no free loopback port outside $low-$high after 50 tries" >&2
    return 1
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=envtest-ca -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kube-apiserver \
    -keyout "$dir/apiserver.key" -out "$dir/apiserver.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$dir/san.ext"
openssl x509 -req -in "$dir/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/san.ext" -out "$dir/apiserver.crt" 2>/dev/null
openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
# A client certificate of an admin (kubeconfig-cert): the apiserver trusts
# ca.crt for clients too (--client-ca-file).
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/O=system:masters/CN=envtest-cert" -keyout "$dir/client.key" \
    -out "$dir/client.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > "$dir/client.ext"
openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/client.ext" -out "$dir/client.crt" 2>/dev/null
new_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
token=$(new_token)
user_token=$(new_token)
rotating_token=$(new_token)
# The admin (system:masters); a user without groups, for RBAC tests
# (kubeconfig-user); an admin whose token rotates (kubeconfig-tokenfile
# reads it from the file token-rotating; `ctl apiserver rotate-token`).
cat > "$dir/tokens.csv" <<EOF
$token,envtest-admin,envtest-admin,system:masters
$user_token,envtest-user,envtest-user
$rotating_token,envtest-rotating,envtest-rotating,system:masters
EOF
printf '%s' "$rotating_token" > "$dir/token-rotating"

port=$(free_port)
etcd_port=$(free_port "$port")
etcd_peer_port=$(free_port "$port" "$etcd_port")
taken="$port $etcd_port $etcd_peer_port"
port2='' port3='' lb_port='' lb_stats_port=''
if [ "$replicas" -ge 2 ]; then
    # shellcheck disable=SC2086 # the taken ports, word-split
    port2=$(free_port $taken)
    taken="$taken $port2"
    if [ "$replicas" -ge 3 ]; then
        # shellcheck disable=SC2086
        port3=$(free_port $taken)
        taken="$taken $port3"
    fi
    # shellcheck disable=SC2086
    lb_port=$(free_port $taken)
    taken="$taken $lb_port"
    # shellcheck disable=SC2086
    lb_stats_port=$(free_port $taken)
fi
cat > "$dir/env" <<EOF
APISERVER_BIN='$apiserver'
ETCD_BIN='$etcd'
HAPROXY_BIN='$haproxy'
REPLICAS=$replicas
BALANCE=$balance
LB_CHECK_MS=$lb_check_ms
PORT=$port
PORT2=$port2
PORT3=$port3
LB_PORT=$lb_port
LB_STATS_PORT=$lb_stats_port
SERVER_PORT=${lb_port:-$port}
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$etcd_peer_port
TOKEN=$token
APISERVER_FLAGS='${K8SLEASE_ENVTEST_APISERVER_FLAGS:-}'
EOF
# shellcheck disable=SC1091
. "$dir/env"
here=$(cd "$(dirname "$0")" && pwd)
printf '#!/bin/sh\nexec "%s/envtest.sh" --ctl "%s" "$@"\n' "$here" "$dir" > "$dir/ctl"
chmod +x "$dir/ctl"

kubeconfig() { # FILE PORT USER-YAML
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:$2
    certificate-authority: $dir/ca.crt
users:
- name: envtest
  user:
    $3
contexts:
- name: envtest
  context: {cluster: envtest, user: envtest, namespace: default}
current-context: envtest
EOF
}
kubeconfig "$dir/kubeconfig" "$SERVER_PORT" "token: $token"
kubeconfig "$dir/kubeconfig-user" "$SERVER_PORT" "token: $user_token"
kubeconfig "$dir/kubeconfig-tokenfile" "$SERVER_PORT" "tokenFile: $dir/token-rotating"
kubeconfig "$dir/kubeconfig-cert" "$SERVER_PORT" "client-certificate: $dir/client.crt
    client-key: $dir/client.key"
n=1
for p in $PORT $PORT2 $PORT3; do
    kubeconfig "$dir/kubeconfig-replica$n" "$p" "token: $token"
    n=$((n + 1))
done

if [ "$REPLICAS" -gt 1 ]; then
    # As kubeadm's HA guide (ha-considerations.md) sets up haproxy before
    # kube-apiservers: TCP passthrough (the clients' TLS ends at the
    # apiserver), health checks GET /livez over TLS (allowed without a token:
    # system:public-info-viewer), redispatch of a refused connection to
    # another replica; here checks every second, a replica down after 2
    # failed checks of at most 1 s and up after 2 good ones, and timeouts of
    # 1 h so that watches are not cut. Sessions to a replica marked down are
    # left open (haproxy's default: no on-marked-down shutdown-sessions), as
    # a real balancer leaves a client on a hung server.
    # shellcheck disable=SC2153 # BALANCE and the ports come from $dir/env
    {
        cat <<EOF
global
    log stdout format iso local0
    maxconn 4096

defaults
    mode tcp
    log global
    maxconn 4096
    option redispatch
    retries 1
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout check ${LB_CHECK_MS:-1000}ms

frontend apiserver
    bind 127.0.0.1:$LB_PORT
    option tcplog
    default_backend apiservers

backend apiservers
    balance $BALANCE
    option httpchk GET /livez
    http-check expect status 200
    option log-health-checks
EOF
        n=1
        for p in $PORT $PORT2 $PORT3; do
            echo "    server apiserver$n 127.0.0.1:$p check check-ssl verify none inter ${LB_CHECK_MS:-1000}ms fall 2 rise 2"
            n=$((n + 1))
        done
        cat <<EOF

# Each replica's state as haproxy has it (envtest.sh --ctl DIR lb status).
frontend stats
    mode http
    bind 127.0.0.1:$LB_STATS_PORT
    timeout client 10s
    stats enable
    stats uri /
EOF
    } > "$dir/haproxy.cfg"
    "$HAPROXY_BIN" -c -q -f "$dir/haproxy.cfg" >"$dir/lb.log" 2>&1 ||
        die_with_log lb "haproxy rejects $dir/haproxy.cfg"
fi

start_etcd
ready etcd
# shellcheck disable=SC2046 # the names, word-split
start_many $(apiservers)
version=$(curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
    "https://127.0.0.1:$PORT/version" | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p') || true
if [ "$REPLICAS" -gt 1 ]; then
    start_many lb
    # shellcheck disable=SC2046
    for n in $(apiservers); do lb_wait_up "$n"; done
    {
        echo "envtest.sh: $REPLICAS kube-apiservers ${version:-?} on one etcd behind haproxy (balance $BALANCE):"
        echo "envtest.sh:   https://127.0.0.1:$LB_PORT  lb, haproxy (kubeconfig, kubeconfig-user," \
            "kubeconfig-tokenfile); stats http://127.0.0.1:$LB_STATS_PORT/"
        n=1
        for p in $PORT $PORT2 $PORT3; do
            name=apiserver$n
            [ "$n" -gt 1 ] || name="apiserver (replica 1)"
            echo "envtest.sh:   https://127.0.0.1:$p  $name (kubeconfig-replica$n)"
            n=$((n + 1))
        done
        echo "envtest.sh:   http://127.0.0.1:$ETCD_PORT  etcd"
    } >&2
else
    echo "envtest.sh: kube-apiserver ${version:-?} ready on https://127.0.0.1:$PORT" >&2
fi

status=0
K8SLEASE_TEST_KUBECONFIG="$dir/kubeconfig" KUBECONFIG="$dir/kubeconfig" \
    K8SLEASE_ENVTEST_CTL="$dir/ctl" K8SLEASE_ENVTEST_DIR="$dir" "$@" || status=$?
exit "$status"
