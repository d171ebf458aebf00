#!/bin/sh
# assets.sh BUILD [ASSETS]: print the directory of a node's binaries
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, etcd):
# ASSETS when given, else ../shared/kube-apiserver's v1.24.0, unpacked into
# BUILD/k8s-assets. Exit 2, saying why, when there is neither.
set -eu
build=$1 assets=${2:-}
if [ -z "$assets" ]; then
    top=$(cd "$(dirname "$0")/../.." && pwd)
    [ -x "$top/../shared/kube-apiserver/unpack.sh" ] || {
        echo "no node binaries: give a directory with kube-apiserver, kubelet, ... (NODE_ASSETS=DIR)" >&2
        exit 2
    }
    case $build in /*) ;; *) build=$top/$build ;; esac
    "$top/../shared/kube-apiserver/unpack.sh" "$build/k8s-assets" >/dev/null
    assets=$build/k8s-assets/v1.24.0
fi
[ -x "$assets/kubelet" ] || { echo "$assets: no kubelet there" >&2; exit 2; }
(cd "$assets" && pwd)
