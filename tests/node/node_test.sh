#!/bin/bash
# The node suite: k8slease in Pods under a real kubelet.
#
#   bash node_test.sh TEST      (inside tests/node/cluster.sh; SRC = the source tree)
#
# TEST: crash (crash failover of k8slease elect: SIGKILL, the record right
# after an election at start, the restarted container), seed (the same
# through the seed ABI: SIGKILL, then an OOM kill under a memory limit),
# frozen (the kubelet frozen: expiry only), sigterm (exit 0 in the minimal
# image), deploy (deploy/ as shipped: label, Service, delete, rollout, a
# command that cannot start), incluster (the projected token and
# deploy/rbac.yaml's RBAC, a missing verb). Each runs in a namespace of its
# own. Figures go to stdout ("figure: ..."). Without a cluster (no
# K8SLEASE_NODE_DIR) it exits 77: skipped.
set -u
TEST=${1:?usage: node_test.sh TEST}
if [ -z "${K8SLEASE_NODE_DIR:-}" ]; then
    echo "skipped: no node cluster: scripts/node-suites.sh BUILD ASSETS runs this suite on one" \
        "(a kubelet, containerd, kube-apiserver from ../shared/kube-apiserver)"
    exit 77
fi
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-node.XXXXXX")
NS=node-$TEST-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
# shellcheck source=tests/node/lib.sh
. "$SRC/tests/node/lib.sh"

cleanup() {
    stop_observers
    [ -z "${KEEP_NS:-}" ] && kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $TEST: $*"
    save_logs
    for f in "$T"/logs/*.log "$T"/*.obs; do
        [ -s "$f" ] || continue
        echo "--- ${f##*/}:"
        tail -n 20 "$f"
    done
    kc get pods -o wide 2>&1
    kc get lease -o wide 2>&1
    exit 1
}

ms() { echo $((($1) / 1000)); } # µs -> ms

# ---- crash failover ----------------------------------------------------------

# elect_pod NAME LEASE [ARGS...]: k8slease elect with crash failover, 15/10/2.
elect_pod() {
    local name=$1 lease=$2
    shift 2
    pod "$name" "$IMAGE" -- elect --lease "$NS/$lease" --crash-failover --log-level info "$@"
}

# SIGKILL of the leader's container process: the follower leads once the
# kubelet reports it, long before the Lease would expire; the restarted
# container never takes the Lease back. And a leader elected at its
# container's start has its record in the Lease within 500 ms.
test_crash() {
    local kill_us report_us elected_us first_us record_us pid
    make_namespace
    observe lease lease lease --field-selector metadata.name=cf
    observe poda pod pod --field-selector metadata.name=cf-a
    elect_pod cf-a cf
    wait_until 60 "cf-a elected" holder_is cf cf-a
    wait_until 10 "a record of cf-a in the lease" has_record cf
    # The election at start: the record reached the Lease within 500 ms of
    # the write that made cf-a holder (the kubelet reports the container
    # running about a second after it starts: the cgroup told it sooner).
    first_us=$(first_after lease 0 'spec=cf-a,0 ')
    record_us=$(first_after lease 0 'spec=cf-a,0 record=[{]')
    [ -n "$first_us" ] && [ -n "$record_us" ] || fail "no lease events of cf-a's term"
    echo "figure: record in the Lease $(ms "$record_us - $first_us") ms after the election"
    [ $((record_us - first_us)) -le 500000 ] ||
        fail "the record reached the Lease $(ms "$record_us - $first_us") ms after the election (> 500)"

    elect_pod cf-b cf
    wait_until 60 "cf-b running" running cf-b
    wait_until 20 "cf-b sees cf-a" has_log cf-b "leader=cf-a epoch=0"
    after_verified cf
    pid=$(container_pid cf-a) || fail "no pid of cf-a's container"
    kill_us=$(now_us)
    kill -KILL "$pid" || fail "kill $pid"
    wait_until 12 "cf-b elected after the kill" holder_is cf cf-b
    report_us=$(first_after poda "$kill_us" 'terminated')
    elected_us=$(first_after lease "$kill_us" 'spec=cf-b,')
    [ -n "$report_us" ] && [ -n "$elected_us" ] || fail "no report or election seen after the kill"
    echo "figure: SIGKILL: kubelet's report $(ms "$report_us - $kill_us") ms, cf-b elected $(ms "$elected_us - $kill_us") ms after the kill"
    # By the report, not by expiry (15 s after the last renewal, >= 13 s).
    [ $((elected_us - kill_us)) -lt 10000000 ] || fail "cf-b led $(ms "$elected_us - $kill_us") ms after the kill: by expiry"
    [ "$elected_us" -ge "$report_us" ] || fail "cf-b led before the kubelet's report"
    grep -q 'terminated.*"exitCode":137' "$T/poda.obs" || fail "no exitCode 137 in cf-a's status"
    # cf-a restarts in place as a follower: never holder again.
    wait_until 60 "cf-a restarted" restarted cf-a 1
    wait_until 60 "cf-a running again" running cf-a
    wait_until 20 "the restarted cf-a follows cf-b" has_log cf-a "leader=cf-b epoch=1"
    # Two retry periods of the restarted follower seeing a live holder.
    wait_until 10 "two renewals of cf-b" lines_at_least "$T/lease.obs" "spec=cf-b,1 " 3
    awk -v k="$kill_us" '$1 > k' "$T/lease.obs" | grep -q 'spec=cf-a,' &&
        fail "the restarted cf-a took the Lease back"
    holder_is cf cf-b || fail "holder is $(holder cf), not cf-b"
}

