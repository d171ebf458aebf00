#!/bin/sh
# Install the Debian packages k8slease needs to build and test, if missing.
# Needs root (or sudo) only when something is missing.
set -eu
pkgs="cmake make gcc g++ pkg-config libcurl4-openssl-dev libssl-dev libjansson-dev libyaml-dev
      libmicrohttpd-dev libgnutls28-dev libnghttp2-dev libcmocka-dev openssl curl
      etcd-server etcd-client python3 haproxy strace"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing Debian packages:$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
# haproxy is for tests/integration/envtest.sh (K8SLEASE_ENVTEST_REPLICAS),
# which runs its own as a child process; nothing needs the system service
# that Debian's package may start on install (not where policy-rc.d or the
# lack of an init forbids it). Stopped and disabled when we just installed
# it, best effort: nothing here depends on a service.
case " $missing " in
*" haproxy "*)
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        $sudo systemctl disable --now haproxy >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
        $sudo service haproxy stop >/dev/null 2>&1 || true
    fi ;;
esac
