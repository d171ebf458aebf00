#!/bin/sh
# envtest.sh COMMAND [ARGS...]
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
# The integration suites then run against the real API server; the tests
# that need fault injection skip. Everything is removed at exit.
set -eu

apiserver=${TEST_ASSET_KUBE_APISERVER:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/kube-apiserver}}
etcd=${TEST_ASSET_ETCD:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/etcd}}
[ -n "$apiserver" ] && [ -x "$apiserver" ] ||
    { echo "envtest.sh: no kube-apiserver: set KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER" >&2; exit 2; }
[ -n "$etcd" ] && [ -x "$etcd" ] ||
    { echo "envtest.sh: no etcd: set KUBEBUILDER_ASSETS or TEST_ASSET_ETCD" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: envtest.sh COMMAND [ARGS...]" >&2; exit 2; }

dir=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

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
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s,envtest-admin,envtest-admin,system:masters\n' "$token" > "$dir/tokens.csv"

etcd_client=$(free_port)
etcd_peer=$(free_port)
"$etcd" --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$etcd_client" \
    --advertise-client-urls "http://127.0.0.1:$etcd_client" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" >"$dir/etcd.log" 2>&1 &
pids="$pids $!"

port=$(free_port)
"$apiserver" --advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$port" \
    --etcd-servers="http://127.0.0.1:$etcd_client" \
    --tls-cert-file="$dir/apiserver.crt" --tls-private-key-file="$dir/apiserver.key" \
    --client-ca-file="$dir/ca.crt" --token-auth-file="$dir/tokens.csv" \
    --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
    --service-account-issuer="https://127.0.0.1:$port" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=RBAC \
    --disable-admission-plugins=ServiceAccount --allow-privileged=true \
    >"$dir/apiserver.log" 2>&1 &
apiserver_pid=$!
pids="$pids $apiserver_pid"

cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/ca.crt
users:
- name: envtest
  user:
    token: $token
contexts:
- name: envtest
  context: {cluster: envtest, user: envtest, namespace: default}
current-context: envtest
EOF

# Ready when /readyz answers ok (bounded: 60 s).
i=0
until curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" \
        "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    i=$((i + 1))
    if ! kill -0 "$apiserver_pid" 2>/dev/null; then
        echo "envtest.sh: kube-apiserver exited; its log:" >&2
        tail -20 "$dir/apiserver.log" >&2
        exit 1
    fi
    if [ "$i" -gt 120 ]; then
        echo "envtest.sh: kube-apiserver not ready after 60 s; its log:" >&2
        tail -20 "$dir/apiserver.log" >&2
        exit 1
    fi
    sleep 0.5
done
echo "envtest.sh: kube-apiserver ready on https://127.0.0.1:$port" >&2

status=0
K8SLEASE_TEST_KUBECONFIG="$dir/kubeconfig" KUBECONFIG="$dir/kubeconfig" "$@" || status=$?
exit "$status"
