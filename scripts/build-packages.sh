#!/bin/sh
# Build the Debian packages libk8slease0, libk8slease-dev and k8slease.
#
#   scripts/build-packages.sh [OUTDIR]      (default: build/packages)
#
# Installs the missing build dependencies (dpkg-dev, debhelper and the
# Build-Depends of debian/control; apt-get update first), copies the source
# tree (git's tracked and untracked, not ignored, files) to a temporary
# directory and runs `dpkg-buildpackage -us -uc -b` there, so the work tree
# gets no build products. The .deb, .buildinfo and .changes files and the
# build log (build.log) end up in OUTDIR. Needs root (or sudo) only to
# install packages.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
out=${1:-build/packages}
mkdir -p "$out"
out=$(cd "$out" && pwd)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=""
apt_install() {
    [ -n "$updated" ] || { $sudo apt-get update -qq; updated=1; }
    $sudo apt-get install -y -qq --no-install-recommends "$@"
}

missing=""
for p in dpkg-dev debhelper fakeroot build-essential; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "build-packages: installing$missing"
    # shellcheck disable=SC2086
    apt_install $missing
fi
if ! dpkg-checkbuilddeps >/dev/null 2>&1; then
    echo "build-packages: installing the Build-Depends of debian/control"
    [ -n "$updated" ] || { $sudo apt-get update -qq; updated=1; }
    $sudo apt-get build-dep -y -qq --no-install-recommends "$src"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/k8slease"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard |
        while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done |
        tar -cf - -T - | tar -C "$tmp/k8slease" -xf -
else
    tar --exclude='./build*' --exclude='./obj-*' -cf - . | tar -C "$tmp/k8slease" -xf -
fi

echo "build-packages: dpkg-buildpackage -us -uc -b (log: $out/build.log)"
if ! (cd "$tmp/k8slease" &&
    DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-parallel=$(nproc)}" dpkg-buildpackage -us -uc -b) \
    >"$out/build.log" 2>&1; then
    tail -n 80 "$out/build.log"
    echo "build-packages: FAILED (whole log: $out/build.log)"
    exit 1
fi
rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
mv "$tmp"/*.deb "$tmp"/*.buildinfo "$tmp"/*.changes "$out/"
grep -E '^(1|[0-9]+)?.*tests passed|^[0-9]+% tests passed' "$out/build.log" || true
ls -l "$out"/*.deb
