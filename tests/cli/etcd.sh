#!/bin/sh
# etcd.sh DIR [tls]: start an etcd (Debian's etcd-server) for the CLI tests,
# on free loopback ports, with its data in DIR/data and its log in
# DIR/etcd.log. Once it answers /health, print its client URL
# (http://127.0.0.1:PORT) on stdout and exit 0, leaving it running; its pid
# is in DIR/etcd.pid as soon as it starts, so that the caller can always
# stop it (SIGTERM). Exit 1, with the tail of its log on stderr, if it is
# not healthy within 30 s. $K8SLEASE_TEST_ETCD names the binary (default:
# etcd in $PATH).
#
# With tls: https, and client certificates required (--client-cert-auth);
# the CA (DIR/ca.crt) and a client certificate (DIR/client.crt, its key
# DIR/client.key) are made with openssl first.
set -u

dir=${1:?usage: etcd.sh DIR [tls]}
tls=${2:-}
etcd=${K8SLEASE_TEST_ETCD:-etcd}
mkdir -p "$dir" || exit 1
scheme=http
tls_flags=
curl_tls=

# A random loopback port nobody listens on now (per ss, when there is one).
# Another process may still take it before etcd binds it: etcd then exits
# with "address already in use" and we try other ports.
free_port() {
    while :; do
        _p=$(($(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 + 20000))
        if command -v ss >/dev/null 2>&1 && ss -Htln "sport = :$_p" 2>/dev/null | grep -q .; then
            continue
        fi
        echo "$_p"
        return
    done
}

fail() {
    echo "etcd.sh: $*" >&2
    tail -n 20 "$dir/etcd.log" >&2 2>/dev/null
    exit 1
}

# cert NAME CN EXTENSIONS: a P-256 key and a certificate signed by the CA.
cert() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
        -keyout "$dir/$1.key" -out "$dir/$1.csr" 2>/dev/null &&
        printf '%b' "$3" >"$dir/$1.ext" &&
        openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$dir/$1.ext" -out "$dir/$1.crt" 2>/dev/null
}

if [ "$tls" = tls ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=k8slease-cli-test-ca -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null ||
        fail "openssl: cannot make the CA"
    # clientAuth too: etcd's JSON gateway dials etcd with the server's pair.
    cert server 127.0.0.1 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' ||
        fail "openssl: cannot make the server certificate"
    cert client k8slease-cli-test 'extendedKeyUsage=clientAuth\n' ||
        fail "openssl: cannot make the client certificate"
    scheme=https
    tls_flags="--cert-file $dir/server.crt --key-file $dir/server.key --client-cert-auth --trusted-ca-file $dir/ca.crt"
    curl_tls="--cacert $dir/ca.crt --cert $dir/client.crt --key $dir/client.key"
fi

attempt=0
while [ $attempt -lt 5 ]; do
    attempt=$((attempt + 1))
    client=$(free_port)
    peer=$(free_port)
    [ "$client" != "$peer" ] || continue
    rm -rf "$dir/data"
    # shellcheck disable=SC2086
    "$etcd" --name cli --data-dir "$dir/data" $tls_flags \
        --listen-client-urls "$scheme://127.0.0.1:$client" \
        --advertise-client-urls "$scheme://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "cli=http://127.0.0.1:$peer" \
        </dev/null >"$dir/etcd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/etcd.pid"
    n=0
    while [ $n -lt 300 ]; do
        # shellcheck disable=SC2086
        if curl -sS --max-time 1 $curl_tls "$scheme://127.0.0.1:$client/health" 2>/dev/null |
            grep -q '"health":"true"'; then
            echo "$scheme://127.0.0.1:$client"
            exit 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null
        fail "etcd (pid $pid) not healthy within 30 s"
    fi
    wait "$pid" 2>/dev/null
    grep -q 'address already in use' "$dir/etcd.log" || fail "etcd exited"
done
fail "no free ports after $attempt attempts"
