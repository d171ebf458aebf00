#!/bin/bash
# demo-node.sh [BUILD] [ASSETS]   (make demo-node, as root)
#
# The demo on a real node: deploy/ as shipped, with k8slease's image, on the
# single-node cluster of tests/node/cluster.sh (kubelet, containerd,
# kube-apiserver ... from ASSETS; default ../shared/kube-apiserver's
# v1.24.0). Three replicas elect a leader, whose k8slease-hello answers with
# who leads; the leader's Pod is deleted (a release: the handover at once),
# then the next leader crashes (SIGKILL: a follower leads on the kubelet's
# report). Prints a timeline in ms; removes everything at the end.
set -u
cd "$(dirname "$0")/.."
SRC=$PWD
build=${1:-build} assets=${2:-}

if [ -z "${K8SLEASE_NODE_DIR:-}" ]; then
    assets=$(tests/node/assets.sh "$build" "$assets") || exit 2
    scripts/build-image.sh "$build" 2>/dev/null || exit 1
    echo "starting a single-node cluster (about 20 s) ..."
    K8SLEASE_NODE_ASSETS=$assets exec tests/node/cluster.sh --images "$build/image" \
        bash "$SRC/scripts/demo-node.sh" "$build" "$assets"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-demo.XXXXXX")
NS=demo
fail() { echo "demo-node.sh: $*" >&2; exit 1; }
# shellcheck source=tests/node/lib.sh
. "$SRC/tests/node/lib.sh"
trap 'stop_observers; rm -rf "$T"' EXIT
t0=$(now_ms)
say() { printf '%6d ms  %s\n' $(($(now_ms) - t0)) "$*"; }
new_leader() { local h; h=$(holder my-master); [ -n "$h" ] && [ "$h" != "$1" ]; }
hello() { curl -s --max-time 5 "http://$(kc get pod "$1" -o jsonpath='{.status.podIP}'):9000/"; }

kubectl create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"
kc apply -f deploy/ >/dev/null || fail "kubectl apply -f deploy/"
say "kubectl apply -f deploy/ (3 replicas of k8slease elect ... -- k8slease-hello)"
wait_until 120 "3 ready replicas" kc rollout status deployment/my-master --timeout=1s
wait_until 30 "a leader" has_holder my-master
leader=$(holder my-master)
say "leader: $leader; labelled role=leader: $(kc get pods -l role=leader -o jsonpath='{.items[*].metadata.name}')"
wait_until 30 "k8slease-hello" hello "$leader"
say "k8slease-hello on its port 9000: $(hello "$leader")"

t=$(now_ms)
kc delete pod "$leader" --wait=false >/dev/null
say "kubectl delete pod $leader (SIGTERM: k8slease stops the server, releases)"
wait_until 30 "a new leader" new_leader "$leader"
next=$(holder my-master)
say "leader: $next ($(($(now_ms) - t)) ms after the delete); k8slease-hello: $(hello "$next")"

wait_until 30 "$next's record in the Lease" record_is my-master pod "$next"
after_verified my-master
wait_until 60 "$next running" running "$next"
pid=$(container_pid "$next") || fail "no pid of $next's container"
t=$(now_ms)
kill -KILL "$pid"
say "SIGKILL of $next's k8slease (a crash: no release)"
wait_until 30 "a leader after the crash" new_leader "$next"
say "leader: $(holder my-master) ($(($(now_ms) - t)) ms after the kill: the kubelet's report; the Lease lasts 15 s)"
wait_until 60 "the restart of $next" restarted "$next" 1
say "$next restarted in place: a follower now (holder $(holder my-master))"
echo "done; removing the cluster"
