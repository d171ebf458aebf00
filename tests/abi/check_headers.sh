#!/bin/sh
# check_headers.sh CC CXX INCLUDE_DIR: every public header compiles alone,
# as strict C11 and as C++.
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
echo "ok: $n headers compile alone as C11 and C++"
