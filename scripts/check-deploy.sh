#!/bin/sh
# Validate the manifests in deploy/ with kubectl's client-side dry run
# against k8slease-testserver (whose discovery lists the kinds they use).
#
#   scripts/check-deploy.sh [TESTSERVER]
#
# TESTSERVER: the server binary (default: build/tools/testserver/
# k8slease-testserver if built, else k8slease-testserver in PATH). Needs
# kubectl (KUBECTL=/usr/bin/kubectl by default). Exit 0 when every object
# of deploy/ would be created.
set -eu
cd "$(dirname "$0")/.."
ts=${1:-}
if [ -z "$ts" ]; then
    ts=build/tools/testserver/k8slease-testserver
    [ -x "$ts" ] || ts=k8slease-testserver
fi
kubectl=${KUBECTL:-kubectl}
command -v "$kubectl" >/dev/null || { echo "check-deploy: $kubectl not found" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-deploy.XXXXXX")
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

. tests/lib/testserver.sh
rc=0
K8SLEASE_TESTSERVER=$ts start_testserver "$tmp/ts" "$tmp/ready" "" 15 || rc=$?
pid=$TESTSERVER_PID
case $rc in
0) ;;
1) echo "check-deploy: $ts exited" >&2; exit 1 ;;
*) echo "check-deploy: no ready line from $ts in 15 s" >&2; exit 1 ;;
esac
kubeconfig=$TESTSERVER_KUBECONFIG

"$kubectl" apply --dry-run=client -f deploy/ --kubeconfig "$kubeconfig" \
    --cache-dir "$tmp/kube-cache" >"$tmp/out" 2>&1 || {
    cat "$tmp/out"
    echo "FAIL: kubectl apply --dry-run=client -f deploy/"
    exit 1
}
cat "$tmp/out"
want="serviceaccount/my-master role.rbac.authorization.k8s.io/my-master-leader-election
rolebinding.rbac.authorization.k8s.io/my-master-leader-election deployment.apps/my-master
service/my-master"
for obj in $want; do
    grep -q "^$obj created (dry run)\$" "$tmp/out" || { echo "FAIL: $obj not created"; exit 1; }
done
echo "ok: deploy/ validates ($(echo "$want" | wc -w) objects)"
