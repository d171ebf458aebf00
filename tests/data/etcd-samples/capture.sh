#!/bin/sh
# Re-capture the etcd v3 JSON gateway samples of this directory from a real
# etcd: starts /usr/bin/etcd (Debian etcd-server) on free loopback ports with
# a temporary data dir, talks to it with curl and etcdctl (Debian
# etcd-client), and writes one file per response body, verbatim, plus
# INDEX.tsv (file, HTTP status, path, request body).
#
# The unit tests check the exact values of the committed files (lease IDs,
# revisions, cluster IDs): after a new capture, update tests/unit/test_etcd_codec.c.
#
# Usage: tests/data/etcd-samples/capture.sh [OUTDIR]   (default: this directory)
# Needs: etcd, etcdctl, curl, base64, python3 (only to find free ports).
set -eu

OUT=${1:-$(cd "$(dirname "$0")" && pwd)}
ETCD=${ETCD:-/usr/bin/etcd}
ETCDCTL=${ETCDCTL:-etcdctl}
TMP=$(mktemp -d /tmp/k8slease-etcd-capture.XXXXXX)
ETCD_PID=
WATCH_PID=
ELECT_PID=

cleanup() {
    for p in $WATCH_PID $ELECT_PID $ETCD_PID; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

set -- $(python3 -c 'import socket
a = [socket.socket() for _ in range(2)]
for s in a: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in a))')
CPORT=$1
PPORT=$2
EP=http://127.0.0.1:$CPORT

"$ETCD" --name capture --data-dir "$TMP/data" \
    --listen-client-urls "$EP" --advertise-client-urls "$EP" \
    --listen-peer-urls "http://127.0.0.1:$PPORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
    --initial-cluster "capture=http://127.0.0.1:$PPORT" >"$TMP/etcd.log" 2>&1 &
ETCD_PID=$!
i=0
until curl -sf "$EP/version" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 100 ] || { cat "$TMP/etcd.log"; exit 1; }
    sleep 0.1
done

b64() { printf %s "$1" | base64 -w0; }
ctl() { ETCDCTL_API=3 "$ETCDCTL" --endpoints="$EP" "$@"; }
printf 'file\tstatus\tpath\trequest\n' >"$OUT/INDEX.tsv"