# seed_fault SIGNAL LEADER FOLLOWER REPORT WHAT: once LEADER's record is
# in Lease sd and FOLLOWER runs, send SIGNAL to LEADER's process (KILL, or
# USR1: it allocates until the OOM killer ends it); FOLLOWER must lead on
# the kubelet's report (REPORT in the Pod's state), not by expiry.
seed_fault() {
    local sig=$1 leader=$2 follower=$3 report=$4 what=$5 pid t report_us elected_us
    wait_until 10 "a record of $leader" record_is sd pod "$leader"
    wait_until 60 "$follower running" running "$follower"
    after_verified sd
    wait_until 60 "$leader running" running "$leader"
    pid=$(container_pid "$leader") || fail "no pid of $leader's container"
    t=$(now_us)
    kill "-$sig" "$pid" || fail "kill -$sig $pid"
    wait_until 12 "$follower elected after the $what" holder_is sd "$follower"
    report_us=$(first_after pods "$t" "pod=$leader .*$report")
    elected_us=$(first_after lease "$t" "spec=$follower,")
    [ -n "$report_us" ] || fail "no $report report of $leader"
    [ -n "$elected_us" ] || fail "no election seen after the $what"
    echo "figure: seed ABI, $what: report $(ms "$report_us - $t") ms, elected $(ms "$elected_us - $t") ms after the signal"
    [ $((elected_us - t)) -lt 10000000 ] || fail "led $(ms "$elected_us - $t") ms after the $what: by expiry"
}

# The seed ABI (K8SLEASE_CRASH_FAILOVER=1), in a C program of the test
# image as Mooncake's master drives it: SIGKILL, then an OOM kill under a
# memory limit (the program allocates on SIGUSR1).
test_seed() {
    make_namespace
    observe lease lease lease --field-selector metadata.name=sd
    observe pods pod pods -l k8slease-test=1
    for p in sd-a sd-b; do
        pod "$p" "$TEST_IMAGE" --limit 64Mi --env K8SLEASE_CRASH_FAILOVER=1 -- \
            /usr/lib/k8slease/nodetest/seed_leader "$NS" sd "$p"
    done
    wait_until 60 "a leader of sd" has_holder sd
    local leader follower
    leader=$(holder sd)
    follower=sd-a
    [ "$leader" = sd-a ] && follower=sd-b
    seed_fault KILL "$leader" "$follower" terminated SIGKILL
    # Now the new leader runs out of memory.
    seed_fault USR1 "$follower" "$leader" OOMKilled "OOM kill"
}

