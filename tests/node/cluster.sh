#!/bin/bash
# cluster.sh [--images DIR] COMMAND [ARGS...]
# cluster.sh --ctl DIR kubelet|containerd|apiserver stop|cont|kill|pid
#
# A whole single-node Kubernetes cluster for the node suite, on this
# machine, as root: etcd, kube-apiserver (ServiceAccount admission, RBAC and
# the Node authorizer), kube-controller-manager, kube-scheduler, containerd
# (Debian's, with runc) and a kubelet, Pods on a CNI bridge (Debian's
# containernetworking-plugins). It waits until the Node is Ready and
# schedulable, runs COMMAND with KUBECONFIG set, and stops and removes
# everything it started, whatever COMMAND's outcome, and on SIGINT/SIGTERM.
#
#   K8SLEASE_NODE_ASSETS=/tmp/k8s-assets/v1.24.0 tests/node/cluster.sh \
#       --images build/image ctest --test-dir build -L node
#
# K8SLEASE_NODE_ASSETS: a directory with kube-apiserver, kube-controller-
# manager, kube-scheduler, kubelet and etcd (../shared/kube-apiserver/
# unpack.sh lays v1.24.0 out so, etcd being Debian's). --images DIR: every
# DIR/*.tar (OCI archives, `make image`) is imported into containerd before
# COMMAND; one must be the sandbox ("pause") image, k8slease.local/pause:3.7.
# No registry is reachable here: Pods use imagePullPolicy IfNotPresent (or a
# tag other than latest) and these images.
#
# Everything runs in a network namespace of its own (created and deleted
# here: nothing of the machine's network changes), where the kube-apiserver
# listens on port 443 of the node's address, 10.250.0.1, and of the
# "kubernetes" Service's, 10.96.0.1 (both on the namespace's loopback
# device: a Pod reaches the API at KUBERNETES_SERVICE_HOST:443 with no
# kube-proxy), and Pods get 10.244.0.0/24 on a bridge. COMMAND runs there
# too (kubectl, curl to a Pod's IP); so does `cluster.sh --ctl`. The
# kubelet's directories (root, volume plugins, device plugins), containerd's
# root and state (its netns pins too), the CNI configuration and IP leases
# all live in one temporary directory; the cgroups are /kubepods in each
# hierarchy (cgroup v1, cgroupfs driver), removed at the end.
#
# COMMAND gets: KUBECONFIG (system:masters), K8SLEASE_NODE_DIR (that
# directory: logs kubelet.log, containerd.log, apiserver.log, ...),
# K8SLEASE_NODE_CTL (the --ctl script for that directory),
# K8SLEASE_NODE_CTR (a ctr command for that containerd, namespace k8s.io),
# K8SLEASE_NODE_NAME (the Node's name), K8SLEASE_NODE_VERSION (the
# kubelet's version).
#
# --ctl DIR NAME ACTION: stop / cont (SIGSTOP / SIGCONT: a frozen kubelet
# reports nothing), kill (SIGKILL), pid. Every wait is bounded (the node
# Ready: 120 s); on failure the last lines of the component's log are
# printed. K8SLEASE_NODE_KEEP=1 keeps the directory (its path is printed).
#
# These machines' quirks, which this script handles: the kubelet refuses a
# loopback node IP (hence 10.250.0.1); no process may lower its
# oom_score_adj (containerd's restrict_oom_score_adj, the kubelet's
# --oom-score-adj=0); no hugetlb cgroup (containerd's
# disable_hugetlb_controller); the kubelet registers the Node tainted
# not-ready until the controller-manager's nodelifecycle controller lifts
# it; kube-scheduler v1.24 without leader election ignores SIGTERM.
set -eu

node_ip=10.250.0.1
service_ip=10.96.0.1
service_cidr=10.96.0.0/24
pod_cidr=10.244.0.0/24
node_name=k8slease-node
sandbox_image=k8slease.local/pause:3.7

die() { echo "cluster.sh: $*" >&2; exit 1; }

log_tail() { # NAME
    echo "--- last lines of $dir/$1.log:" >&2
    tail -n 25 "$dir/$1.log" >&2 2>/dev/null || true
}

# ---- --ctl ------------------------------------------------------------------

