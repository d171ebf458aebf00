# The node suite's shell helpers (bash: EPOCHREALTIME), sourced by
# node_test.sh and bench/node-crash.sh, inside tests/node/cluster.sh (which
# sets KUBECONFIG, K8SLEASE_NODE_DIR, K8SLEASE_NODE_CTL, K8SLEASE_NODE_CTR).
# The caller sets T (a temporary directory), NS (the test's namespace) and
# defines fail MESSAGE.
#
# Observers stamp each line a watch prints with the time it arrived (µs of
# the wall clock) and the object's resourceVersion: all of a cluster's
# objects share one resourceVersion order (etcd's), so the lines of several
# watches merge into one exact order of events (timeline.py).

IMAGE=${K8SLEASE_NODE_IMAGE:-registry.example.com/k8slease:0.1.0}
TEST_IMAGE=${K8SLEASE_NODE_TEST_IMAGE:-k8slease.local/k8slease-nodetest:0.1.0}
OBSERVERS=

now_us() { echo "${EPOCHREALTIME/./}"; }
now_ms() { echo $(($(now_us) / 1000)); }

kc() { kubectl -n "$NS" --request-timeout=10s "$@"; }

# wait_until SECONDS WHAT COMMAND...: poll COMMAND every 0.1 s; fail with
# WHAT when it has not succeeded within SECONDS.
wait_until() {
    local secs=$1 what=$2 end=$(($(now_ms) + $1 * 1000))
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$(now_ms)" -lt "$end" ] || fail "no $what within $secs s"
        sleep 0.1
    done
}

# observe NAME KIND KUBECTL-ARGS...: `kubectl get -w --output-watch-events`
# of what the arguments name, one line per event into $T/NAME.obs, as
# observe.py KIND prints them (lease, slice, pod):
#   STAMP_US RV TYPE|PAYLOAD
observe() {
    local name=$1 kind=$2
    shift 2
    (
        # No --request-timeout: it would end the watch.
        kubectl -n "$NS" get "$@" -w --output-watch-events -o json 2>>"$T/$name.err" |
            python3 -u "$SRC/tests/node/observe.py" "$kind" >"$T/$name.obs"
    ) &
    OBSERVERS="$OBSERVERS $!"
}

stop_observers() {
    local p
    for p in $OBSERVERS; do
        pkill -P "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    OBSERVERS=
}

# Lease NAME's holder ("" when none or no Lease).
holder() { kc get lease "$1" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
holder_is() { [ "$(holder "$1")" = "$2" ]; }
# The crash failover record's field FIELD in Lease NAME ("" if none).
record_field() {
    kc get lease "$1" -o jsonpath='{.metadata.annotations.k8slease\.io/holder-container}' 2>/dev/null |
        python3 -c 'import json, sys
t = sys.stdin.read()
print(json.loads(t).get(sys.argv[1], "") if t else "")' "$2"
}

# The containerID (without "containerd://") of Pod NAME's first container.
container_id() {
    local id
    id=$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
    echo "${id#*://}"
}
# The host pid of that container's main process (the node is this machine).
container_pid() {
    local id
    id=$(container_id "$1")
    [ -n "$id" ] || return 1
    id=$($K8SLEASE_NODE_CTR task ls | awk -v id="$id" '$1 == id && $3 == "RUNNING" { print $2 }')
    [ -n "$id" ] && echo "$id"
}
restarts() { kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
# Conditions for wait_until (evaluated at each poll, not once).
restarted() { [ "$(restarts "$1")" -ge "$2" ]; }
running() { [ -n "$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.running}')" ]; }
terminated() { [ -n "$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.terminated}')" ]; }
label_is() { [ "$(kc get pod "$1" -o jsonpath="{.metadata.labels.$2}")" = "$3" ]; }
has_log() { kc logs "$1" 2>/dev/null | grep -q -- "$2"; }
has_holder() { [ -n "$(holder "$1")" ]; }
record_is() { [ "$(record_field "$1" "$2")" = "$3" ]; }
has_record() { [ -n "$(record_field "$1" containerID)" ]; }
lines_at_least() { [ "$(grep -c -- "$2" "$1")" -ge "$3" ]; }
later_than() { [ "$(date +%s)" -gt "$1" ]; }

# pod NAME IMAGE [--limit MEM] [--never] [--sa SA] [--env K=V]... -- ARGS...:
# a Pod of the ServiceAccount my-master (deploy/rbac.yaml), or SA, with POD_NAME and
# POD_NAMESPACE, running IMAGE's entrypoint (k8slease) or ARGS[0] when it
# starts with '/'.
pod() {
    local name=$1 image=$2 limit= policy=Always env= cmd= args= a sa=my-master
    shift 2
    while [ $# -gt 0 ]; do
        case $1 in
        --limit) limit=$2; shift 2 ;;
        --never) policy=Never; shift ;;
        --sa) sa=$2; shift 2 ;;
        --env) env="$env    - {name: \"${2%%=*}\", value: \"${2#*=}\"}
"; shift 2 ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    case ${1:-} in /*) cmd="    command: [\"$1\"]
"; shift ;; esac
    for a in "$@"; do args="$args${args:+, }\"$a\""; done
    [ -z "$limit" ] || limit="    resources: {limits: {memory: $limit}, requests: {memory: $limit}}
"
    kc apply -f - >/dev/null <<EOF || fail "cannot create pod $name"
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {k8slease-test: "1"}}
spec:
  serviceAccountName: $sa
  restartPolicy: $policy
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: $image
    imagePullPolicy: IfNotPresent
$cmd    args: [$args]
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
$env$limit
EOF
}

# A namespace of its own, with deploy/rbac.yaml in it.
make_namespace() {
    kubectl create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"
    kc apply -f "$SRC/deploy/rbac.yaml" >/dev/null || fail "cannot apply deploy/rbac.yaml"
    wait_until 30 "ServiceAccount my-master's token" kc get serviceaccount my-master
}

# Copy every Pod's current log in $NS to $T/logs/ (the kubelet keeps only
# the newest dead container's and deletes them with the Pod).
save_logs() {
    local p
    mkdir -p "$T/logs"
    for p in $(kc get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
        kc logs "$p" --all-containers >"$T/logs/$p.log" 2>&1
        kc logs "$p" --all-containers --previous >"$T/logs/$p.previous.log" 2>/dev/null ||
            rm -f "$T/logs/$p.previous.log"
    done
}

# The wall second of the record's verifiedAt in Lease NAME.
verified_s() { date -u -d "$(record_field "$1" verifiedAt)" +%s; }
# Until the wall clock is in a later second than the record's verifiedAt: a
# termination is evidence only when it finished after it.
after_verified() {
    local v
    v=$(verified_s "$1") || fail "no verifiedAt in lease $1"
    wait_until 3 "a second after verifiedAt" later_than "$v"
}

# first_after OBS SINCE_US PATTERN: the stamp (µs) of the first line of
# $T/OBS.obs after SINCE_US whose payload matches the extended regex
# PATTERN; nothing when none.
first_after() {
    awk -v since="$2" -v pat="$3" '$1 > since { p = $0; sub(/^[^|]*\|/, "", p); if (p ~ pat) { print $1; exit } }' \
        "$T/$1.obs"
}
