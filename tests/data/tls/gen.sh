#!/bin/sh
# Regenerates the TLS fixtures of tests/unit/test_http.c:
#   ca.crt                  test CA
#   server.crt, server.key  server certificate for 127.0.0.1, ::1 and localhost
#   client.crt, client.key  client certificate (CN k8slease-test, O system:masters)
#   other-ca.crt            an unrelated CA (the wrong-CA test)
#
# TEST-ONLY KEYS: the private keys are committed, so they are public. Never
# trust these CAs or use these keys outside the test suite.
#
# EC P-256, valid for 100 years so the suite never breaks on a date.
# Usage: sh tests/data/tls/gen.sh  (writes next to this script)
set -eu
cd "$(dirname "$0")"
days=36500
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

newkey() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

ca() { # ca NAME CN
    newkey "$tmp/$1.key"
    openssl req -x509 -new -key "$tmp/$1.key" -out "$1.crt" -days $days -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
}

leaf() { # leaf NAME SUBJECT EXTENSIONS
    newkey "$1.key"
    openssl req -new -key "$1.key" -out "$tmp/$1.csr" -subj "$2"
    printf '%s\n' "$3" >"$tmp/$1.ext"
    openssl x509 -req -in "$tmp/$1.csr" -CA ca.crt -CAkey "$tmp/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
        -days $days -extfile "$tmp/$1.ext" -out "$1.crt"
}

ca ca "k8slease test CA"
ca other-ca "k8slease unrelated test CA"
leaf server "/CN=127.0.0.1" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"
leaf client "/O=system:masters/CN=k8slease-test" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
chmod 644 ./*.key