if [ "${1:-}" = --ctl ]; then
    [ $# -eq 4 ] || { echo "usage: cluster.sh --ctl DIR kubelet|containerd|apiserver|etcd|controller-manager|scheduler stop|cont|kill|pid" >&2; exit 2; }
    dir=$2
    [ -f "$dir/$3.pid" ] || { echo "cluster.sh --ctl: no $3 in $dir" >&2; exit 2; }
    pid=$(cat "$dir/$3.pid")
    case $4 in
    stop) kill -STOP "$pid" ;;
    cont) kill -CONT "$pid" ;;
    kill) kill -KILL "$pid" ;;
    pid) echo "$pid" ;;
    *) echo "cluster.sh --ctl: unknown action '$4' (stop cont kill pid)" >&2; exit 2 ;;
    esac
    exit 0
fi

# ---- checks -------------------------------------------------------------------

images=
if [ "${1:-}" = --images ]; then
    [ $# -ge 2 ] || { echo "usage: cluster.sh [--images DIR] COMMAND [ARGS...]" >&2; exit 2; }
    images=$2
    shift 2
fi
[ $# -gt 0 ] || { echo "usage: cluster.sh [--images DIR] COMMAND [ARGS...]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "needs root (a kubelet, containerd, a network namespace)"
assets=${K8SLEASE_NODE_ASSETS:-}
[ -n "$assets" ] || die "K8SLEASE_NODE_ASSETS: not set (a directory with kube-apiserver, kubelet, ...)"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet etcd; do
    [ -x "$assets/$b" ] || die "$assets/$b: missing or not executable"
done
assets=$(cd "$assets" && pwd)
for b in containerd runc ctr nsenter ip; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
        die "$b not found (Debian packages containerd, runc, util-linux, iproute2)"
done
cni_bin=/usr/lib/cni
[ -x "$cni_bin/bridge" ] && [ -x "$cni_bin/host-local" ] && [ -x "$cni_bin/loopback" ] ||
    die "$cni_bin/bridge, host-local, loopback: missing (Debian package containernetworking-plugins)"
for c in cpu cpuacct cpuset memory pids devices freezer; do
    [ -d "/sys/fs/cgroup/$c" ] || die "/sys/fs/cgroup/$c: missing (the kubelet here wants cgroup v1)"
done
for c in cpu cpuacct cpuset memory pids devices freezer systemd; do
    [ ! -e "/sys/fs/cgroup/$c/kubepods" ] ||
        die "/sys/fs/cgroup/$c/kubepods exists: another kubelet runs here, or one was not cleaned up"
done
[ -z "$images" ] || [ -d "$images" ] || die "--images $images: not a directory"

# ---- setup ------------------------------------------------------------------

dir=$(mktemp -d /var/tmp/k8slease-node.XXXXXX)
chmod 755 "$dir"
netns=k8slease-$(basename "$dir" | cut -d. -f2)
in_ns() { nsenter --net="/run/netns/$netns" "$@"; }
pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

# stop NAME SIGNAL: signal it, wait (10 s) until it is gone, then SIGKILL.
stop() {
    st_p=$(pid_of "$1")
    [ -n "$st_p" ] && kill -0 "$st_p" 2>/dev/null || return 0
    kill -CONT "$st_p" 2>/dev/null || true
    kill "-$2" "$st_p" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$st_p" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$st_p" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$st_p" 2>/dev/null || return 0
        sleep 0.1
    done
}

# Every process in the kubepods cgroups (the containers), then the shims of
# our containerd.
kill_containers() {
    for _ in 1 2 3; do
        found=
        for f in $(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods \
            -name cgroup.procs 2>/dev/null); do
            for p in $(cat "$f" 2>/dev/null); do
                kill -KILL "$p" 2>/dev/null && found=1
            done
        done
        [ -n "$found" ] || break
        sleep 0.2
    done
    pkill -KILL -f "containerd-shim-runc-v2 .*-address $dir/containerd/containerd.sock" 2>/dev/null || true
}

# Unmount everything below $dir (deepest first): volumes, rootfs, netns pins.
unmount_all() {
    for _ in 1 2 3; do
        mounts=$(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        [ -n "$mounts" ] || return 0
        for m in $mounts; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
    done
}

# The containers' logs: the kubelet v1.24 writes them under /var/log/pods
# (with links in /var/log/containers) whatever its root directory; those
# of our Pods are removed (what was there before we started stays).
remove_pod_logs() {
    local d
    for d in /var/log/pods/* /var/log/containers/*; do
        [ -e "$d" ] || [ -L "$d" ] || continue
        grep -qxF "$d" "$dir/logs-before" 2>/dev/null || rm -rf "$d"
    done
}

# The kubelet's cgroups, deepest first (rmdir: they must be empty).
remove_cgroups() {
    for c in /sys/fs/cgroup/*/kubepods; do
        [ -d "$c" ] || continue
        find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
        [ ! -d "$c" ] || echo "cluster.sh: could not remove $c" >&2
    done
}

cleanup() {
    status=$?
    trap - EXIT INT TERM
    # The kubelet first (it would restart what we kill), then the
    # containers, containerd, the control plane, etcd last.
    stop kubelet TERM
    kill_containers
    stop containerd TERM
    stop scheduler KILL # v1.24 ignores SIGTERM without leader election
    stop controller-manager TERM
    stop apiserver TERM
    stop etcd TERM
    unmount_all
    remove_cgroups
    remove_pod_logs
    ip netns del "$netns" 2>/dev/null || true
    if [ -n "${K8SLEASE_NODE_KEEP:-}" ]; then
        echo "cluster.sh: kept $dir" >&2
    else
        rm -rf "$dir" 2>/dev/null || echo "cluster.sh: could not remove all of $dir" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ls -d /var/log/pods/* /var/log/containers/* > "$dir/logs-before" 2>/dev/null || true
ip netns add "$netns" || die "cannot create network namespace $netns"
in_ns ip link set lo up
in_ns ip addr add "$node_ip/32" dev lo
in_ns ip addr add "$service_ip/32" dev lo

# ---- certificates and credentials -----------------------------------------------

pki=$dir/pki
mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=k8slease-node-ca -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
# cert NAME SUBJECT EXTENSIONS
cert() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
        -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
    printf '%s\n' "$3" > "$pki/$1.ext"
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
}
cert apiserver /CN=kube-apiserver "subjectAltName=IP:$node_ip,IP:$service_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
cert kubelet-client "/O=system:nodes/CN=system:node:$node_name" "extendedKeyUsage=clientAuth"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
new_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
admin_token=$(new_token)
kcm_token=$(new_token)
sched_token=$(new_token)
cat > "$pki/tokens.csv" <<EOF
$admin_token,k8slease-admin,k8slease-admin,system:masters
$kcm_token,system:kube-controller-manager,system:kube-controller-manager,system:masters
$sched_token,system:kube-scheduler,system:kube-scheduler
EOF

kubeconfig() { # FILE USER-YAML
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://$node_ip:443
    certificate-authority: $pki/ca.crt
users:
- name: node
  user:
    $2
contexts:
- name: node
  context: {cluster: node, user: node, namespace: default}
current-context: node
EOF
}
kubeconfig "$dir/kubeconfig" "token: $admin_token"
kubeconfig "$dir/controller-manager.kubeconfig" "token: $kcm_token"
kubeconfig "$dir/scheduler.kubeconfig" "token: $sched_token"
kubeconfig "$dir/kubelet.kubeconfig" "client-certificate: $pki/kubelet-client.crt
    client-key: $pki/kubelet-client.key"

# ---- processes ----------------------------------------------------------------

# spawn NAME COMMAND...: in the namespace, in the background, log in NAME.log.
spawn() {
    sp_n=$1
    shift
    # nsenter execs COMMAND: $! is its pid.
    nsenter --net="/run/netns/$netns" "$@" </dev/null >>"$dir/$sp_n.log" 2>&1 &
    echo $! > "$dir/$sp_n.pid"
    disown $! # no "Killed" line from bash when cleanup kills it
}

# wait_for NAME SECONDS WHAT COMMAND...: until COMMAND succeeds; die with
# NAME's log when NAME exits or SECONDS pass.
wait_for() {
    wf_n=$1 wf_s=$2 wf_what=$3
    shift 3
    wf_end=$(($(date +%s) + wf_s))
    until "$@" >/dev/null 2>&1; do
        kill -0 "$(pid_of "$wf_n")" 2>/dev/null || { log_tail "$wf_n"; die "$wf_n exited before $wf_what"; }
        [ "$(date +%s)" -lt "$wf_end" ] || { log_tail "$wf_n"; die "$wf_n: no $wf_what after $wf_s s"; }
        sleep 0.2
    done
}

kubectl_() { in_ns kubectl --kubeconfig "$dir/kubeconfig" --request-timeout=5s "$@"; }

spawn etcd "$assets/etcd" --data-dir "$dir/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster default=http://127.0.0.1:2380
wait_for etcd 60 "health" in_ns curl -sf --max-time 2 http://127.0.0.1:2379/health

spawn apiserver "$assets/kube-apiserver" --advertise-address="$node_ip" --bind-address=0.0.0.0 \
    --secure-port=443 --etcd-servers=http://127.0.0.1:2379 \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-cluster-ip-range="$service_cidr" --authorization-mode=Node,RBAC \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP --allow-privileged=true
wait_for apiserver 60 "/readyz" in_ns curl -sf --max-time 2 --cacert "$pki/ca.crt" \
    -H "Authorization: Bearer $admin_token" "https://$node_ip:443/readyz"
wait_for apiserver 60 'namespace "default"' kubectl_ get namespace default

spawn controller-manager "$assets/kube-controller-manager" \
    --kubeconfig="$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=false --service-cluster-ip-range="$service_cidr" \
    --controllers=deployment,replicaset,endpointslice,endpoint,serviceaccount,serviceaccount-token,root-ca-cert-publisher,nodelifecycle,garbagecollector,namespace,podgc \
    --node-monitor-grace-period=20s --node-monitor-period=2s
spawn scheduler "$assets/kube-scheduler" --kubeconfig="$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig="$dir/scheduler.kubeconfig" \
    --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1

# containerd: its own root, state and socket; the CRI plugin with our
# sandbox image, cgroupfs, the CNI bridge below.
mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/cni/ipam"
cat > "$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox_image"
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
cat > "$dir/cni/net.d/10-k8slease.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "k8slease",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
spawn containerd containerd --config "$dir/containerd/config.toml"
ctr_() { ctr --address "$dir/containerd/containerd.sock" --namespace k8s.io "$@"; }
wait_for containerd 30 "socket" ctr_ version
if [ -n "$images" ]; then
    for img in "$images"/*.tar; do
        [ -e "$img" ] || die "--images $images: no *.tar in it"
        ctr_ images import "$img" >/dev/null 2>"$dir/import.err" ||
            { cat "$dir/import.err" >&2; die "ctr images import $img failed"; }
    done
fi
ctr_ images ls -q | grep -qx "$sandbox_image" ||
    die "no $sandbox_image among the images (make image builds it; --images DIR)"

# The kubelet: everything of its own under $dir/kubelet.
mkdir -p "$dir/kubelet/root" "$dir/kubelet/volume-plugins" "$dir/kubelet/pki"
cat > "$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
address: "$node_ip"
healthzBindAddress: 127.0.0.1
volumePluginDir: "$dir/kubelet/volume-plugins"
featureGates: {DevicePlugins: false}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
EOF
spawn kubelet "$assets/kubelet" --config="$dir/kubelet/config.yaml" \
    --kubeconfig="$dir/kubelet.kubeconfig" --root-dir="$dir/kubelet/root" \
    --cert-dir="$dir/kubelet/pki" --container-runtime=remote \
    --container-runtime-endpoint="unix://$dir/containerd/containerd.sock" \
    --node-ip="$node_ip" --hostname-override="$node_name" --oom-score-adj=0 \
    --pod-infra-container-image="$sandbox_image"

node_ready() {
    [ "$(kubectl_ get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] &&
        [ -z "$(kubectl_ get node "$node_name" -o jsonpath='{.spec.taints}')" ]
}
wait_for kubelet 120 "Ready node without taints" node_ready
wait_for controller-manager 60 'ServiceAccount "default"' kubectl_ -n default get serviceaccount default
wait_for controller-manager 60 'ConfigMap "kube-root-ca.crt"' kubectl_ -n default get configmap kube-root-ca.crt
version=$("$assets/kubelet" --version 2>/dev/null | awk '{ print $2 }')
echo "cluster.sh: node $node_name ($version) Ready in $dir" >&2

printf '#!/bin/sh\nexec "%s" --ctl "%s" "$@"\n' "$(cd "$(dirname "$0")" && pwd)/cluster.sh" "$dir" > "$dir/ctl"
chmod +x "$dir/ctl"
# COMMAND in the background and a wait for it: a trapped signal ends the
# wait at once (a foreground command would hold the trap until it exits),
# and is passed on to COMMAND before everything is stopped.
KUBECONFIG="$dir/kubeconfig" K8SLEASE_NODE_DIR="$dir" K8SLEASE_NODE_CTL="$dir/ctl" \
    K8SLEASE_NODE_CTR="ctr --address $dir/containerd/containerd.sock --namespace k8s.io" \
    K8SLEASE_NODE_NAME="$node_name" K8SLEASE_NODE_VERSION="$version" \
    nsenter --net="/run/netns/$netns" "$@" &
cmd=$!
trap 'kill -TERM "$cmd" 2>/dev/null; wait "$cmd" 2>/dev/null; exit 130' INT
trap 'kill -TERM "$cmd" 2>/dev/null; wait "$cmd" 2>/dev/null; exit 143' TERM
status=0
wait "$cmd" || status=$?
exit "$status"
