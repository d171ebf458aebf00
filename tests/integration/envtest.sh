#!/bin/sh
# envtest.sh COMMAND [ARGS...]
# envtest.sh --ctl DIR apiserver|etcd kill|term|stop|cont|start|restart|pid|ready|rotate-token|wipe
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
# COMMAND also gets K8SLEASE_ENVTEST_CTL, the path of a script that drives
# the two processes for fault tests (process faults a real server can have):
#
#   $K8SLEASE_ENVTEST_CTL apiserver kill      SIGKILL, wait until it is gone
#                                  (every thread) and nothing listens on its port
#   $K8SLEASE_ENVTEST_CTL apiserver start     start again (same port, flags, etcd);
#                                  returns once /readyz is ok and namespace
#                                  "default" exists
#   $K8SLEASE_ENVTEST_CTL apiserver stop|cont SIGSTOP / SIGCONT
#   $K8SLEASE_ENVTEST_CTL etcd kill|start|stop|cont   the same for etcd (same data)
#   ... restart = kill + start; ready = wait until it answers; pid = print it
#   $K8SLEASE_ENVTEST_CTL apiserver rotate-token   a new token for the user of
#                                  kubeconfig-tokenfile, then restart
#   $K8SLEASE_ENVTEST_CTL etcd wipe   both killed, etcd's data removed, both
#                                  started: a server that lost its state
#
# Kubeconfigs in $K8SLEASE_ENVTEST_DIR: kubeconfig (system:masters token),
# kubeconfig-user (envtest-user: no groups, only what RBAC grants it),
# kubeconfig-tokenfile (system:masters, tokenFile: token-rotating).
#
# Every wait is bounded (start: 60 s until it answers, then 60 s until the
# apiserver has namespace "default"; gone and ports free after SIGKILL:
# 10 s); the script exits non-zero with the process's last log lines when
# one is exceeded or the process exits during start (e.g. its port is
# taken), and the test should then stop: the server is gone.
#
# K8SLEASE_ENVTEST_APISERVER_FLAGS adds flags to kube-apiserver (word-split),
# e.g. "--feature-gates=CoordinatedLeaderElection=true".
#
# At exit both processes get SIGCONT and SIGTERM, then SIGKILL after 3 s (a
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

# The loopback ports NAME listens on.
# shellcheck disable=SC2153 # PORT and the others come from $dir/env
ports_of() {
    # shellcheck disable=SC1091
    . "$dir/env"
    case $1 in
    apiserver) echo "$PORT" ;;
    etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
    esac
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

start_apiserver() {
    # shellcheck disable=SC1091
    . "$dir/env"
    # shellcheck disable=SC2086 # extra flags are word-split on purpose
    "$APISERVER_BIN" --advertise-address=127.0.0.1 --bind-address=127.0.0.1 \
        --secure-port="$PORT" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --tls-cert-file="$dir/apiserver.crt" --tls-private-key-file="$dir/apiserver.key" \
        --client-ca-file="$dir/ca.crt" --token-auth-file="$dir/tokens.csv" \
        --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
        --service-account-issuer="https://127.0.0.1:$PORT" \
        --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=RBAC \
        --disable-admission-plugins=ServiceAccount --allow-privileged=true \
        $APISERVER_FLAGS </dev/null >>"$dir/apiserver.log" 2>&1 &
    echo $! > "$dir/apiserver.pid"
}

# ready NAME: wait (at most 60 s) until it answers its health check; for
# the apiserver, then (at most 60 s more) until the namespace "default"
# exists: v1.24.0 on a loaded machine answers /readyz before it has made
# it, and a test's first request would get a 404.
# shellcheck disable=SC2153 # PORT and the others come from $dir/env
ready() {
    # shellcheck disable=SC1091
    . "$dir/env"
    end=$(($(date +%s) + 60))
    while :; do
        p=$(pid_of "$1")
        case $1 in
        etcd)
            curl -sf --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && return 0 ;;
        apiserver)
            curl -sf --max-time 5 --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
                "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break ;;
        esac
        alive "$p" || die_with_log "$1" "exited"
        [ "$(date +%s)" -lt "$end" ] || die_with_log "$1" "not ready after 60 s"
        sleep 0.2
    done
    end=$(($(date +%s) + 60))
    while :; do
        code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
            -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$PORT/api/v1/namespaces/default" \
            2>/dev/null) || true
        [ "$code" = 200 ] && return 0
        alive "$p" || die_with_log "$1" "exited"
        [ "$(date +%s)" -lt "$end" ] || die_with_log "$1" "/readyz is ok but GET \
/api/v1/namespaces/default still answers HTTP ${code:-000} after 60 s"
        sleep 0.2
    done
}

# stop_gracefully NAME: SIGCONT + SIGTERM, SIGKILL after 3 s, wait 10 s more.
stop_gracefully() {
    p=$(pid_of "$1")
    alive "$p" || return 0
    kill -CONT "$p" 2>/dev/null || true
    kill -TERM "$p" 2>/dev/null || true
    wait_gone "$1" 30 && return 0
    kill -KILL "$p" 2>/dev/null || true
    wait_gone "$1" 100 || echo "envtest.sh: $1 not gone 10 s after SIGKILL: $why" >&2
}