# The kubelet frozen, then the leader SIGKILLed: nobody reports the crash,
# the follower leads only when the Lease expires (5/3/1 here).
test_frozen() {
    local kill_us elected_us pid renew_s
    make_namespace
    observe lease lease lease --field-selector metadata.name=fz
    elect_pod fz-a fz --lease-duration 5s --renew-deadline 3s --retry-period 1s
    wait_until 60 "fz-a elected" holder_is fz fz-a
    elect_pod fz-b fz --lease-duration 5s --renew-deadline 3s --retry-period 1s
    wait_until 60 "fz-b running" running fz-b
    wait_until 20 "fz-b sees fz-a" has_log fz-b "leader=fz-a epoch=0"
    wait_until 10 "a record of fz-a" has_record fz
    after_verified fz
    pid=$(container_pid fz-a) || fail "no pid of fz-a's container"
    "$K8SLEASE_NODE_CTL" kubelet stop || fail "cannot freeze the kubelet"
    kill_us=$(now_us)
    kill -KILL "$pid"
    wait_until 15 "fz-b elected at expiry" holder_is fz fz-b
    "$K8SLEASE_NODE_CTL" kubelet cont
    elected_us=$(first_after lease "$kill_us" 'spec=fz-b,')
    # The last renewal of fz-a was at most a retry period (1 s) before the
    # kill: fz-b may lead only 5 s after it, so at least 4 s after the kill.
    echo "figure: kubelet frozen: fz-b elected $(ms "$elected_us - $kill_us") ms after the kill (lease 5 s)"
    [ $((elected_us - kill_us)) -ge 3900000 ] ||
        fail "fz-b led $(ms "$elected_us - $kill_us") ms after the kill: before the Lease expired"
}

