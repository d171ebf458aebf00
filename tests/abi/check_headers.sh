#!/bin/sh
# check_headers.sh CC CXX INCLUDE_DIR: every public header compiles alone,
# the C headers (*.h) as strict C11 and as C++11, the C++ headers (*.hpp) as
# C++17 and C++20 (where CXX knows it) and not as C++14, with a message.
set -eu
cc=$1 cxx=$2 inc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for h in "$inc"/*.h; do
    name=$(basename "$h")
    printf '#include "%s"\n#include "%s"\nint main(void) { return 0; }\n' "$name" "$name" > "$tmp/c.c"
    "$cc" -std=c11 -Wall -Wextra -pedantic -Werror -I"$inc" -c "$tmp/c.c" -o "$tmp/c.o" ||
        { echo "FAIL: $name does not compile alone as C11"; exit 1; }
    printf '#include "%s"\nint main() { return 0; }\n' "$name" > "$tmp/c.cpp"
    "$cxx" -std=c++11 -Wall -Wextra -pedantic -Werror -I"$inc" -c "$tmp/c.cpp" -o "$tmp/cpp.o" ||
        { echo "FAIL: $name does not compile alone as C++"; exit 1; }
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no header in $inc"; exit 1; }
flags="-Wall -Wextra -pedantic -Werror -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast"
flags="$flags -Wnon-virtual-dtor -Wzero-as-null-pointer-constant"
m=0
for h in "$inc"/*.hpp; do
    [ -f "$h" ] || continue
    name=$(basename "$h")
    printf '#include "%s"\n#include "%s"\nint main() { return 0; }\n' "$name" "$name" > "$tmp/c.cpp"
    for std in c++17 c++20; do
        if [ "$std" = c++20 ] && ! echo 'int main() {}' | "$cxx" -std=c++20 -x c++ -c - -o /dev/null 2>/dev/null; then
            continue
        fi
        # shellcheck disable=SC2086
        "$cxx" -std=$std $flags -I"$inc" -c "$tmp/c.cpp" -o "$tmp/cpp.o" ||
            { echo "FAIL: $name does not compile alone as $std"; exit 1; }
    done
    if "$cxx" -std=c++14 -I"$inc" -c "$tmp/c.cpp" -o "$tmp/cpp.o" >"$tmp/err" 2>&1 ||
        ! grep -q 'needs C++17' "$tmp/err"; then
        echo "FAIL: $name does not say it needs C++17 under -std=c++14"
        exit 1
    fi
    m=$((m + 1))
done
echo "ok: $n headers compile alone as C11 and C++, $m C++ headers as C++17 and C++20"
