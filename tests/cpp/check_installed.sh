#!/bin/sh
# check_installed.sh BUILD_DIR SOURCE_DIR CXX [SANITIZER_FLAGS]: a C++ program
# written only against the installed k8slease.hpp (examples/storage_master.cpp)
# builds from an install tree (cmake --install BUILD_DIR --prefix TMP) with
# `pkg-config --cflags --libs k8slease` and with find_package(k8slease), then
# each binary elects, hands over and exits cleanly against the test server
# (examples/test_examples.sh storage_master). SANITIZER_FLAGS: the build's
# -fsanitize flags, which a program linking a sanitized library needs too.
# Environment: K8SLEASE_TESTSERVER (the server binary).
set -eu
build=$1 src=$2 cxx=$3 san=${4:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8slease-installed-cxx.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "cmake --install"; }
[ -f "$prefix/include/k8slease.hpp" ] || fail "k8slease.hpp is not installed"
pc=$(find "$prefix" -name k8slease.pc | head -n 1)
[ -n "$pc" ] || fail "k8slease.pc is not installed"
libdir=$(dirname "$(dirname "$pc")")

echo "== pkg-config ($pc)"
export PKG_CONFIG_PATH="${pc%/*}"
cflags=$(pkg-config --cflags k8slease) libs=$(pkg-config --libs k8slease)
case "$cflags " in
"-I$prefix/include "*) ;;
*) fail "pkg-config --cflags does not start with the install tree: '$cflags'" ;;
esac
case "$cflags" in
*"$src"* | *"$build"*) fail "pkg-config --cflags names the source or build tree: '$cflags'" ;;
esac
mkdir "$tmp/pc"
# shellcheck disable=SC2086
(set -x; "$cxx" -std=c++17 -Wall -Wextra -Werror -pedantic $san "$src/examples/storage_master.cpp" \
    $cflags $libs -pthread -o "$tmp/pc/storage_master") || fail "pkg-config build"

echo "== find_package(k8slease) (examples/CMakeLists.txt as a project of its own)"
cmake -S "$src/examples" -B "$tmp/cm" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror -pedantic $san" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/cm.log" 2>&1 ||
    { cat "$tmp/cm.log"; fail "cmake configure"; }
grep -q "^k8slease_DIR:PATH=$prefix/" "$tmp/cm/CMakeCache.txt" ||
    fail "find_package did not use the install tree: $(grep k8slease_DIR "$tmp/cm/CMakeCache.txt")"
cmake --build "$tmp/cm" --target example_storage_master -- VERBOSE=1 >"$tmp/cm-build.log" 2>&1 ||
    { cat "$tmp/cm-build.log"; fail "cmake build"; }
bad=$(grep -oE -- '(-I|-isystem ?)[^ ]+' "$tmp/cm-build.log" | grep -v -- "$prefix/include" || true)
[ -z "$bad" ] || fail "include paths besides the install tree: $bad"

export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in "$tmp/pc/storage_master" "$tmp/cm/storage_master"; do
    lib=$(ldd "$b" | sed -n 's/.*libk8slease\.so[^ ]* => \([^ ]*\) .*/\1/p')
    case $lib in
    "$libdir"/*) ;;
    *) fail "$b loads libk8slease from '$lib', not the install tree" ;;
    esac
    echo "== $b"
    EXAMPLE_STORAGE_MASTER=$b sh "$src/examples/test_examples.sh" storage_master ||
        fail "$b against the test server"
done
echo "ok: a C++17 program on the installed k8slease.hpp builds with pkg-config and find_package, elects and exits cleanly"
