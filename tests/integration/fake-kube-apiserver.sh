#!/bin/sh
# A stand-in for kube-apiserver that takes envtest.sh's flags and serves
# k8slease-testserver with envtest.sh's CA and token, so the path the suites
# take against a real API server (K8SLEASE_TEST_KUBECONFIG, fault tests
# skipped) is itself tested in CI. K8SLEASE_TESTSERVER: the server binary.
set -eu
for a in "$@"; do
    case $a in
    --secure-port=*) port=${a#*=} ;;
    --client-ca-file=*) ca=${a#*=} ;;
    --token-auth-file=*) tokens=${a#*=} ;;
    esac
done
dir=$(dirname "$ca")/fake-apiserver
mkdir -p "$dir"
cp "$ca" "$dir/ca.crt"
cp "$(dirname "$ca")/ca.key" "$dir/ca.key"
exec "$K8SLEASE_TESTSERVER" --dir "$dir" --port "$port" --token "$(head -n 1 "$tokens" | cut -d, -f1)" --quiet
