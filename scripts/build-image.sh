#!/bin/sh
# build-image.sh [BUILD] [OUT]   (make image)
#
# OCI images of k8slease, with no registry and no daemon, into OUT
# (BUILD/image by default):
#
#   k8slease.tar           registry.example.com/k8slease:VERSION: /usr/bin/k8slease
#                          (entrypoint), /usr/bin/k8slease-hello (deploy/'s stand-in
#                          server), libk8slease.so.0 and libk8s_lease_wrapper.so in
#                          /usr/lib, and the files of exactly the Debian packages they
#                          load (the ldd closure, each library file to its package
#                          with dpkg -S) plus ca-certificates (its bundle at
#                          /etc/ssl/certs/ca-certificates.crt). The list, with
#                          versions: /usr/share/k8slease/image-packages.txt in the
#                          image, and OUT/k8slease.packages.
#   k8slease-nodetest.tar  k8slease.local/k8slease-nodetest:VERSION: the same and the node
#                          suite's programs in /usr/lib/k8slease/nodetest.
#   pause.tar              k8slease.local/pause:3.7: the Pods' sandbox (a static
#                          pause), for a node that reaches no registry.
#
# The packages come from `apt-get download` (the versions installed here,
# the ones the build linked against), kept in OUT/debs. Without man pages,
# changelogs and info (the copyright files stay). BUILD is a configured
# and built tree (make build). Push with e.g.
#   skopeo copy oci-archive:build/image/k8slease.tar docker://REGISTRY/k8slease:VERSION
# or load into a node's containerd: ctr -n k8s.io images import build/image/k8slease.tar
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/image}
case $out in /*) ;; *) out=$PWD/$out ;; esac
for f in "$build/cli/k8slease" "$build/tools/hello/k8slease-hello" "$build/CMakeCache.txt"; do
    [ -e "$f" ] || { echo "build-image.sh: $f missing: build first (make build)" >&2; exit 2; }
done
for t in apt-get dpkg dpkg-deb ldd cc strip; do
    command -v "$t" >/dev/null || { echo "build-image.sh: $t not found" >&2; exit 2; }
done
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || { echo "build-image.sh: no project version in $build/CMakeCache.txt" >&2; exit 2; }

mkdir -p "$out/debs"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root

# ---- the project's files ----------------------------------------------------
DESTDIR=$tmp/install cmake --install "$build" --prefix /usr --strip >/dev/null
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/share/k8slease" "$root/etc/ssl/certs"
cp -a "$tmp/install/usr/bin/k8slease" "$root/usr/bin/"
cp -a "$tmp/install/usr/lib"/libk8slease.so.* "$tmp/install/usr/lib/libk8s_lease_wrapper.so" \
    "$root/usr/lib/"
cp "$build/tools/hello/k8slease-hello" "$root/usr/bin/"
strip --strip-unneeded "$root/usr/bin/k8slease-hello"

# ---- the Debian packages they load --------------------------------------------
# package_of FILE: the package that ships FILE (as installed: with usrmerge
# dpkg knows /lib/... for what sits in /usr/lib/...).
package_of() {
    for po_p in "$1" "$(readlink -f "$1")" "${1#/usr}" "$(readlink -f "$1" | sed 's,^/usr,,')"; do
        po_r=$(dpkg -S "$po_p" 2>/dev/null | head -1) || continue
        [ -n "$po_r" ] && { echo "${po_r%%:*}"; return 0; }
    done
    return 1
}
: > "$tmp/libs"
for elf in "$root/usr/bin/k8slease" "$root/usr/bin/k8slease-hello" "$root/usr/lib"/libk8s*.so*; do
    [ -f "$elf" ] && [ ! -L "$elf" ] || continue
    LD_LIBRARY_PATH=$root/usr/lib ldd "$elf" >"$tmp/ldd" 2>&1 ||
        { cat "$tmp/ldd" >&2; echo "build-image.sh: ldd $elf failed" >&2; exit 1; }
    if grep -q 'not found' "$tmp/ldd"; then
        cat "$tmp/ldd" >&2
        echo "build-image.sh: $elf: a library is missing" >&2
        exit 1
    fi
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' "$tmp/ldd" >> "$tmp/libs"
done
: > "$tmp/pkgs"
for lib in $(sort -u "$tmp/libs"); do
    case $lib in "$root"/*) continue ;; esac
    pkg=$(package_of "$lib") || { echo "build-image.sh: $lib: no Debian package ships it" >&2; exit 1; }
    echo "$pkg $lib" >> "$tmp/pkgs"
done
echo "ca-certificates (the CA bundle)" >> "$tmp/pkgs"
# The installed version (what the build linked against), else the one apt
# offers now (a point release rebuilt it): the same ABI within a release.
for pkg in $(cut -d' ' -f1 "$tmp/pkgs" | sed 's/:.*//' | sort -u); do
    ver=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null) ||
        { echo "build-image.sh: $pkg is not installed" >&2; exit 1; }
    arch=$(dpkg-query -W -f '${Architecture}' "$pkg")
    deb=$(find "$out/debs" -name "${pkg}_*_$arch.deb" | sort | tail -1)
    if [ -z "$deb" ]; then
        (cd "$out/debs" && { apt-get download -q "$pkg=$ver" || apt-get download -q "$pkg"; } \
            >/dev/null 2>"$tmp/apt.err") ||
            { cat "$tmp/apt.err" >&2; echo "build-image.sh: apt-get download $pkg failed" >&2; exit 1; }
        deb=$(find "$out/debs" -name "${pkg}_*_$arch.deb" | sort | tail -1)
    fi
    dpkg-deb -x "$deb" "$root"
    echo "$pkg $(dpkg-deb -f "$deb" Version) $arch" >> "$tmp/packages"
