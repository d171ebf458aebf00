#!/bin/bash
# Benchmark 9: rolling updates on a real node, with planned handoff.
#
#   bench/node-rollout.sh [BUILD] [ASSETS] [--rollouts N] [--handoffs N]
#                         [--modes "handoff release polling"] [--out DIR]
#                                                        (make bench-rollout)
#
# The single-node cluster of tests/node/cluster.sh (ASSETS: the node's
# binaries, default ../shared/kube-apiserver's v1.24.0) with the images of
# scripts/build-image.sh; deploy/ as shipped (3 replicas of `k8slease elect
# --label-pod ... --crash-failover -- k8slease-hello`, maxSurge 1,
# maxUnavailable 0, the Service on role=leader). N `kubectl rollout restart`
# (20 by default) in each of three modes:
#   handoff   deploy/ as shipped: on SIGTERM the leader hands the Lease over
#             to the best candidate (the newest revision ...)
#   release   --no-handoff: a plain release, the fastest follower takes it
#   polling   --no-handoff --poll-only: followers poll as client-go does (a
#             release is found up to 2.2 retry periods later)
# Per rollout, from watches of the Lease, the EndpointSlice and the Pods
# merged in resourceVersion order (tests/node/timeline.py): the changes of
# leader, the longest time the Lease named nobody, the longest time the
# EndpointSlice named no ready Pod and two or more. Then N `k8slease
# handoff` (20 by default): the time from the request to the successor's
# term. Prints a table; writes OUT/rollout.csv (a row per rollout),
# OUT/handoff.csv and OUT/rollout.md. About 25 minutes.
set -u
cd "$(dirname "$0")/.."
SRC=$PWD
build=build assets= rollouts=20 handoffs=20 modes="handoff release polling" out=bench/results
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { build=$1; shift; }
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { assets=$1; shift; }
while [ $# -gt 0 ]; do
    case $1 in
    --rollouts) rollouts=$2; shift 2 ;;
    --handoffs) handoffs=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: bench/node-rollout.sh [BUILD] [ASSETS] [--rollouts N] [--handoffs N] [--modes LIST] [--out DIR]" >&2; exit 2 ;;
    esac
done
for n in "$rollouts" "$handoffs"; do
    case $n in '' | *[!0-9]*) echo "bench/node-rollout.sh: --rollouts/--handoffs $n: a number" >&2; exit 2 ;; esac
done
for m in $modes; do
    case $m in handoff | release | polling) ;;
    *) echo "bench/node-rollout.sh: --modes: \"$m\" is not handoff, release or polling" >&2; exit 2 ;;
    esac
done

if [ -z "${K8SLEASE_NODE_DIR:-}" ]; then
    assets=$(tests/node/assets.sh "$build" "$assets") || exit 2
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    scripts/build-image.sh "$build" || exit 1
    K8SLEASE_NODE_ASSETS=$assets exec tests/node/cluster.sh --images "$build/image" \
        bash "$SRC/bench/node-rollout.sh" "$build" "$assets" --rollouts "$rollouts" \
        --handoffs "$handoffs" --modes "$modes" --out "$out"
fi

mkdir -p "$out"
T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-bench-rollout.XXXXXX")
fail() { echo "bench/node-rollout.sh: $*" >&2; stop_observers; exit 1; }
# shellcheck source=tests/node/lib.sh
. "$SRC/tests/node/lib.sh"
trap 'stop_observers; rm -rf "$T"' EXIT
rolled_out() { kc rollout status deployment/my-master --timeout=1s; }
slice_is_leader() {
    local h
    h=$(holder my-master)
    [ -n "$h" ] && [ "$(kc get endpointslice -l kubernetes.io/service-name=my-master \
        -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.targetRef.name} {end}')" = "$h " ]
}
new_leader() { local h; h=$(holder my-master); [ -n "$h" ] && [ "$h" != "$1" ]; }

echo "mode,rollout,leader_changes,leaderless_max_ms,slice_empty_max_ms,slice_two_max_ms,on_new_revision,leaders" >"$out/rollout.csv"
started=$(date +%s)