# SIGTERM in the minimal image: k8slease releases and exits 0 (not 139:
# no libgcc_s there for pthread_cancel).
test_sigterm() {
    local pid code
    make_namespace
    pod st-a "$IMAGE" --never -- elect --lease "$NS/st" --label-pod "$NS/st-a"
    wait_until 60 "st-a elected" holder_is st st-a
    wait_until 20 "st-a labelled" label_is st-a role leader
    wait_until 60 "st-a running" running st-a
    pid=$(container_pid st-a) || fail "no pid of st-a's container"
    kill -TERM "$pid"
    wait_until 20 "st-a terminated" terminated st-a
    code=$(kc get pod st-a -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
    [ "$code" = 0 ] || fail "k8slease exited $code on SIGTERM (0 expected)"
    [ -z "$(holder st)" ] || fail "the Lease still names $(holder st) after the release"
    [ -z "$(kc get pod st-a -o jsonpath='{.metadata.labels.role}')" ] || fail "the label stayed on st-a"
    echo "figure: SIGTERM in the image: exit $code, released, label removed"
}

# ---- deploy/ as shipped ----------------------------------------------------

# timeline SINCE_US [UNTIL_US]: timeline.py's figures as shell variables
# (tl_leader_changes, tl_leaderless_max_ms, ...).
timeline() {
    local k v
    python3 "$SRC/tests/node/timeline.py" "$T" "$@" >"$T/timeline" || fail "timeline.py failed"
    while read -r k v; do
        eval "tl_$k=\$v"
    done <"$T/timeline"
}

leader_pod() { holder my-master; }
# The Service's EndpointSlice has exactly the holder ready.
slice_is_leader() {
    local h
    h=$(holder my-master)
    [ -n "$h" ] && [ "$(kc get endpointslice -l kubernetes.io/service-name=my-master \
        -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.targetRef.name} {end}')" = "$h " ]
}
rolled_out() { kc rollout status deployment/my-master --timeout=1s; }
# No Pod but the holder's labelled, in the resourceVersion order of events.
check_labels() {
    [ "$tl_label_violations" = 0 ] || fail "$1: a Pod that did not lead was labelled: $tl_first_violation"
}

test_deploy() {
    local t0 t1 old new ip answer
    make_namespace
    observe lease lease lease --field-selector metadata.name=my-master
    observe slice slice endpointslice -l kubernetes.io/service-name=my-master
    observe pods pod pods -l app.kubernetes.io/name=my-master
    t0=$(now_us)
    # deploy/ as shipped: the manifests, unchanged, in this namespace.
    kc apply -f "$SRC/deploy/" >/dev/null || fail "kubectl apply -f deploy/"
    wait_until 120 "3 ready replicas" rolled_out
    wait_until 30 "a leader" has_holder my-master
    wait_until 30 "the EndpointSlice naming the leader only" slice_is_leader
    old=$(leader_pod)
    label_is "$old" role leader || fail "the leader $old is not labelled role=leader"
    [ "$(kc get pods -l role=leader -o jsonpath='{.items[*].metadata.name}')" = "$old" ] ||
        fail "labelled: $(kc get pods -l role=leader -o jsonpath='{.items[*].metadata.name}'), leader $old"
    # k8slease-hello answers on the leader's port 9000 (the Service's).
    ip=$(kc get pod "$old" -o jsonpath='{.status.podIP}')
    answer=$(curl -s --max-time 5 "http://$ip:9000/") || fail "no answer on $ip:9000"
    case $answer in "leader $old epoch "*" lease $NS/my-master") ;; *) fail "k8slease-hello said \"$answer\"" ;; esac
    echo "figure: deploy/: 3 replicas, $old leads and is the Service's only endpoint; k8slease-hello: $answer"

    # kubectl delete pod of the leader: SIGTERM, release, handover.
    t1=$(now_us)
    kc delete pod "$old" --wait=false >/dev/null || fail "kubectl delete pod $old"
    wait_until 30 "a new leader" sh -c "h=\$(kubectl -n $NS get lease my-master -o jsonpath='{.spec.holderIdentity}'); [ -n \"\$h\" ] && [ \"\$h\" != $old ]"
    wait_until 30 "the EndpointSlice naming the new leader only" slice_is_leader
    new=$(leader_pod)
    timeline "$t1" "$(now_us)"
    local took
    took=$(first_after lease "$t1" "spec=$new,")
    echo "figure: delete pod: $new leads $(ms "$took - $t1") ms after the DELETE; the EndpointSlice empty at most $tl_slice_empty_max_ms ms, two ready at most $tl_slice_two_max_ms ms; leaderless at most $tl_leaderless_max_ms ms"
    check_labels "delete pod"
    [ "$tl_slice_two_max_ms" = 0 ] || fail "the EndpointSlice had two ready endpoints for $tl_slice_two_max_ms ms"
    wait_until 120 "3 ready replicas again" rolled_out

    # The leader crashes (SIGKILL of k8slease, the container's process):
    # a follower leads on the kubelet's report; the dead Pod keeps its label
    # until its restarted container removes it, listed not ready meanwhile.
    local pid dead
    dead=$(leader_pod)
    wait_until 30 "the record of $dead" record_is my-master pod "$dead"
    after_verified my-master
    pid=$(container_pid "$dead") || fail "no pid of $dead's container"
    t1=$(now_us)
    kill -KILL "$pid"
    wait_until 30 "a new leader after the crash" sh -c "h=\$(kubectl -n $NS get lease my-master -o jsonpath='{.spec.holderIdentity}'); [ -n \"\$h\" ] && [ \"\$h\" != $dead ]"
    new=$(leader_pod)
    wait_until 60 "$dead's label removed by its restarted container" label_is "$dead" role ""
    wait_until 30 "the EndpointSlice naming the new leader only" slice_is_leader
    timeline "$t1" "$(now_us)"
    took=$(first_after lease "$t1" "spec=$new,")
    local unlabelled
    unlabelled=$(awk -v since="$t1" -v p="$dead" '$1 > since && index($0, "pod=" p " role= ") { print $1; exit }' "$T/pods.obs")
    echo "figure: SIGKILL of the leader: $new leads $(ms "$took - $t1") ms after the kill; the dead Pod's label off $(ms "${unlabelled:-$t1} - $t1") ms after it (its restart); EndpointSlice empty at most $tl_slice_empty_max_ms ms, two ready at most $tl_slice_two_max_ms ms"
    [ "$tl_slice_two_max_ms" = 0 ] || fail "the EndpointSlice had two ready endpoints for $tl_slice_two_max_ms ms"
    [ $((took - t1)) -lt 10000000 ] || fail "$new led $(ms "$took - $t1") ms after the crash: by expiry"
    wait_until 120 "3 ready replicas again" rolled_out

    # kubectl rollout restart: every Pod replaced, one at a time.
    t1=$(now_us)
    kc rollout restart deployment/my-master >/dev/null || fail "kubectl rollout restart"
    kc rollout status deployment/my-master --timeout=180s >/dev/null || fail "the rollout did not finish in 180 s"
    wait_until 30 "a leader after the rollout" has_holder my-master
    wait_until 30 "the EndpointSlice naming the leader after the rollout" slice_is_leader
    timeline "$t1" "$(now_us)"
    echo "figure: rollout restart: leader changes $tl_leader_changes ($tl_leaders), leaderless at most $tl_leaderless_max_ms ms, EndpointSlice empty at most $tl_slice_empty_max_ms ms, two ready at most $tl_slice_two_max_ms ms"
    check_labels "rollout restart"
    # Planned handoff (on in a Pod): one change of leader, onto the new
    # revision, whichever Pod led and whatever the order of deletions.
    [ "$tl_leader_changes" = 1 ] ||
        fail "$tl_leader_changes changes of leader in a rollout ($tl_leaders), 1 expected with handoff"
    new=$(leader_pod)
    [ "$(kc get pod "$new" -o jsonpath='{.metadata.labels.pod-template-hash}')" = \
        "$(kc get rs -l app.kubernetes.io/name=my-master --sort-by=.metadata.creationTimestamp \
            -o jsonpath='{.items[-1:].metadata.labels.pod-template-hash}')" ] ||
        fail "the new leader $new is not of the new revision"
    [ "$tl_slice_two_max_ms" = 0 ] || fail "the EndpointSlice had two ready endpoints for $tl_slice_two_max_ms ms"

    # A command that cannot start: every elected instance exits 127 and
    # releases; no Pod but the holder's may carry the label meanwhile.
    local idx
    idx=$(kc get deployment my-master -o jsonpath='{.spec.template.spec.containers[0].args}' |
        python3 -c 'import json, sys; print(json.load(sys.stdin).index("k8slease-hello"))')
    t1=$(now_us)
    kc patch deployment my-master --type=json \
        -p "[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/args/$idx\",\"value\":\"no-such-server\"}]" \
        >/dev/null || fail "cannot patch the command"
    wait_until 90 "a Pod of the broken command to exit 127" sh -c \
        "kubectl -n $NS get pods -o jsonpath='{.items[*].status.containerStatuses[0].lastState.terminated.exitCode}' | grep -qw 127"
    # Some more terms of the churn: 20 s.
    wait_until 25 "20 s of churn" later_than $(($(date +%s) + 20))
    timeline "$t1" "$(now_us)"
    echo "figure: a command that cannot start: $tl_leader_changes terms in $(ms "$(now_us) - $t1") ms, label violations $tl_label_violations"
    check_labels "a command that cannot start"
    [ "$tl_leader_changes" -ge 2 ] || fail "only $tl_leader_changes terms while the command fails"
    save_logs
    grep -q "cannot run no-such-server" "$T"/logs/*.log || fail "no \"cannot run no-such-server\" in any log"
    # (Not over the whole test: a crashed leader's Pod keeps its label until
    # its container restarts, by design; each step is checked above.)
}

# ---- the in-cluster configuration ------------------------------------------------

# The projected token and the CA of the ServiceAccount my-master, with
# deploy/rbac.yaml's Role and nothing more; a Role without a verb, named in
# the error.
test_incluster() {
    make_namespace
    pod ic-a "$IMAGE" -- elect --lease "$NS/ic" --label-pod "$NS/ic-a" --crash-failover --log-level info
    wait_until 60 "ic-a elected" holder_is ic ic-a
    wait_until 20 "ic-a labelled" label_is ic-a role leader
    wait_until 20 "ic-a's record" has_record ic
    wait_until 20 "ic-a's line about the in-cluster configuration" \
        has_log ic-a "using in-cluster (server https://10.96.0.1:443, namespace $NS)"
    kc exec ic-a -- /usr/bin/k8slease holder --lease "$NS/ic" >"$T/holder.out" 2>&1 ||
        fail "k8slease holder in the Pod: $(cat "$T/holder.out")"
    grep -q "ic-a" "$T/holder.out" || fail "k8slease holder in the Pod: $(cat "$T/holder.out")"
    echo "figure: in-cluster: elected, labelled, crash record, holder read, with deploy/rbac.yaml's Role"

    # A Role without update on leases nor patch on pods.
    kc apply -f "$SRC/tests/node/narrow-rbac.yaml" >/dev/null || fail "cannot create the narrow Role"
    pod ic-n "$IMAGE" --sa narrow -- elect --lease "$NS/narrow" --label-pod "$NS/ic-n" --log-level info
    wait_until 60 "ic-n names the missing patch verb" has_log ic-n 'cannot patch resource "pods"'
    wait_until 60 "ic-n names the missing update verb" has_log ic-n 'cannot update resource "leases"'
    echo "figure: a Role without update and patch: the messages name them"
}

"test_$TEST"
echo "ok: $TEST"