done
sort -o "$tmp/packages" "$tmp/packages"
cat /dev/null "$root/usr/share/ca-certificates/mozilla/"*.crt > "$root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" \
    "$root/usr/share/bug" "$root/usr/share/locale" "$root/usr/sbin" "$root/usr/bin/c_rehash"
find "$root/usr/share/doc" -type f ! -name copyright -delete
find "$root/usr/share/doc" -type l -delete
mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
{
    echo "# The Debian packages of this image (name version architecture): what"
    echo "# /usr/bin/k8slease, k8slease-hello and the libraries load (ldd), and"
    echo "# ca-certificates. Built by k8slease scripts/build-image.sh."
    cat "$tmp/packages"
} > "$root/usr/share/k8slease/image-packages.txt"
cp "$root/usr/share/k8slease/image-packages.txt" "$out/k8slease.packages"

# ---- the images -----------------------------------------------------------------
name=registry.example.com/k8slease:$version
scripts/oci-image.sh "$out/k8slease.tar" "$name" "$root" \
    --env PATH=/usr/bin:/bin --label "org.opencontainers.image.title=k8slease" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.description=k8slease: leader election over Kubernetes Leases" \
    -- /usr/bin/k8slease

if [ -x "$build/tests/node/seed_leader" ]; then
    mkdir -p "$root/usr/lib/k8slease/nodetest"
    cp "$build/tests/node/seed_leader" "$root/usr/lib/k8slease/nodetest/"
    strip --strip-unneeded "$root/usr/lib/k8slease/nodetest/seed_leader"
    scripts/oci-image.sh "$out/k8slease-nodetest.tar" "k8slease.local/k8slease-nodetest:$version" \
        "$root" --env PATH=/usr/bin:/bin:/usr/lib/k8slease/nodetest -- /usr/bin/k8slease
fi

mkdir -p "$tmp/pause"
cc -static -Os -s -o "$tmp/pause/pause" tests/node/pause.c
scripts/oci-image.sh "$out/pause.tar" k8slease.local/pause:3.7 "$tmp/pause" -- /pause

size() { du -k "$1" | cut -f1; }
echo "build-image.sh: $out/k8slease.tar ($name): $(size "$out/k8slease.tar") KiB," \
    "$(wc -l < "$tmp/packages") Debian packages ($out/k8slease.packages)" >&2
