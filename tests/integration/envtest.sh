#!/bin/sh
# envtest.sh COMMAND [ARGS...]
# envtest.sh --ctl DIR apiserver|etcd kill|term|stop|cont|start|restart|pid|ready
#
# Start etcd + kube-apiserver from the envtest binaries (the convention of
# controller-runtime's envtest: $KUBEBUILDER_ASSETS holding kube-apiserver
# and etcd, or $TEST_ASSET_KUBE_APISERVER and $TEST_ASSET_ETCD), on loopback
# with fresh certificates and free ports, then run COMMAND with
# K8SLEASE_TEST_KUBECONFIG (and KUBECONFIG) pointing at it, e.g.
#
#   KUBEBUILDER_ASSETS=/opt/envtest/1.30 tests/integration/envtest.sh \
#       ctest --test-dir build -L integration --output-on-failure
#
# COMMAND also gets K8SLEASE_ENVTEST_CTL, the path of a script that drives
# the two processes for fault tests (process faults a real server can have):
#
#   $K8SLEASE_ENVTEST_CTL apiserver kill      SIGKILL, wait until it is gone
#   $K8SLEASE_ENVTEST_CTL apiserver start     start again (same port, flags, etcd)
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
# Every wait is bounded (start: 60 s, exit after SIGKILL: 10 s); the script
# exits non-zero with the process's last log lines when one is exceeded.
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

# Is PID alive? A zombie (killed, not yet reaped) counts as gone.
alive() {
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

# wait_gone NAME TENTHS: wait until NAME's process is gone; 1 if it is not.
wait_gone() {
    p=$(pid_of "$1")
    i=0
    while alive "$p"; do
        i=$((i + 1))
        [ "$i" -le "$2" ] || return 1
        sleep 0.1
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

# ready NAME: wait (at most 60 s) until it answers its health check.
ready() {
    # shellcheck disable=SC1091
    . "$dir/env"
    i=0
    while :; do
        p=$(pid_of "$1")
        case $1 in
        etcd) curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && return 0 ;;
        apiserver)
            curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $TOKEN" \
                "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0 ;;
        esac
        alive "$p" || die_with_log "$1" "exited"
        i=$((i + 1))
        [ "$i" -le 300 ] || die_with_log "$1" "not ready after 60 s"
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
    wait_gone "$1" 100 || echo "envtest.sh: $1 (pid $p) survives SIGKILL" >&2
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
        if alive "$p"; then
            kill -KILL "$p"
            wait_gone "$1" 100 || die_with_log "$1" "survives SIGKILL for 10 s"
        fi ;;
    term) stop_gracefully "$1" ;;
    start)
        alive "$p" && { echo "envtest.sh --ctl: $1 is already running (pid $p)" >&2; exit 1; }
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
[ -n "$apiserver" ] && [ -x "$apiserver" ] ||
    { echo "envtest.sh: no kube-apiserver: set KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER" >&2; exit 2; }
[ -n "$etcd" ] && [ -x "$etcd" ] ||
    { echo "envtest.sh: no etcd: set KUBEBUILDER_ASSETS or TEST_ASSET_ETCD" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: envtest.sh COMMAND [ARGS...]" >&2; exit 2; }
# Absolute: the ctl script runs from wherever a test runs.
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
apiserver=$(abs "$apiserver")
etcd=$(abs "$etcd")

dir=$(mktemp -d "${TMPDIR:-/tmp}/envtest.XXXXXX")
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

# A free loopback port: bind port 0 and read what the kernel chose.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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

cat > "$dir/env" <<EOF
APISERVER_BIN='$apiserver'
ETCD_BIN='$etcd'
PORT=$(free_port)
ETCD_PORT=$(free_port)
ETCD_PEER_PORT=$(free_port)
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