# post NAME PATH BODY [extra curl args]: one unary (or one-shot stream) call.
post() {
    name=$1 path=$2 body=$3
    shift 3
    status=$(curl -s -m 10 -o "$OUT/$name" -w '%{http_code}' -X POST "$EP$path" -d "$body" "$@")
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$path" "$body" >>"$OUT/INDEX.tsv"
}
# field FILE NAME: a top-level or header string field of a captured body.
field() { sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" "$OUT/$1"; }
# watch_start NAME BODY [extra curl args]: a watch stream in the background.
watch_start() {
    wname=$1 wbody=$2
    shift 2
    curl -s -N -o "$OUT/$wname" -X POST "$EP/v3/watch" -d "$wbody" "$@" &
    WATCH_PID=$!
    printf '%s\t200\t/v3/watch\t%s\n' "$wname" "$wbody" >>"$OUT/INDEX.tsv"
    sleep 0.5
}
watch_stop() {
    sleep 0.5
    kill "$WATCH_PID" 2>/dev/null || true
    wait "$WATCH_PID" 2>/dev/null || true
    WATCH_PID=
}

curl -s -o "$OUT/version.json" "$EP/version"

# ---- leases ----
A=9196828468227470855 # 0x7fa1b2c3d4e5f607: above 2^53, letters in hex
B=27                  # 0x1b
post lease_grant.json /v3/lease/grant '{"TTL":"5"}'
post lease_grant_id.json /v3/lease/grant "{\"ID\":\"$A\",\"TTL\":\"30\"}"
post lease_grant_exists.json /v3/lease/grant "{\"ID\":\"$A\",\"TTL\":\"30\"}"
post lease_grant_min_ttl.json /v3/lease/grant "{\"ID\":\"$B\",\"TTL\":\"1\"}"
post lease_grant_ttl_too_large.json /v3/lease/grant '{"TTL":"99999999999999"}'
post lease_keepalive.json /v3/lease/keepalive "{\"ID\":\"$A\"}"
post lease_keepalive_unknown.json /v3/lease/keepalive '{"ID":"12345"}'
post lease_keepalive_bad_json.json /v3/lease/keepalive 'garbage'
post lease_timetolive_unknown.json /v3/lease/timetolive '{"ID":"12345"}'
post lease_revoke_unknown.json /v3/lease/revoke '{"ID":"12345"}'
# B was granted the minimum TTL (2 s, more than asked): let it expire
sleep 3
post lease_keepalive_expired.json /v3/lease/keepalive "{\"ID\":\"$B\"}"
post lease_grant_id_b.json /v3/lease/grant "{\"ID\":\"$B\",\"TTL\":\"30\"}"

# ---- an election by hand, as clientv3/concurrency does it ----
P=$(b64 samples/election/)
PE=$(b64 samples/election0) # GetPrefixRangeEnd("samples/election/")
# keys as clientv3/concurrency names them: the lease ID in lowercase hex
KA=$(b64 "samples/election/$(printf %x "$A")")
KB=$(b64 "samples/election/$(printf %x "$B")")
create() { # create NAME KEY VALUE LEASE
    post "$1" /v3/kv/txn "{\"compare\":[{\"target\":\"CREATE\",\"result\":\"EQUAL\",\"key\":\"$2\",\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"$2\",\"value\":\"$(b64 "$3")\",\"lease\":\"$4\"}}],\"failure\":[{\"request_range\":{\"key\":\"$2\"}}]}"
}
range_first() { # range_first NAME: leader = first key by create revision
    post "$1" /v3/kv/range "{\"key\":\"$P\",\"range_end\":\"$PE\",\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\",\"limit\":\"1\"}"
}
range_pred() { # range_pred NAME MAXREV: last key created at or before MAXREV
    post "$1" /v3/kv/range "{\"key\":\"$P\",\"range_end\":\"$PE\",\"sort_order\":\"DESCEND\",\"sort_target\":\"CREATE\",\"max_create_revision\":\"$2\",\"limit\":\"1\"}"
}
post kv_range_empty.json /v3/kv/range "{\"key\":\"$P\",\"range_end\":\"$PE\"}"
create kv_txn_create_a.json "$KA" "host-a:8080" "$A"
REV_A=$(field kv_txn_create_a.json revision)
create kv_txn_create_a_again.json "$KA" "host-a:9999" "$A"
create kv_txn_create_b.json "$KB" "host-b:8080" "$B"
REV_B=$(field kv_txn_create_b.json revision)
post kv_txn_create_lease_unknown.json /v3/kv/txn "{\"compare\":[{\"target\":\"CREATE\",\"result\":\"EQUAL\",\"key\":\"$(b64 samples/election/3039)\",\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"$(b64 samples/election/3039)\",\"value\":\"$(b64 x)\",\"lease\":\"12345\"}}],\"failure\":[{\"request_range\":{\"key\":\"$(b64 samples/election/3039)\"}}]}"
post kv_range_prefix.json /v3/kv/range "{\"key\":\"$P\",\"range_end\":\"$PE\"}"
range_first kv_range_leader.json
range_pred kv_range_predecessor_of_b.json $((REV_B - 1))
range_pred kv_range_predecessor_of_a.json $((REV_A - 1))
post lease_timetolive_keys.json /v3/lease/timetolive "{\"ID\":\"$A\",\"keys\":true}"
proclaim() { # proclaim NAME KEY REV VALUE LEASE
    post "$1" /v3/kv/txn "{\"compare\":[{\"target\":\"CREATE\",\"result\":\"EQUAL\",\"key\":\"$2\",\"create_revision\":\"$3\"}],\"success\":[{\"request_put\":{\"key\":\"$2\",\"value\":\"$(b64 "$4")\",\"lease\":\"$5\"}}]}"
}
proclaim kv_txn_proclaim_a.json "$KA" "$REV_A" "host-a:9090" "$A"
proclaim kv_txn_proclaim_wrong_rev.json "$KA" $((REV_A + 100)) "host-a:1" "$A"
# B waits for the deletion of A's key, from the header revision of its range
RANGE_REV=$(field kv_range_predecessor_of_b.json revision)
watch_start watch_predecessor_delete.jsonl "{\"create_request\":{\"key\":\"$KA\",\"start_revision\":\"$RANGE_REV\"}}"
resign() { # resign NAME KEY REV
    post "$1" /v3/kv/txn "{\"compare\":[{\"target\":\"CREATE\",\"result\":\"EQUAL\",\"key\":\"$2\",\"create_revision\":\"$3\"}],\"success\":[{\"request_delete_range\":{\"key\":\"$2\"}}]}"
}
resign kv_txn_resign_a.json "$KA" "$REV_A"
watch_stop
resign kv_txn_resign_a_again.json "$KA" "$REV_A"
range_first kv_range_leader_b.json
post lease_revoke.json /v3/lease/revoke "{\"ID\":\"$A\"}"
# a key that goes away with its lease: revoke B while watching the prefix
watch_start watch_prefix_revoke.jsonl "{\"create_request\":{\"key\":\"$P\",\"range_end\":\"$PE\",\"progress_notify\":true}}"
post lease_revoke_b.json /v3/lease/revoke "{\"ID\":\"$B\"}"
watch_stop
post kv_deleterange_none.json /v3/kv/deleterange "{\"key\":\"$KA\"}"

# ---- etcdctl elect: what it writes ----
# not through ctl(): $! must be etcdctl itself, and SIGTERM (which it
# handles like ^C) because background jobs of sh ignore SIGINT
ETCDCTL_API=3 "$ETCDCTL" --endpoints="$EP" elect samples/etcdctl "host-c:7000" >"$TMP/elect.out" 2>&1 &
ELECT_PID=$!
sleep 1.5
post kv_range_etcdctl_elect.json /v3/kv/range "{\"key\":\"$(b64 samples/etcdctl/)\",\"range_end\":\"$(b64 samples/etcdctl0)\"}"
ELECT_LEASE=$(sed -n 's/.*"lease":"\([0-9]*\)".*/\1/p' "$OUT/kv_range_etcdctl_elect.json")
post lease_timetolive_etcdctl_elect.json /v3/lease/timetolive "{\"ID\":\"$ELECT_LEASE\",\"keys\":true}"
kill -TERM "$ELECT_PID"
wait "$ELECT_PID" 2>/dev/null || true
ELECT_PID=
post kv_range_etcdctl_after_interrupt.json /v3/kv/range "{\"key\":\"$(b64 samples/etcdctl/)\",\"range_end\":\"$(b64 samples/etcdctl0)\"}"
post lease_timetolive_etcdctl_after_interrupt.json /v3/lease/timetolive "{\"ID\":\"$ELECT_LEASE\"}"

# ---- watch: compaction, future revision ----
CUR=$(field kv_range_etcdctl_after_interrupt.json revision)
post kv_compaction.json /v3/kv/compaction "{\"revision\":\"$CUR\",\"physical\":true}"
post kv_range_compacted.json /v3/kv/range "{\"key\":\"$KA\",\"revision\":\"2\"}"
watch_start watch_compacted.jsonl "{\"create_request\":{\"key\":\"$KA\",\"start_revision\":\"2\"}}"
watch_stop
watch_start watch_future_revision.jsonl "{\"create_request\":{\"key\":\"$KA\",\"start_revision\":\"$((CUR + 1000))\"}}"
watch_stop

# ---- gateway errors ----
post kv_range_bad_base64.json /v3/kv/range '{"key":"!!!"}'
post kv_range_bad_json.json /v3/kv/range 'garbage'
post watch_bad_base64.json /v3/watch '{"create_request":{"key":"!!"}}'
post not_found.txt /v3/no/such/path '{}'

# ---- auth ----
post auth_authenticate_disabled.json /v3/auth/authenticate '{"name":"root","password":"rootpw"}'
ctl user add root:rootpw >/dev/null
ctl user add limited:limitedpw >/dev/null
ctl role add root >/dev/null
ctl user grant-role root root >/dev/null
ctl auth enable >/dev/null
post auth_authenticate.json /v3/auth/authenticate '{"name":"root","password":"rootpw"}'
TOKEN=$(field auth_authenticate.json token)
post auth_authenticate_bad_password.json /v3/auth/authenticate '{"name":"root","password":"wrong"}'
post auth_range_no_token.json /v3/kv/range "{\"key\":\"$P\"}"
post auth_range_bad_token.json /v3/kv/range "{\"key\":\"$P\"}" -H "Authorization: not-a-token"
post auth_range_ok.json /v3/kv/range "{\"key\":\"$P\"}" -H "Authorization: $TOKEN"
post auth_authenticate_limited.json /v3/auth/authenticate '{"name":"limited","password":"limitedpw"}'
LTOKEN=$(field auth_authenticate_limited.json token)
post auth_range_permission_denied.json /v3/kv/range "{\"key\":\"$P\"}" -H "Authorization: $LTOKEN"
watch_start watch_permission_denied.jsonl "{\"create_request\":{\"key\":\"$KA\"}}" -H "Authorization: $LTOKEN"
watch_stop
post auth_keepalive_no_token.json /v3/lease/keepalive '{"ID":"12345"}'
echo "captured into $OUT"