# setup MODE: a namespace with deploy/ as shipped, or with extra flags.
setup() {
    NS=rollout-$1
    make_namespace
    kc apply -f deploy/ >/dev/null || fail "kubectl apply -f deploy/"
    case $1 in
    release) extra='["--no-handoff"]' ;;
    polling) extra='["--no-handoff","--poll-only"]' ;;
    *) extra= ;;
    esac
    if [ -n "$extra" ]; then
        # The flags go before "--" (the command's own arguments after it).
        idx=$(kc get deployment my-master -o jsonpath='{.spec.template.spec.containers[0].args}' |
            python3 -c 'import json, sys; print(json.load(sys.stdin).index("--"))')
        ops=$(python3 -c 'import json, sys
extra, idx = json.loads(sys.argv[1]), int(sys.argv[2])
print(json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/args/%d" % (idx + i),
                   "value": v} for i, v in enumerate(extra)]))' "$extra" "$idx")
        kc patch deployment my-master --type=json -p "$ops" >/dev/null || fail "cannot add $extra"
    fi
    wait_until 180 "3 ready replicas" rolled_out
    wait_until 60 "a leader" has_holder my-master
    wait_until 60 "the EndpointSlice naming the leader" slice_is_leader
    rm -f "$T"/*.obs
    observe lease lease lease --field-selector metadata.name=my-master
    observe slice slice endpointslice -l kubernetes.io/service-name=my-master
    observe pods pod pods -l app.kubernetes.io/name=my-master
    # Each watch's first events (the objects as they are) must arrive
    # before the first rollout starts: arriving after it, they would count
    # as a change of leader (and the time before them as leaderless).
    wait_until 30 "the watches' first events" observed
}
observed() { [ -s "$T/lease.obs" ] && [ -s "$T/slice.obs" ] && [ "$(wc -l <"$T/pods.obs")" -ge 3 ]; }

for mode in $modes; do
    setup "$mode"
    for i in $(seq 1 "$rollouts"); do
        t=$(now_us)
        kc rollout restart deployment/my-master >/dev/null || fail "rollout restart"
        kc rollout status deployment/my-master --timeout=300s >/dev/null || fail "rollout $i did not finish"
        wait_until 60 "a leader after rollout $i" has_holder my-master
        wait_until 60 "the EndpointSlice naming the leader after rollout $i" slice_is_leader
        python3 tests/node/timeline.py "$T" "$t" "$(now_us)" >"$T/tl" || fail "timeline.py"
        v() { awk -v k="$1" '$1 == k { print $2 }' "$T/tl"; }
        leader=$(holder my-master)
        newest=$(kc get rs -l app.kubernetes.io/name=my-master --sort-by=.metadata.creationTimestamp \
            -o jsonpath='{.items[-1:].metadata.labels.pod-template-hash}')
        onnew=0
        [ "$(kc get pod "$leader" -o jsonpath='{.metadata.labels.pod-template-hash}')" = "$newest" ] && onnew=1
        echo "$mode,$i,$(v leader_changes),$(v leaderless_max_ms),$(v slice_empty_max_ms),$(v slice_two_max_ms),$onnew,$(v leaders | tr , ' ')" >>"$out/rollout.csv"
        printf '%-8s %2d  leader changes %s  leaderless %5s ms  slice empty %5s ms  two %s ms  new revision %s\n' \
            "$mode" "$i" "$(v leader_changes)" "$(v leaderless_max_ms)" "$(v slice_empty_max_ms)" \
            "$(v slice_two_max_ms)" "$onnew"
    done
    stop_observers
    kubectl delete namespace "$NS" --wait=false >/dev/null
done

# k8slease handoff, on deploy/ as shipped (--handoffs 0: none).
[ "$handoffs" -gt 0 ] && setup handoff2
echo "run,ms,from_epoch,to_epoch" >"$out/handoff.csv"
for i in $(seq 1 "$handoffs"); do
    old=$(holder my-master)
    "$SRC/$build/cli/k8slease" handoff --lease "$NS/my-master" --json >"$T/h.json" ||
        fail "k8slease handoff $i: $(cat "$T/h.json")"
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%s,%d,%d,%d" % (sys.argv[2], d["ms"], d["from_epoch"], d["to_epoch"]))' \
        "$T/h.json" "$i" >>"$out/handoff.csv"
    printf 'handoff  %2d  %s\n' "$i" "$(tail -1 "$out/handoff.csv")"
    wait_until 30 "a new leader after handoff $i" new_leader "$old"
    wait_until 30 "the EndpointSlice naming the leader after handoff $i" slice_is_leader
done
stop_observers
took=$(($(date +%s) - started))

python3 - "$out" "$took" "${K8SLEASE_NODE_VERSION:-?}" <<'EOF'
import csv, sys
out, took, version = sys.argv[1], sys.argv[2], sys.argv[3]
rows = list(csv.DictReader(open(out + "/rollout.csv")))
hs = [int(r["ms"]) for r in csv.DictReader(open(out + "/handoff.csv"))]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else 0
lines = ["| mode (kubelet %s, 3 replicas, 15/10/2) | rollouts | leader changes per rollout | exactly 1 | onto the new revision | leaderless p50 / p99 / max | EndpointSlice empty p50 / p99 / max | two ready, max |" % version,
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for mode, name in (("handoff", "handoff (deploy/ as shipped)"), ("release", "plain release (--no-handoff)"), ("polling", "polling followers (--poll-only)")):
    r = [x for x in rows if x["mode"] == mode]
    if not r:
        continue
    g = lambda k: [int(x[k]) for x in r]
    ch = g("leader_changes")
    lines.append("| %s | %d | %s | %d of %d | %d of %d | %d / %d / %d ms | %d / %d / %d ms | %d ms |" % (
        name, len(r), ", ".join(str(c) for c in ch), sum(1 for c in ch if c == 1), len(r),
        sum(g("on_new_revision")), len(r),
        pct(g("leaderless_max_ms"), 50), pct(g("leaderless_max_ms"), 99), max(g("leaderless_max_ms")),
        pct(g("slice_empty_max_ms"), 50), pct(g("slice_empty_max_ms"), 99), max(g("slice_empty_max_ms")),
        max(g("slice_two_max_ms"))))
text = "\n".join(lines) + "\n\n`k8slease handoff`, request to the successor's term: p50 %d ms, p99 %d ms, max %d ms (%d runs)\n\n%s s in all\n" % (
    pct(hs, 50), pct(hs, 99), max(hs) if hs else 0, len(hs), took)
open(out + "/rollout.md", "w").write(text)
print(text)
EOF
