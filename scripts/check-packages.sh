#!/bin/sh
# Install the Debian packages built by build-packages.sh, then build and run
# the examples against the INSTALLED files only, and remove the packages.
#
#   scripts/check-packages.sh [DIR] [--keep]     (DIR default: build/packages)
#
# Checks, each in a scratch directory outside the source tree:
#  1. pkg-config: examples/elect.c with `pkg-config --cflags --libs k8slease`,
#     storage_master.cpp likewise (C++), seed_abi.c with -lk8s_lease_wrapper
#     only, and elect.c against libk8slease.a (static);
#  2. CMake: the installed examples/CMakeLists.txt as a project of its own
#     (find_package(k8slease) -> k8slease::k8slease, k8slease::k8s_lease_wrapper);
#  3. each binary run against the installed k8slease-testserver
#     (examples/test_examples.sh), plus the installed k8slease command.
# The example sources are the ones the -dev package installs in
# /usr/share/doc/libk8slease-dev/examples. --keep leaves the packages
# installed. Needs root (or sudo) to install.
set -eu
cd "$(dirname "$0")/.."
dir=build/packages
keep=""
for a in "$@"; do
    case $a in
    --keep) keep=1 ;;
    *) dir=$a ;;
    esac
done
dir=$(cd "$dir" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

debs=""
for p in libk8slease0 libk8slease-dev k8slease; do
    f=
    for g in "$dir/${p}"_*.deb; do [ -f "$g" ] && f=$g; done
    [ -n "$f" ] || { echo "check-packages: no ${p}_*.deb in $dir" >&2; exit 1; }
    debs="$debs $f"
done

# Tools the checks use (not dependencies of the packages).
missing=""
for p in gcc g++ make cmake pkg-config curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-pkgcheck.XXXXXX")
cleanup() {
    cd /
    rm -rf "$tmp"
    if [ -z "$keep" ]; then
        echo "== removing the packages"
        $sudo apt-get remove -y -qq k8slease libk8slease-dev libk8slease0 >/dev/null ||
            echo "check-packages: apt-get remove failed" >&2
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

echo "== installing:$debs"
$sudo apt-get update -qq
# --reinstall: a package of the same version may be installed already.
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --reinstall --no-install-recommends $missing $debs >"$tmp/apt.log" 2>&1 || {
    cat "$tmp/apt.log"
    exit 1
}
dpkg -L libk8slease0 libk8slease-dev k8slease | grep -E '/(bin|lib|include)/|\.pc$|cmake$' | sort

ex=/usr/share/doc/libk8slease-dev/examples
mkdir "$tmp/src" "$tmp/pc"
for f in elect.c storage_master.cpp seed_abi.c CMakeLists.txt test_examples.sh testserver.sh; do
    if [ -f "$ex/$f" ]; then
        cp "$ex/$f" "$tmp/src/"
    elif [ -f "$ex/$f.gz" ]; then
        gzip -dc "$ex/$f.gz" >"$tmp/src/$f"
    else
        echo "check-packages: $ex/$f is not installed" >&2
        exit 1
    fi
done
cd "$tmp"

echo "== pkg-config"
pkg-config --modversion k8slease k8s_lease_wrapper
flags="-Wall -Wextra -Werror"
set -x
# shellcheck disable=SC2046,SC2086
cc -std=c11 $flags src/elect.c $(pkg-config --cflags --libs k8slease) -o pc/elect
# shellcheck disable=SC2046,SC2086
c++ -std=c++17 $flags -pedantic src/storage_master.cpp $(pkg-config --cflags --libs k8slease) -pthread \
    -o pc/storage_master
# As the Go library's users link: the header from /usr/include, -lk8s_lease_wrapper.
# shellcheck disable=SC2086
cc -std=c11 $flags src/seed_abi.c -lk8s_lease_wrapper -pthread -o pc/seed_abi
# Static: the archive, then the shared libraries it needs.
# shellcheck disable=SC2046,SC2086
cc -std=c11 $flags src/elect.c $(pkg-config --cflags k8slease) -l:libk8slease.a \
    $(pkg-config --libs libcurl libnghttp2 openssl jansson yaml-0.1) -pthread -o pc/elect-static
set +x
if ldd pc/elect-static | grep -q libk8slease; then
    echo "FAIL: elect-static needs libk8slease.so"
    exit 1
fi
# Nothing may come from a source or build tree.
for b in pc/elect pc/storage_master pc/seed_abi; do
    for lib in $(ldd "$b" | sed -n 's/.*k8s.* => \([^ ]*\) .*/\1/p'); do
        case $(readlink -f "$lib") in
        /usr/lib/*) echo "$b: $lib" ;;
        *) echo "FAIL: $b loads $lib"; exit 1 ;;
        esac
    done
done
ldd pc/seed_abi | grep -q 'libk8s_lease_wrapper.so => ' ||
    { echo "FAIL: seed_abi does not load libk8s_lease_wrapper.so"; exit 1; }

echo "== CMake: find_package(k8slease)"
cmake -S src -B cm -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_CXX_FLAGS="$flags" >cm.log 2>&1 || { cat cm.log; exit 1; }
cmake --build cm -- VERBOSE=1 >cm-build.log 2>&1 || { cat cm-build.log; exit 1; }
grep -q "k8slease_DIR:PATH=/usr/lib/.*/cmake/k8slease" cm/CMakeCache.txt ||
    { echo "FAIL: find_package did not use the installed package"; exit 1; }
bad=$(grep -oE -- '(-I|-isystem ?)[^ ]+' cm-build.log | grep -vxE -- '(-I|-isystem ?)/usr/include' || true)
[ -z "$bad" ] || { echo "FAIL: include paths besides /usr/include: $bad"; exit 1; }

echo "== running against the installed k8slease-testserver"
k8slease --version
k8slease-testserver --version
man -w k8slease k8slease-testserver >/dev/null 2>&1 ||
    ls /usr/share/man/man1/k8slease.1* /usr/share/man/man1/k8slease-testserver.1* >/dev/null
export K8SLEASE_TESTSERVER=/usr/bin/k8slease-testserver
for build in pc cm; do
    for t in elect storage_master seed_abi; do
        echo "-- $build/$t"
        EXAMPLE_ELECT=$tmp/$build/elect EXAMPLE_STORAGE_MASTER=$tmp/$build/storage_master \
            EXAMPLE_SEED_ABI=$tmp/$build/seed_abi sh src/test_examples.sh "$t"
    done
done
echo "-- pc/elect-static"
EXAMPLE_ELECT=$tmp/pc/elect-static sh src/test_examples.sh elect
echo "check-packages: all checks passed"
