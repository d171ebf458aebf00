#!/bin/sh
# check_symbols.sh NM LIBRARY GOLDEN: the dynamic symbols LIBRARY defines
# must be exactly those listed in GOLDEN (one per line).
set -eu
nm_tool=$1 lib=$2 golden=$3
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$nm_tool" -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { sub(/@.*/, "", $3); print $3 }' |
    grep -v '^K8SLEASE_0$' | LC_ALL=C sort -u > "$actual"
if ! diff -u "$golden" "$actual"; then
    echo "FAIL: $lib exports differ from $golden (- expected, + actual)" >&2
    exit 1
fi
echo "ok: $(wc -l < "$actual") symbols exported by $(basename "$lib") match $(basename "$golden")"