ctl() { # NAME ACTION
    case $1 in apiserver | etcd) ;; *) echo "envtest.sh --ctl: unknown process '$1' (apiserver, etcd)" >&2; exit 2 ;; esac
    p=$(pid_of "$1")
    case $2 in
    pid) echo "$p" ;;
    ready) ready "$1" ;;
    stop) alive "$p" || die_with_log "$1" "not running"; kill -STOP "$p" ;;
    cont) alive "$p" || die_with_log "$1" "not running"; kill -CONT "$p" ;;
    kill)
        # Also when it is already dying (a zombie main thread): wait until
        # its last thread is gone and its ports are free, or start fails
        # with "bind: address already in use".
        gone "$p" || kill -KILL "$p" 2>/dev/null || true
        wait_gone "$1" 100 || die_with_log "$1" "not gone 10 s after SIGKILL: $why" ;;
    term) stop_gracefully "$1" ;;
    start)
        alive "$p" && { echo "envtest.sh --ctl: $1 is already running (pid $p)" >&2; exit 1; }
        # Killed by someone else (or term): its ports may not be free yet.
        wait_ports_free "$1" 100 || { echo "envtest.sh: $1: cannot start: $why" >&2; exit 1; }
        "start_$1"
        ready "$1" ;;
    restart) ctl "$1" kill; ctl "$1" start ;;
    wipe)
        [ "$1" = etcd ] || { echo "envtest.sh --ctl: wipe is for etcd" >&2; exit 2; }
        # A server that lost its state: both killed, etcd's data removed,
        # both started again (the apiserver makes its namespaces anew).
        ctl apiserver kill
        ctl etcd kill
        rm -rf "$dir/etcd"
        ctl etcd start
        ctl apiserver start ;;
    rotate-token)
        [ "$1" = apiserver ] || { echo "envtest.sh --ctl: rotate-token is for the apiserver" >&2; exit 2; }
        # A new token for envtest-rotating: the file first (as kubelet
        # rewrites a projected token), then the server, which reads its
        # token file only at start.
        old=$(cat "$dir/token-rotating")
        new=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
        printf '%s' "$new" > "$dir/token-rotating.tmp"
        mv "$dir/token-rotating.tmp" "$dir/token-rotating"
        sed "s/^$old,/$new,/" "$dir/tokens.csv" > "$dir/tokens.csv.tmp"
        mv "$dir/tokens.csv.tmp" "$dir/tokens.csv"
        ctl apiserver restart ;;
    *) echo "envtest.sh --ctl: unknown action '$2' (kill term stop cont start restart ready pid rotate-token wipe)" >&2; exit 2 ;;
    esac
}

if [ "${1:-}" = --ctl ]; then
    [ $# -eq 4 ] || { echo "usage: envtest.sh --ctl DIR apiserver|etcd ACTION" >&2; exit 2; }
    dir=$2
    [ -f "$dir/env" ] || { echo "envtest.sh --ctl: $dir is not an envtest directory" >&2; exit 2; }
    ctl "$3" "$4"
    exit 0
fi

# ---- start both, run COMMAND, stop both -------------------------------------

apiserver=${TEST_ASSET_KUBE_APISERVER:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/kube-apiserver}}
etcd=${TEST_ASSET_ETCD:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/etcd}}
{ [ -n "$apiserver" ] && [ -x "$apiserver" ]; } ||
    { echo "envtest.sh: no kube-apiserver: set KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER" >&2; exit 2; }
{ [ -n "$etcd" ] && [ -x "$etcd" ]; } ||
    { echo "envtest.sh: no etcd: set KUBEBUILDER_ASSETS or TEST_ASSET_ETCD" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: envtest.sh COMMAND [ARGS...]" >&2; exit 2; }
# Absolute: the ctl script runs from wherever a test runs.
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
apiserver=$(abs "$apiserver")
etcd=$(abs "$etcd")

dir=$(mktemp -d "${TMPDIR:-/tmp}/envtest.XXXXXX")
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    trap - EXIT INT TERM
    stop_gracefully apiserver
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
cat > "$dir/env" <<EOF
APISERVER_BIN='$apiserver'
ETCD_BIN='$etcd'
PORT=$port
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

kubeconfig() { # FILE USER-YAML
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority: $dir/ca.crt
users:
- name: envtest
  user:
    $2
contexts:
- name: envtest
  context: {cluster: envtest, user: envtest, namespace: default}
current-context: envtest
EOF
}
kubeconfig "$dir/kubeconfig" "token: $token"
kubeconfig "$dir/kubeconfig-user" "token: $user_token"
kubeconfig "$dir/kubeconfig-tokenfile" "tokenFile: $dir/token-rotating"

start_etcd
ready etcd
start_apiserver
ready apiserver
version=$(curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
    "https://127.0.0.1:$PORT/version" | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p') || true
echo "envtest.sh: kube-apiserver ${version:-?} ready on https://127.0.0.1:$PORT" >&2

status=0
K8SLEASE_TEST_KUBECONFIG="$dir/kubeconfig" KUBECONFIG="$dir/kubeconfig" \
    K8SLEASE_ENVTEST_CTL="$dir/ctl" K8SLEASE_ENVTEST_DIR="$dir" "$@" || status=$?
exit "$status"
