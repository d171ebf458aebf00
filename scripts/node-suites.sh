#!/bin/sh
# node-suites.sh BUILD ASSETS [CTEST ARGS...]   (make node-test)
#
# The node suite (ctest label node) on a real single-node cluster: builds
# the images (scripts/build-image.sh BUILD), starts the cluster of
# tests/node/cluster.sh from ASSETS (kube-apiserver, kubelet,
# kube-controller-manager, kube-scheduler and etcd side by side, as
# ../shared/kube-apiserver/unpack.sh lays v1.24.0 out) with them, runs
# `ctest -L node` in it, and removes it. Needs root and Debian's containerd,
# runc, containernetworking-plugins and iptables (installed here when
# missing). Extra arguments go to ctest (e.g. -R node_crash). Exit status:
# ctest's.
set -eu
[ $# -ge 2 ] || { echo "usage: node-suites.sh BUILD ASSETS [CTEST ARGS...]" >&2; exit 2; }
build=$1 assets=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "node-suites.sh: needs root (a kubelet, containerd)" >&2; exit 2; }
missing=
for p in containerd runc containernetworking-plugins iptables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "node-suites.sh: installing Debian packages:$missing"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    # The cluster runs a containerd of its own (own socket, root and state):
    # the system service the package may have started is not needed.
    case " $missing " in
    *" containerd "*)
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
            systemctl disable --now containerd >/dev/null 2>&1 || true
        elif command -v service >/dev/null 2>&1; then
            service containerd stop >/dev/null 2>&1 || true
        fi ;;
    esac
fi
"$here/scripts/build-image.sh" "$build"
K8SLEASE_NODE_ASSETS=$assets "$here/tests/node/cluster.sh" --images "$build/image" \
    ctest --test-dir "$build" -L node --output-on-failure "$@"
