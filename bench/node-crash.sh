#!/bin/bash
# Benchmark 8 on a real node: crash failover with a real kubelet.
#
#   bench/node-crash.sh [BUILD] [ASSETS] [--kills N] [--out DIR]   (make bench-node)
#
# Starts the single-node cluster of tests/node/cluster.sh from ASSETS
# (kube-apiserver, kubelet, ... v1.24.0; default: ../shared/kube-apiserver's,
# unpacked into BUILD/k8s-assets) with the images of scripts/build-image.sh
# BUILD, and runs N trials (20 by default) of each fault on the leader's
# container: SIGKILL of its process, and an OOM kill (the process allocates
# past its Pod's 64 MiB limit). A trial: a fresh Lease (15/10/2) and two
# Pods of the node suite's seed-ABI program with K8SLEASE_CRASH_FAILOVER=1
# (Mooncake's master's pattern); once the leader's record is in the Lease,
# the follower running and a second past the record's verifiedAt, the
# fault. Measured, from the fault (the kill(2) by this script): the
# kubelet's report (the Pod's status showing the container terminated, as
# a watch of it receives it), the follower's election (the Lease naming it,
# as a watch receives it), and when the Lease would have expired (the dead
# leader's last renewal as the Lease watch saw it + 15 s): what a follower
# without crash failover waits for.
#
# Prints a table; writes OUT/crash_node.csv (a row per trial) and
# OUT/crash_node.md (the table). OUT: bench/results. About 5 minutes for
# 20 + 20 trials.
set -u
cd "$(dirname "$0")/.."
SRC=$PWD
build=build assets= kills=20 out=bench/results
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { build=$1; shift; }
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { assets=$1; shift; }
while [ $# -gt 0 ]; do
    case $1 in
    --kills) kills=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: bench/node-crash.sh [BUILD] [ASSETS] [--kills N] [--out DIR]" >&2; exit 2 ;;
    esac
done
case $kills in '' | *[!0-9]*) echo "bench/node-crash.sh: --kills $kills: a number" >&2; exit 2 ;; esac

# ---- outside the cluster: images, then the cluster runs us again ----------
if [ -z "${K8SLEASE_NODE_DIR:-}" ]; then
    assets=$(tests/node/assets.sh "$build" "$assets") || exit 2
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    scripts/build-image.sh "$build" || exit 1
    K8SLEASE_NODE_ASSETS=$assets exec tests/node/cluster.sh --images "$build/image" \
        bash "$SRC/bench/node-crash.sh" "$build" "$assets" --kills "$kills" --out "$out"
fi

# ---- inside the cluster ---------------------------------------------------------
mkdir -p "$out"
T=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-bench-node.XXXXXX")
NS=bench-crash
fail() { echo "bench/node-crash.sh: $*" >&2; stop_observers; exit 1; }
# shellcheck source=tests/node/lib.sh
. "$SRC/tests/node/lib.sh"
trap 'stop_observers; rm -rf "$T"' EXIT

make_namespace
observe lease lease leases
observe pods pod pods
csv=$out/crash_node.csv
echo "fault,trial,report_ms,elected_ms,report_to_elected_ms,expiry_ms" >"$csv"
started=$(date +%s)

seen() { [ -n "$(first_after "$@")" ]; }

# trial KIND I: one fault on the leader of a fresh pair; a row of the CSV.
trial() {
    local kind=$1 i=$2 lease=$1-$2 a b leader follower pid t report elected renew expiry
    a=$lease-a b=$lease-b
    for p in "$a" "$b"; do
        pod "$p" "$TEST_IMAGE" --limit 64Mi --env K8SLEASE_CRASH_FAILOVER=1 -- \
            /usr/lib/k8slease/nodetest/seed_leader "$NS" "$lease" "$p"
    done
    wait_until 60 "a leader of $lease" has_holder "$lease"
    leader=$(holder "$lease")
    follower=$a
    [ "$leader" = "$a" ] && follower=$b
    wait_until 20 "the record of $leader" record_is "$lease" pod "$leader"
    wait_until 60 "$leader running" running "$leader"
    wait_until 60 "$follower running" running "$follower"
    after_verified "$lease"
    pid=$(container_pid "$leader") || fail "no pid of $leader"
    t=$(now_us)
    if [ "$kind" = sigkill ]; then kill -KILL "$pid"; else kill -USR1 "$pid"; fi
    wait_until 30 "$follower elected" holder_is "$lease" "$follower"
    wait_until 10 "the report of $leader" seen pods "$t" "pod=$leader .*terminated"
    report=$(first_after pods "$t" "pod=$leader .*terminated")
    elected=$(first_after lease "$t" "spec=$follower,")
    # The dead leader's last write of the Lease before the fault.
    renew=$(awk -v t="$t" -v l="$leader" '$1 <= t && index($0, "spec=" l ",") { s = $1 } END { print s }' \
        "$T/lease.obs")
    expiry=$((renew + 15000000))
    if [ "$kind" = oom ] && ! grep "pod=$leader " "$T/pods.obs" | grep -q OOMKilled; then
        fail "$leader was not OOM-killed"
    fi
    echo "$kind,$i,$(((report - t) / 1000)),$(((elected - t) / 1000)),$(((elected - report) / 1000)),$(((expiry - t) / 1000))" >>"$csv"
    printf '%-8s %2d  report %5d ms  elected %5d ms  (expiry in %5d ms)\n' "$kind" "$i" \
        $(((report - t) / 1000)) $(((elected - t) / 1000)) $(((expiry - t) / 1000))
    kc delete pod "$a" "$b" --wait=false >/dev/null 2>&1
}

for kind in sigkill oom; do
    for i in $(seq 1 "$kills"); do
        trial "$kind" "$i"
    done
done
took=$(($(date +%s) - started))

python3 - "$csv" "$out/crash_node.md" "$took" "${K8SLEASE_NODE_VERSION:-?}" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]
lines = ["| fault (kubelet %s, 15/10/2) | trials | kill → report p50 / p99 | kill → elected p50 / p99 / max | report → elected p50 / p99 | Lease expiry after the kill p50 |" % sys.argv[4],
         "| --- | --- | --- | --- | --- | --- |"]
for kind, name in (("sigkill", "SIGKILL"), ("oom", "OOM kill (64 MiB limit)")):
    r = [x for x in rows if x["fault"] == kind]
    if not r:
        continue
    g = lambda k: [int(x[k]) for x in r]
    lines.append("| %s | %d | %d / %d ms | %d / %d / %d ms | %d / %d ms | %.1f s |" % (
        name, len(r), pct(g("report_ms"), 50), pct(g("report_ms"), 99),
        pct(g("elected_ms"), 50), pct(g("elected_ms"), 99), max(g("elected_ms")),
        pct(g("report_to_elected_ms"), 50), pct(g("report_to_elected_ms"), 99),
        pct(g("expiry_ms"), 50) / 1000.0))
text = "\n".join(lines) + "\n\n%d trials in %s s\n" % (len(rows), sys.argv[3])
open(sys.argv[2], "w").write(text)
print(text)
EOF
